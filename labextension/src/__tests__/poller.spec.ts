import { Poller } from '../poller';

/** A manual clock: timers run only when the test advances it. */
class Clock {
  now = 0;
  timers: { at: number; fn: () => void; id: number }[] = [];
  private next = 1;
  set = (fn: () => void, ms: number) => {
    const id = this.next++;
    this.timers.push({ at: this.now + ms, fn, id });
    return id;
  };
  clear = (id: unknown) => {
    this.timers = this.timers.filter(t => t.id !== id);
  };
  /** Runs due timers one at a time, letting each poll's promise settle. */
  async advance(ms: number): Promise<void> {
    const end = this.now + ms;
    for (;;) {
      this.timers.sort((a, b) => a.at - b.at);
      const t = this.timers[0];
      if (!t || t.at > end) {
        break;
      }
      this.timers.shift();
      this.now = t.at;
      t.fn();
      await flush();
    }
    this.now = end;
  }
}

const flush = () => new Promise(r => setImmediate(r));

function make(results: boolean[], hidden = { value: false }) {
  const clock = new Clock();
  const calls: number[] = [];
  const poller = new Poller(
    async () => {
      calls.push(clock.now);
      const ok = results.length ? results.shift() : true;
      if (!ok) {
        throw new Error('unreachable');
      }
    },
    { interval: 1000, maxInterval: 8000, isHidden: () => hidden.value, setTimer: clock.set, clearTimer: clock.clear }
  );
  return { clock, calls, poller, hidden };
}

describe('Poller', () => {
  it('polls at the interval while things work', async () => {
    const { clock, calls, poller } = make([]);
    poller.start();
    await flush();
    await clock.advance(3500);
    expect(calls).toEqual([0, 1000, 2000, 3000]);
  });

  it('backs off after failures, capped, and recovers', async () => {
    const { clock, calls, poller } = make([false, false, false, false, false, true]);
    expect([0, 1, 2, 3, 4].map(n => poller.delay(n))).toEqual([1000, 2000, 4000, 8000, 8000]);
    poller.start();
    await flush();
    await clock.advance(40000);
    // fail at 0 → +2 s, fail → +4 s, fail → +8 s, fail → +8 s (cap), fail → +8 s, ok → +1 s ...
    expect(calls.slice(0, 8)).toEqual([0, 2000, 6000, 14000, 22000, 30000, 31000, 32000]);
    expect(poller.failures).toBe(0);
  });

  it('is quiet while the page is hidden and polls at once when it shows', async () => {
    const { clock, calls, poller, hidden } = make([]);
    poller.start();
    await flush();
    hidden.value = true;
    poller.visibilityChanged();
    await clock.advance(60000);
    expect(calls).toEqual([0]);
    hidden.value = false;
    poller.visibilityChanged();
    await flush();
    expect(calls).toEqual([0, 60000]);
    await clock.advance(1000);
    expect(calls).toEqual([0, 60000, 61000]);
  });

  it('stops and refreshes on demand', async () => {
    const { clock, calls, poller } = make([]);
    poller.start();
    await flush();
    await clock.advance(500);
    await poller.refresh();
    expect(calls).toEqual([0, 500]);
    poller.stop();
    await clock.advance(10000);
    expect(calls).toEqual([0, 500]);
    expect(poller.isRunning).toBe(false);
  });

  it('takes a new interval at once: the poll already waited for comes at the new pace', async () => {
    const { clock, calls, poller } = make([]);
    poller.start();
    await flush();
    poller.setInterval(5000);     // the next poll was due at 1000
    await clock.advance(5500);
    expect(calls).toEqual([0, 5000]);
    poller.setInterval(500);      // at 5500; the next was due at 10000
    await clock.advance(1100);
    expect(calls).toEqual([0, 5000, 6000, 6500]);
  });

  it('backs off to at most the longest wait, or the interval if that is longer', async () => {
    const { poller } = make([]);
    poller.setInterval(20000);    // longer than maxInterval (8000)
    expect(poller.delay(0)).toBe(20000);
    expect(poller.delay(3)).toBe(20000);
    poller.setInterval(1000);
    expect(poller.delay(3)).toBe(8000);
  });
});
