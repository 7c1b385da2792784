import {
  GpuDevice,
  cancellable,
  firstable,
  holdAction,
  checkpointText,
  Workload,
  WorkloadsReport,
  formatEta,
  gigabytes,
  gpuRequest,
  gpuSummary,
  meanHistory,
  placementText,
  preemptedText,
  queueFill,
  queueUsageText,
  queuedSummary,
  reasonText,
  shortModel,
  sparklinePoints,
  statusText,
  waiting
} from '../model';

const GiB = 2 ** 30;

function device(over: Partial<GpuDevice> = {}): GpuDevice {
  return {
    index: 0,
    name: 'NVIDIA A100-SXM4-80GB',
    utilization: 63,
    memory_used: 12 * GiB,
    memory_total: 80 * GiB,
    temperature: 55,
    power_watts: 210.4,
    power_limit_watts: 400,
    processes: [],
    history: [],
    ...over
  };
}

function wl(over: Partial<Workload> = {}): Workload {
  return { id: 'w1', name: 'train', user: 'alice', queue: 'vision', kind: 'training', state: 'running', ...over };
}

function report(workloads: Workload[]): WorkloadsReport {
  return { user: 'alice', workloads, queues: [], this_workload: null };
}

describe('formatting', () => {
  it('formats ETAs in words', () => {
    expect(formatEta(null)).toBe('unknown');
    expect(formatEta(undefined)).toBe('unknown');
    expect(formatEta(-1)).toBe('unknown');
    expect(formatEta(30)).toBe('< 1 min');
    expect(formatEta(12 * 60 + 10)).toBe('~12 min');
    expect(formatEta(3600)).toBe('~1 h');
    expect(formatEta(3900)).toBe('~1 h 5 min');
  });

  it('marks an ETA that is only a lower bound (work that would borrow GPUs)', () => {
    expect(formatEta(12 * 60 + 10, true)).toBe('≥ 12 min');
    expect(formatEta(3900, true)).toBe('≥ 1 h 5 min');
    expect(formatEta(30, true)).toBe('≥ 1 min');
    expect(formatEta(null, true)).toBe('unknown');
  });

  it('says how often work was preempted', () => {
    expect(preemptedText(wl({}))).toBe('');
    expect(preemptedText(wl({ preemptions: 0 }))).toBe('');
    expect(preemptedText(wl({ preemptions: 1 }))).toBe('preempted once');
    expect(preemptedText(wl({ state: 'pending', preemptions: 3 }))).toBe('preempted 3 times');
  });

  it('says when running work last saved a checkpoint', () => {
    const run = { state: 'running', started_at: 1000 };
    expect(checkpointText(wl(run), 2000)).toBe('');
    expect(checkpointText(wl({ ...run, checkpointed_at: 1990 }), 2000)).toBe('checkpoint saved < 1 min ago');
    expect(checkpointText(wl({ ...run, checkpointed_at: 1000 }), 1000 + 4 * 60 + 30)).toBe(
      'checkpoint saved 4 min ago'
    );
    expect(checkpointText(wl({ ...run, checkpointed_at: 1000 }), 1000 + 3900)).toBe(
      'checkpoint saved 1 h 5 min ago'
    );
    expect(checkpointText(wl({ ...run, checkpointed_at: 1000 }), 1000 + 7200)).toBe('checkpoint saved 2 h ago');
    // a save of an earlier run, or work not running: nothing to say
    expect(checkpointText(wl({ ...run, checkpointed_at: 900 }), 2000)).toBe('');
    expect(checkpointText(wl({ state: 'pending', checkpointed_at: 1990 }), 2000)).toBe('');
    // work seen saving when it was preempted loses only its restart
    expect(checkpointText(wl({ ...run, saves_on_stop: true }), 2000)).toBe('saves when stopped');
    expect(checkpointText(wl({ ...run, checkpointed_at: 1990, saves_on_stop: true }), 2000)).toBe(
      'checkpoint saved < 1 min ago · saves when stopped'
    );
    expect(checkpointText(wl({ state: 'pending', saves_on_stop: true }), 2000)).toBe('');
  });

  it('shows memory in GB like nvidia-smi', () => {
    expect(gigabytes(80 * GiB)).toBe('80');
    expect(gigabytes(12.4 * GiB)).toBe('12');
    expect(gigabytes(1.5 * GiB)).toBe('1.5');
    expect(gigabytes(null)).toBe('?');
  });

  it('shortens GPU model names', () => {
    expect(shortModel('NVIDIA A100-SXM4-80GB')).toBe('A100');
    expect(shortModel('Tesla V100-PCIE-16GB')).toBe('V100');
    expect(shortModel('NVIDIA H100 80GB HBM3')).toBe('H100');
    expect(shortModel('NVIDIA GeForce RTX 4090')).toBe('RTX 4090');
  });

  it('summarises GPUs as the status bar shows them', () => {
    expect(gpuSummary([device()])).toBe('GPU 1×A100 · 63% · 12/80 GB');
    const two = [device(), device({ index: 1, utilization: 37, memory_used: 4 * GiB })];
    expect(gpuSummary(two)).toBe('GPU 2×A100 · 50% · 16/160 GB');
    expect(gpuSummary([device({ utilization: null, memory_used: null })])).toBe('GPU 1×A100 · ?% · ?/80 GB');
    expect(gpuSummary([])).toBe('');
  });

  it('describes requests, placement and reasons', () => {
    expect(gpuRequest(wl({ resources: { gpu: 2, 'gpu:a100': 2 } }))).toBe('2×a100');
    expect(gpuRequest(wl({ resources: { gpu: 1, cpu: '4000m' } }))).toBe('1 GPU');
    expect(gpuRequest(wl({ resources: { cpu: '4000m' } }))).toBe('');
    expect(placementText(wl({ placement: [{ node: 'local', gpus: [0, 1] }] }))).toBe('local GPU 0,1');
    const pending = wl({ state: 'pending', explanation: { reason: 'vision uses 1/1 guaranteed GPUs' } });
    expect(reasonText(pending)).toBe('vision uses 1/1 guaranteed GPUs');
    expect(reasonText(wl({ state: 'preempting', reason: 'preempting' }))).toBe('being preempted to make room for other work');
    expect(reasonText(wl({ state: 'cancelled', reason: 'cancelled by alice' }))).toBe('cancelled by alice');
    expect(reasonText(wl({ state: 'cancelling', reason: '' }))).toBe('cancelled: stopping it; its GPUs return once it has stopped');
    expect(cancellable(wl({ state: 'cancelling' }))).toBe(false);
    expect(cancellable(wl({ state: 'preempting' }))).toBe(true);
    expect(cancellable(wl({ state: 'reclaiming' }))).toBe(false);
  });
});

