import { Workload, WorkloadsReport } from '../model';
import { Notice, Noticer, wanted } from '../notify';

function wl(over: Partial<Workload> = {}): Workload {
  return { id: 'w1', name: 'train', user: 'alice', queue: 'vision', kind: 'training', state: 'pending', ...over };
}

function report(workloads: Workload[], thisWorkload: string | null = null): WorkloadsReport {
  return { user: 'alice', workloads, queues: [], this_workload: thisWorkload };
}

function task(index: number, state: string): Workload {
  return wl({ id: `w${20 + index}`, name: 'sweep', state, array: { id: 'w20', index, size: 3, limit: 0 } });
}

describe('notices', () => {
  it('learns what is there at the first look and says nothing of it', () => {
    const n = new Noticer();
    expect(n.update(report([wl({ state: 'failed', reason: 'exit 1' }), task(0, 'running')]))).toEqual([]);
  });

  it('says when waiting work starts, and how work ends', () => {
    const n = new Noticer();
    n.update(report([wl(), wl({ id: 'w2', name: 'eval', state: 'running' }), wl({ id: 'w3', state: 'running' })]));
    expect(n.update(report([wl({ state: 'admitted' }), wl({ id: 'w2', name: 'eval', state: 'running' }),
      wl({ id: 'w3', state: 'running' })]))).toEqual([{ message: 'train is starting', type: 'info', logs: 'w1' }]);
    expect(n.update(report([wl({ state: 'running' }), wl({ id: 'w2', name: 'eval', state: 'finished' }),
      wl({ id: 'w3', state: 'failed', reason: 'exit code 3: out of memory' })]))).toEqual([
      { message: 'eval finished', type: 'success', logs: 'w2' },
      { message: 'train failed: exit code 3: out of memory', type: 'error', logs: 'w3' }
    ]); // admitted → running: it was already said to start
    expect(n.update(report([wl({ state: 'running' })]))).toEqual([]); // ended ones leave the list: no word
  });

  it('says when work is preempted back into line, and when someone else cancels it', () => {
    const n = new Noticer();
    n.update(report([wl({ state: 'running' }), wl({ id: 'w2', state: 'running' }), wl({ id: 'w3', state: 'pending' })]));
    const notices = n.update(report([
      wl({ state: 'pending', preemptions: 1, reason: 'preempted for bob-urgent' }),
      wl({ id: 'w2', state: 'cancelled', reason: 'cancelled by admin: maintenance' }),
      wl({ id: 'w3', state: 'cancelled', reason: 'cancelled by alice' })
    ]));
    expect(notices).toEqual([
      { message: 'train was preempted: preempted for bob-urgent; it waits in line again', type: 'warning', logs: 'w1' },
      { message: 'train was cancelled: cancelled by admin: maintenance', type: 'warning', logs: 'w2' }
    ]);
  });

  it('leaves notebooks and this server alone', () => {
    const n = new Noticer();
    const nb = wl({ id: 'w5', kind: 'notebook' });
    n.update(report([nb, wl({ id: 'w6', state: 'pending' })], 'w6'));
    expect(n.update(report([{ ...nb, state: 'running' }, wl({ id: 'w6', state: 'running' })], 'w6'))).toEqual([]);
  });

  it("says once that a job array's tasks have all ended, not once per task", () => {
    const n = new Noticer();
    n.update(report([task(0, 'running'), task(1, 'pending'), task(2, 'pending')]));
    expect(n.update(report([task(0, 'finished'), task(1, 'running'), task(2, 'pending')]))).toEqual([]);
    expect(n.update(report([task(1, 'failed'), task(2, 'running')]))).toEqual([]);
    expect(n.update(report([task(2, 'finished')]))).toEqual([
      { message: 'Job array sweep w20: all its tasks have ended (computehub jobs --array w20 lists how)',
        type: 'info', logs: '' }
    ]);
    expect(n.update(report([]))).toEqual([]);
  });

  it('keeps to the notices I asked for: all, problems only (warnings and errors) or none', () => {
    const n = new Noticer();
    n.update(report([wl(), wl({ id: 'w2', state: 'running' }), wl({ id: 'w3', state: 'running' })]));
    const notices = n.update(report([wl({ state: 'running' }), wl({ id: 'w2', state: 'finished' }),
      wl({ id: 'w3', state: 'failed', reason: 'exit 1' })]));
    const said = (level: 'all' | 'problems' | 'none') => notices.filter(x => wanted(x, level)).map(x => x.message);
    expect(said('all')).toEqual(['train is starting', 'train finished', 'train failed: exit 1']);
    expect(said('problems')).toEqual(['train failed: exit 1']);
    expect(said('none')).toEqual([]);
    const preempted: Notice = { message: 'x was preempted', type: 'warning', logs: 'w1' };
    expect(wanted(preempted, 'problems')).toBe(true);
  });
});
