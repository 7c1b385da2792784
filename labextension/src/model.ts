/**
 * What the server extension returns, and the pure functions that turn it into
 * the words and numbers the status bar and the panel show. No JupyterLab
 * imports here, so Jest tests it as plain TypeScript.
 */

export type Resources = { [name: string]: number | string };

export interface Placement {
  node: string;
  gpus: number[];
}

export interface Workload {
  id: string;
  name: string;
  user: string;
  queue: string;
  kind: string; // notebook | training | inference | batch
  priority?: string;
  state: string;
  resources?: Resources | null;
  time_limit?: number | null;
  placement?: Placement[];
  position?: number;
  position_in_queue?: number;
  reason?: string | null;
  submitted_at?: number;
  started_at?: number | null;
  preemptions?: number;
  checkpointed_at?: number | null;
  saves_on_stop?: boolean;
  metadata?: { [key: string]: any };
  /** Its place in a job array: the array's id (its first task's), the task's index, how many tasks, the cap. */
  array?: { id: string; index: number; size: number; limit: number } | null;
  /** On a row standing for several waiting tasks of one array (collapseArrays): each one's id and index. */
  waiting_tasks?: string[];
  waiting_indexes?: number[];
  explanation?: {
    position?: number;
    position_in_queue?: number;
    queue_length?: number;
    reason?: string;
    eta_seconds?: number | null;
    eta_reason?: string;
    eta_earliest?: boolean;
  };
  serve_url?: string | null;
}

export interface QueueUsage {
  name: string;
  usage?: Resources | null;
  guaranteed?: Resources | null;
  effective_guaranteed?: Resources | null;
  limit?: Resources | null;
  pending?: number;
  running?: number;
}

export interface WorkloadsReport {
  user: string;
  workloads: Workload[];
  queues: QueueUsage[];
  this_workload: string | null;
  /** Whether the service can mail me (my work may ask for mail), and to which address. */
  mail?: boolean;
  mail_address?: string;
  /** The server's clock when it answered (UNIX seconds). */
  now?: number;
}

/**
 * Seconds the server's clock is ahead of this browser's: the report's `now` less the browser's
 * time when the report came (0 when it has none). The panel counts relative times ("checkpoint
 * saved 4 min ago") on the server's clock, whose times they are, so a browser clock that is off
 * does not shift them.
 */
export function clockOffset(report: WorkloadsReport, browserNow: number): number {
  return typeof report.now === 'number' && isFinite(report.now) ? report.now - browserNow : 0;
}

export interface GpuDevice {
  index: number;
  name: string;
  uuid?: string;
  utilization: number | null; // percent
  memory_used: number | null; // bytes
  memory_total: number | null; // bytes
  temperature: number | null; // °C
  power_watts: number | null;
  power_limit_watts: number | null;
  processes: { pid: number; used_memory: number | null }[];
  history: number[]; // recent utilisation samples, percent, oldest first
}

export interface GpuReport {
  available: boolean;
  reason?: string; // why no GPU is visible
  devices: GpuDevice[];
}

export const PENDING_STATES = ['pending', 'held', 'awaiting_approval'];
export const LIVE_STATES = ['awaiting_approval', 'held', 'pending', 'admitted', 'running', 'preempting', 'cancelling', 'reclaiming'];

const STATE_WORDS: { [state: string]: string } = {
  awaiting_approval: "waiting for an admin's approval",
  pending: 'waiting in the queue',
  held: 'not in line yet',
  admitted: 'GPUs assigned, starting',
  running: 'running',
  preempting: 'being preempted to make room for other work',
  cancelling: 'cancelled: stopping it; its GPUs return once it has stopped',
  reclaiming: 'idle: its GPUs are being reclaimed; stopping it',
  finished: 'finished',
  failed: 'failed',
  cancelled: 'cancelled',
  preempted: 'preempted by higher-priority work',
  reclaimed: 'GPU reclaimed after it sat idle',
  rejected: 'rejected by an admin'
};

