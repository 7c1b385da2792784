// The store counts relative times on the server's clock: the API module is replaced here (no
// notebook server), the store itself is the real one.
jest.mock('../api', () => ({ fetchWorkloads: jest.fn(), fetchGpu: jest.fn() }));

import { fetchGpu, fetchWorkloads } from '../api';
import { checkpointText, Workload, WorkloadsReport } from '../model';
import { ComputeHubStore } from '../store';

const report = (now?: number): WorkloadsReport => ({
  user: 'alice',
  workloads: [],
  queues: [],
  this_workload: null,
  ...(now === undefined ? {} : { now })
});

function answer(r: WorkloadsReport): void {
  (fetchWorkloads as jest.Mock).mockResolvedValue(r);
  (fetchGpu as jest.Mock).mockResolvedValue({ devices: [] });
}

describe('ComputeHubStore clock', () => {
  const browser = 1_800_000_000;
  beforeEach(() => jest.spyOn(Date, 'now').mockReturnValue(browser * 1000));
  afterEach(() => jest.restoreAllMocks());

  it('measures the server clock against this browser clock at each report', async () => {
    const store = new ComputeHubStore();
    answer(report(browser - 7200)); // the browser's clock is two hours ahead
    await store.poll();
    expect(store.clockOffset).toBe(-7200);
    expect(store.serverNow()).toBe(browser - 7200);
    // A checkpoint saved a minute ago by the server's clock reads so, not as 2 h 1 min ago.
    const running = { state: 'running', started_at: browser - 9000, checkpointed_at: browser - 7260 } as Workload;
    expect(checkpointText(running, store.serverNow())).toBe('checkpoint saved 1 min ago');
    expect(checkpointText(running, Date.now() / 1000)).toBe('checkpoint saved 2 h 1 min ago');
  });

  it('counts on the browser clock when the report has no time, and keeps the last offset on failure', async () => {
    const store = new ComputeHubStore();
    answer(report());
    await store.poll();
    expect(store.clockOffset).toBe(0);
    answer(report(browser - 30));
    await store.poll();
    expect(store.clockOffset).toBe(-30);
    (fetchWorkloads as jest.Mock).mockRejectedValue(new Error('unreachable'));
    await expect(store.poll()).rejects.toThrow('unreachable');
    expect(store.clockOffset).toBe(-30);
    expect(store.unreachable).toBe(true);
  });
});