describe('status bar', () => {
  const pending = (pos: number, eta: number | null, id = `p${pos}`) =>
    wl({ id, state: 'pending', explanation: { position_in_queue: pos, eta_seconds: eta, reason: 'r' } });

  it('says where my best-placed waiting work stands', () => {
    expect(queuedSummary(pending(3, 12 * 60))).toBe('Queued #3 · ~12 min');
    expect(queuedSummary(pending(1, null))).toBe('Queued #1 · ETA unknown');
    const borrowing = wl({ state: 'pending', explanation: { position_in_queue: 2, eta_seconds: 7200, eta_earliest: true } });
    expect(queuedSummary(borrowing)).toBe('Queued #2 · ≥ 2 h');
    expect(queuedSummary(wl({ state: 'awaiting_approval' }))).toBe('Awaiting approval');
    expect(queuedSummary(wl({ state: 'held' }))).toBe('Held: runs after other jobs');
    // Estimated from when what it runs after ends (the service's explanation of held work).
    expect(queuedSummary(wl({ state: 'held', explanation: { eta_seconds: 600 } }))).toBe(
      'Held: runs after other jobs · ~10 min'
    );
    expect(queuedSummary(wl({ state: 'held', explanation: { eta_seconds: null } }))).toBe(
      'Held: runs after other jobs'
    );
    // Held by hand, or until its begin time: said so, not as work that runs after other work.
    expect(queuedSummary(wl({ state: 'held', metadata: { hold: { by: 'alice' } } }))).toBe('Held: held back');
    const begins = wl({ state: 'held', metadata: { hold: { by: 'alice', until: 1 } },
                        explanation: { eta_seconds: 7200, eta_earliest: true } });
    expect(queuedSummary(begins)).toBe('Held: begins later · ≥ 2 h');
    // Put first among my own: only where another of mine waits in the same queue and class.
    const a = wl({ id: 'a', state: 'pending', priority: 'training' });
    const b = wl({ id: 'b', state: 'held', priority: 'training' });
    expect(firstable(a, [a, b])).toBe(true);
    expect(firstable(a, [a])).toBe(false);
    expect(firstable(a, [a, { ...b, priority: 'preemptible' }])).toBe(false);
    expect(firstable(a, [a, { ...b, queue: 'nlp' }])).toBe(false);
    expect(firstable(a, [a, { ...b, state: 'running' }])).toBe(false);
    expect(firstable({ ...a, kind: 'notebook' }, [a, b])).toBe(false);
    // A row of an array's tasks waiting in line: first when something of mine outside the row waits.
    const arr = { id: 'w9', index: 0, size: 3, limit: 0 };
    const t0 = wl({ id: 'w9', state: 'pending', priority: 'training', array: arr });
    const t1 = wl({ id: 'w10', state: 'pending', priority: 'training', array: { ...arr, index: 1 } });
    const tasks = { ...t0, waiting_tasks: ['w9', 'w10'] };
    expect(firstable(tasks, [t0, t1])).toBe(false);
    expect(firstable(tasks, [t0, t1, b])).toBe(true);
    expect(firstable({ ...tasks, state: 'held' }, [t0, t1, b])).toBe(true);    // they go first once released
    expect(firstable({ ...tasks, state: 'running' }, [t0, t1, b])).toBe(false);
    // Hold what waits; release my own hold, never an admin's.
    expect(holdAction(wl({ state: 'pending' }))).toBe('hold');
    expect(holdAction(wl({ state: 'held' }))).toBe('hold'); // held for what it runs after only
    expect(holdAction(wl({ state: 'held', metadata: { hold: { by: 'alice', admin: false } } }))).toBe('release');
    expect(holdAction(wl({ state: 'held', metadata: { hold: { by: 'ada', admin: true } } }))).toBeNull();
    expect(holdAction(wl({ state: 'running' }))).toBeNull();
    expect(holdAction(wl({ state: 'pending', kind: 'notebook' }))).toBeNull();
    // Work in line (with a place) comes before work held for the jobs it runs after.
    const held = report([wl({ id: 'h', state: 'held' }), pending(5, 60, 'q')]);
    expect(waiting(held.workloads).map(w => w.id)).toEqual(['q', 'h']);
    expect(statusText(report([wl({ id: 'h', state: 'held' })]), null, false)).toBe('Held: runs after other jobs');
    const r = report([pending(4, 100, 'a'), wl(), pending(2, 600, 'b')]);
    expect(waiting(r.workloads).map(w => w.id)).toEqual(['b', 'a']);
    expect(statusText(r, null, false)).toBe('Queued #2 · ~10 min (+1)');
  });

  it('shows the GPUs while running, queue first when both', () => {
    const gpu = { available: true, devices: [device()] };
    expect(statusText(report([wl()]), gpu, false)).toBe('GPU 1×A100 · 63% · 12/80 GB');
    expect(statusText(report([pending(1, 60)]), gpu, false)).toBe('Queued #1 · ~1 min · GPU 1×A100 · 63% · 12/80 GB');
  });

  it('falls back to counts, no GPU, and says when offline', () => {
    const none = { available: false, reason: 'NVML not found', devices: [] };
    expect(statusText(report([wl(), wl({ id: 'x', state: 'admitted' })]), none, false)).toBe('ComputeHub · 2 running');
    expect(statusText(report([]), none, false)).toBe('No GPU');
    expect(statusText(null, null, true)).toBe('ComputeHub · offline');
    // The last known state stays while the service is unreachable.
    expect(statusText(report([pending(1, null)]), none, true)).toBe('Queued #1 · ETA unknown · offline');
  });
});