/** A state in plain words ("waiting in the queue"). */
export function stateWords(state: string): string {
  return STATE_WORDS[state] ?? state.replace(/_/g, ' ');
}

/** Why a workload is where it is, in the scheduler's own words with its numbers. */
export function reasonText(w: Workload): string {
  const r = w.explanation?.reason || w.reason || '';
  if (r && r !== w.state) {
    return r;
  }
  return stateWords(w.state);
}

/** "~12 min", "~1 h 5 min", "< 1 min", "unknown"; with ``earliest`` (the estimate is only a
 * lower bound: the work would start on GPUs borrowed beyond its queue's guarantee) "≥ 12 min". */
export function formatEta(seconds: number | null | undefined, earliest = false): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds) || seconds < 0) {
    return 'unknown';
  }
  const about = earliest ? '≥ ' : '~';
  if (seconds < 60) {
    return earliest ? '≥ 1 min' : '< 1 min';
  }
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) {
    return `${about}${minutes} min`;
  }
  const h = Math.floor(minutes / 60);
  const m = minutes % 60;
  return m ? `${about}${h} h ${m} min` : `${about}${h} h`;
}

/** "preempted once" / "preempted 3 times" (stopped for other work and put back in line,
 * resuming from its checkpoint); '' for work never preempted. */
export function preemptedText(w: Workload): string {
  const n = w.preemptions ?? 0;
  if (n <= 0) {
    return '';
  }
  return n === 1 ? 'preempted once' : `preempted ${n} times`;
}

/** "checkpoint saved 4 min ago" for running work that reported one in its current run (the
 * launcher sees each save in $COMPUTEHUB_CHECKPOINT_DIR): a preemption now would lose only the
 * work since; "saves when stopped" for work seen saving when preempted (it loses only its
 * restart). '' otherwise. ``now`` in UNIX seconds. */
export function checkpointText(w: Workload, now: number): string {
  if (w.state !== 'running') {
    return '';
  }
  const onStop = w.saves_on_stop ? 'saves when stopped' : '';
  const saved = w.checkpointed_at;
  if (saved === null || saved === undefined || !isFinite(saved)) {
    return onStop;
  }
  if (w.started_at !== null && w.started_at !== undefined && saved < w.started_at) {
    return onStop;
  }
  const said = savedAgo(saved, now);
  return onStop ? `${said} · ${onStop}` : said;
}

function savedAgo(saved: number, now: number): string {
  const minutes = Math.floor(Math.max(0, now - saved) / 60);
  if (minutes < 1) {
    return 'checkpoint saved < 1 min ago';
  }
  const h = Math.floor(minutes / 60);
  const m = minutes % 60;
  const ago = h ? (m ? `${h} h ${m} min` : `${h} h`) : `${m} min`;
  return `checkpoint saved ${ago} ago`;
}

/** Bytes as whole GB (binary, as nvidia-smi shows them) for the status bar: "12", "80". */
export function gigabytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || !isFinite(bytes)) {
    return '?';
  }
  const gb = bytes / 2 ** 30;
  return gb >= 10 || Number.isInteger(gb) ? String(Math.round(gb)) : gb.toFixed(1);
}

/** "NVIDIA A100-SXM4-80GB" → "A100"; "Tesla V100-PCIE-16GB" → "V100"; "NVIDIA H100 80GB HBM3" → "H100". */
export function shortModel(name: string): string {
  let rest = name.trim();
  while (/^(NVIDIA|Tesla|GeForce|Quadro)\s+/i.test(rest)) {
    rest = rest.replace(/^\S+\s+/, '');
  }
  const words = rest.split(/[\s-]+/).filter(Boolean);
  if (!words.length) {
    return name;
  }
  // "RTX 4090", "GTX 1080": the series word alone says little.
  return /^(RTX|GTX)$/i.test(words[0]) && words[1] ? `${words[0]} ${words[1]}` : words[0];
}

