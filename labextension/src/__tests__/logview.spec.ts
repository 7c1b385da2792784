import { ApiError } from '../apierror';
import { FIRST_LINES, LogFollower, LogPiece, MAX_LINES } from '../logview';

/** A log the "service" serves: bytes appended by the test, answered like GET logs?tail / ?after. */
class FakeLog {
  text = '';
  exists = true;
  readMax = 1 << 20;
  calls: { tail?: number; after?: number }[] = [];

  fetch = async (_id: string, query: { tail?: number; after?: number }): Promise<LogPiece> => {
    this.calls.push(query);
    if (!this.exists) {
      throw new ApiError('no logs recorded for workload w1 (yet)', 404, 'not_found');
    }
    if (query.after === undefined) {
      const cut = this.text.lastIndexOf('\n') + 1;
      const lines = this.text.split('\n');
      if (lines[lines.length - 1] === '') {
        lines.pop();
      }
      return { lines: lines.slice(-(query.tail ?? 200)), offset: cut, partial: cut < this.text.length };
    }
    const data = this.text.slice(query.after, query.after + this.readMax);
    const more = query.after + data.length < this.text.length;
    const cut = data.lastIndexOf('\n') + 1;
    const lines = data.slice(0, cut).split('\n').slice(0, -1);
    return { lines, offset: query.after + cut, more };
  };
}

describe('LogFollower', () => {
  it('shows the last lines, then only what is new, each line once', async () => {
    const log = new FakeLog();
    log.text = 'a\nb\nhal';
    const f = new LogFollower('w1', log.fetch);
    await f.open();
    expect(log.calls[0]).toEqual({ tail: FIRST_LINES });
    expect(f.lines).toEqual(['a', 'b']); // the line still being written waits
    expect(await f.update()).toBe(false);
    log.text += 'f\nc\n';
    expect(await f.update()).toBe(true);
    expect(f.text).toBe('a\nb\nhalf\nc');
    expect(log.calls.slice(1)).toEqual([{ after: 4 }, { after: 4 }]);
  });

  it('reads on while the service says there is more, and keeps the last MAX_LINES', async () => {
    const log = new FakeLog();
    const f = new LogFollower('w1', log.fetch);
    await f.open();
    log.readMax = 1000;
    log.text = Array.from({ length: MAX_LINES + 10 }, (_, i) => `line ${i}`).join('\n') + '\n';
    let rounds = 0;
    while (await f.update()) {
      rounds++;
    }
    expect(rounds).toBeGreaterThan(1); // more than eight reads of 1000 bytes: the rest at the next polls
    expect(f.lines.length).toBe(MAX_LINES);
    expect(f.lines[0]).toBe('line 10');
    expect(f.lines[MAX_LINES - 1]).toBe(`line ${MAX_LINES + 9}`);
  });

  it("says the service's words while there is no log, and reads it from the start once there is", async () => {
    const log = new FakeLog();
    log.exists = false;
    const f = new LogFollower('w1', log.fetch);
    await f.open();
    expect(f.text).toBe('no logs recorded for workload w1 (yet)');
    expect(await f.update()).toBe(false);
    log.exists = true;
    log.text = 'first\n';
    expect(await f.update()).toBe(true);
    expect(f.text).toBe('first');
    expect(log.calls[log.calls.length - 1]).toEqual({ after: 0 });
  });

  it('keeps what it has when the service is unreachable, and says why', async () => {
    const log = new FakeLog();
    log.text = 'one\n';
    const f = new LogFollower('w1', log.fetch);
    await f.open();
    const down = async (): Promise<LogPiece> => {
      throw new ApiError('ComputeHub is unreachable: timeout', 502, 'unreachable');
    };
    (f as any).fetchPiece = down;
    expect(await f.update()).toBe(true);
    expect(f.lines).toEqual(['one']);
    expect(f.message).toBe('ComputeHub is unreachable: timeout');
    (f as any).fetchPiece = log.fetch;
    log.text += 'two\n';
    expect(await f.update()).toBe(true);
    expect(f.text).toBe('one\ntwo');
  });

  it('reads each new line once when a poll comes while the last update is still in flight', async () => {
    const log = new FakeLog();
    log.text = 'a\n';
    const f = new LogFollower('w1', log.fetch);
    await f.open();
    log.text += 'b\n';
    const [one, two] = await Promise.all([f.update(), f.update()]);
    expect([one, two]).toEqual([true, false]);
    expect(f.lines).toEqual(['a', 'b']);
  });
});