describe('queues', () => {
  it('shows use against guarantee and limit', () => {
    const q = { name: 'vision', usage: { gpu: 3 }, effective_guaranteed: { gpu: 4 }, limit: { gpu: 8 } };
    expect(queueUsageText(q)).toBe('3 / 4 GPUs guaranteed · limit 8');
    expect(queueFill(q)).toBeCloseTo(3 / 8);
    const open = { name: 'org', usage: {}, guaranteed: null, limit: null };
    expect(queueUsageText(open)).toBe('0 GPUs in use, nothing guaranteed · no limit');
    expect(queueFill(open)).toBe(0);
    expect(queueFill({ name: 'x', usage: { gpu: 2 }, limit: null, guaranteed: { gpu: 1 } })).toBe(1);
  });
});

describe('sparkline', () => {
  it('maps samples into the box, clamped', () => {
    expect(sparklinePoints([], 100, 20)).toBe('');
    expect(sparklinePoints([50], 100, 20)).toBe('50,10');
    expect(sparklinePoints([0, 100, 150], 100, 20)).toBe('0,20 50,0 100,0');
  });

  it('averages several GPUs aligned at the newest sample', () => {
    const a = device({ history: [10, 20, 30] });
    const b = device({ history: [50, 70] });
    expect(meanHistory([a, b])).toEqual([10, 35, 50]);
    expect(meanHistory([])).toEqual([]);
  });
});