/** The GPU part of the status bar: "GPU 1×A100 · 63% · 12/80 GB". */
export function gpuSummary(devices: GpuDevice[]): string {
  if (!devices.length) {
    return '';
  }
  const models = Array.from(new Set(devices.map(d => shortModel(d.name))));
  const utils = devices.map(d => d.utilization).filter((u): u is number => u !== null);
  const util = utils.length ? `${Math.round(utils.reduce((a, b) => a + b, 0) / utils.length)}%` : '?%';
  const sum = (f: (d: GpuDevice) => number | null) =>
    devices.every(d => f(d) !== null) ? devices.reduce((a, d) => a + (f(d) as number), 0) : null;
  const mem = `${gigabytes(sum(d => d.memory_used))}/${gigabytes(sum(d => d.memory_total))} GB`;
  return `GPU ${devices.length}×${models.join('+')} · ${util} · ${mem}`;
}

/** My live workloads that wait, best placed first. */
export function waiting(workloads: Workload[]): Workload[] {
  return workloads
    .filter(w => PENDING_STATES.includes(w.state))
    .sort((a, b) => positionOf(a) - positionOf(b));
}

function positionOf(w: Workload): number {
  return w.explanation?.position_in_queue ?? w.position_in_queue ?? Number.MAX_SAFE_INTEGER;
}

/** "Queued #3 · ~12 min", "Awaiting approval" for work an admin must approve, "Held…" for work
 * that runs after other work. */
export function queuedSummary(w: Workload): string {
  if (w.state === 'awaiting_approval') {
    return 'Awaiting approval';
  }
  if (w.state === 'held') {
    const held = w.explanation?.eta_seconds; // from when what it runs after ends, or its begin time
    const eta = typeof held === 'number' ? ` · ${formatEta(held, w.explanation?.eta_earliest)}` : '';
    const hold = w.metadata?.hold;
    return `Held: ${!hold ? 'runs after other jobs' : hold.until ? 'begins later' : 'held back'}${eta}`;
  }
  const pos = w.explanation?.position_in_queue ?? w.position_in_queue;
  const eta = formatEta(w.explanation?.eta_seconds, w.explanation?.eta_earliest);
  return `Queued #${pos ?? '?'} · ${eta === 'unknown' ? 'ETA unknown' : eta}`;
}

/** The status bar's text. Waiting work comes first: it is what users wonder about. */
export function statusText(
  report: WorkloadsReport | null,
  gpu: GpuReport | null,
  unreachable: boolean
): string {
  const parts: string[] = [];
  const wait = report ? waiting(report.workloads) : [];
  if (wait.length) {
    parts.push(queuedSummary(wait[0]) + (wait.length > 1 ? ` (+${wait.length - 1})` : ''));
  }
  if (gpu && gpu.available && gpu.devices.length) {
    parts.push(gpuSummary(gpu.devices));
  }
  if (!parts.length) {
    const running = report ? report.workloads.filter(w => w.state === 'running' || w.state === 'admitted') : [];
    parts.push(running.length ? `ComputeHub · ${running.length} running` : gpu && !gpu.available ? 'No GPU' : 'ComputeHub');
  }
  return parts.join(' · ') + (unreachable ? ' · offline' : '');
}

/** Requested GPUs of a workload ("2 GPU", "1×a100"), or "" when it asks for none. */
export function gpuRequest(w: Workload): string {
  const r = w.resources || {};
  const flavor = Object.keys(r).find(k => k.startsWith('gpu:'));
  if (flavor) {
    return `${r[flavor]}×${flavor.slice(4)}`;
  }
  const n = Number(r['gpu'] ?? 0);
  return n ? `${n} GPU` : '';
}

/** Where it runs: "local GPU 0,1". */
export function placementText(w: Workload): string {
  return (w.placement || []).map(p => `${p.node} GPU ${p.gpus.join(',')}`).join('; ');
}

/** One queue's GPU use against its guarantee and limit: "3 / 4 guaranteed · limit 8 GPUs". */
export function queueUsageText(q: QueueUsage, resource = 'gpu'): string {
  const used = Number((q.usage || {})[resource] ?? 0);
  const g = (q.effective_guaranteed || q.guaranteed || {})[resource];
  const lim = (q.limit || {})[resource];
  const unit = resource === 'gpu' ? ' GPUs' : '';
  const guaranteed = g === undefined ? `${used}${unit} in use, nothing guaranteed` : `${used} / ${g}${unit} guaranteed`;
  const limit = lim === undefined ? 'no limit' : `limit ${lim}`;
  return `${guaranteed} · ${limit}`;
}

/** Fraction (0..1) of the bar to fill: use against the limit, else the guarantee. */
export function queueFill(q: QueueUsage, resource = 'gpu'): number {
  const used = Number((q.usage || {})[resource] ?? 0);
  const cap = Number((q.limit || {})[resource] ?? (q.effective_guaranteed || q.guaranteed || {})[resource] ?? 0);
  if (!cap) {
    return used ? 1 : 0;
  }
  return Math.max(0, Math.min(1, used / cap));
}

/** An SVG polyline's points for utilisation samples (0..100) in a width×height box. */
export function sparklinePoints(samples: number[], width: number, height: number): string {
  if (!samples.length) {
    return '';
  }
  const n = samples.length;
  const step = n > 1 ? width / (n - 1) : 0;
  return samples
    .map((s, i) => {
      const v = Math.max(0, Math.min(100, s));
      const x = n > 1 ? i * step : width / 2;
      const y = height - (v / 100) * height;
      return `${+x.toFixed(1)},${+y.toFixed(1)}`;
    })
    .join(' ');
}

/** Mean utilisation per sample over several GPUs' histories (aligned at the newest sample). */
export function meanHistory(devices: GpuDevice[]): number[] {
  const len = Math.max(0, ...devices.map(d => d.history.length));
  const out: number[] = [];
  for (let i = 0; i < len; i++) {
    const vals = devices
      .map(d => d.history[d.history.length - len + i])
      .filter((v): v is number => typeof v === 'number');
    out.push(vals.length ? vals.reduce((a, b) => a + b, 0) / vals.length : 0);
  }
  return out;
}

/** What I may do about a workload's hold: hold it (waiting, nobody holds it yet), release it (held
 * by me; an admin's hold only an admin releases), or nothing (a notebook's spawn is never held). */
export function holdAction(w: Workload): 'hold' | 'release' | null {
  const hold = w.metadata?.hold;
  if (w.kind === 'notebook') {
    return null;
  }
  if (w.state === 'pending' || (w.state === 'held' && !hold)) {
    return 'hold';
  }
  return w.state === 'held' && hold && !hold.admin ? 'release' : null;
}

/** Whether to offer to put a waiting workload (or a row of a job array's tasks waiting in a state)
 * first among my own (the service's `top`): it is no notebook's spawn, and another of mine, not of
 * the row, waits in its queue and class (with nothing else of mine there, it is first already). */
export function firstable(w: Workload, mine: Workload[]): boolean {
  const waits = (x: Workload) => PENDING_STATES.includes(x.state);
  const row = new Set(w.waiting_tasks ?? [w.id]);
  return waits(w) && w.kind !== 'notebook' &&
    mine.some(x => !row.has(x.id) && waits(x) && x.queue === w.queue && x.priority === w.priority);
}

/** Which of my workloads can still be cancelled (not one already being cancelled or reclaimed). */
export function cancellable(w: Workload): boolean {
  return LIVE_STATES.includes(w.state) && w.state !== 'cancelling' && w.state !== 'reclaiming';
}
