/**
 * "Change…" on a waiting job: ask for other GPUs, CPU or memory, another time limit, queue or
 * name, try it first (the service's dry run: where it would stand and when it would start,
 * beside where it stands now), then apply it. The form sits above the panel's content, so the
 * panel's redraws (every poll) leave what is typed alone. A priority class is changed from the
 * command line or ``%update`` (``--priority``).
 */

import { ApiError } from './apierror';
import { el } from './dom';
import { Workload, formatEta } from './model';
import { taskIds, workloadName } from './arrays';

/** What the service answers to a change (``PATCH workloads/{id}``, ``dry_run``: only tried). */
export interface ChangeAnswer extends Workload {
  dry_run?: boolean;
  explanation_before?: Workload['explanation'];
}

/** ``row``: the state of a row of the job array's tasks ``id`` belongs to: every task of it
 * waiting in that state changes (null: ``id`` alone). */
export type ChangeCall = (id: string, changes: object, dryRun: boolean, row: string | null) => Promise<ChangeAnswer>;

const RETRY_AFTER_MS = 1100; // the service's one dry run a second per caller, and a little

const UNITS: { [unit: string]: number } = { s: 1, m: 60, h: 3600, d: 86400 };

/** Seconds from `90m`, `2h`, `1h30m`, `1d` or a number of seconds; null when it is none of them. */
export function parseDuration(text: string): number | null {
  const t = text.trim().toLowerCase();
  if (/^\d+(\.\d+)?$/.test(t)) {
    return Number(t) > 0 ? Number(t) : null;
  }
  const parts = t.match(/^(\d+[dhms])+$/) ? t.match(/\d+[dhms]/g) : null;
  if (!parts) {
    return null;
  }
  const total = parts.reduce((sum, p) => sum + Number(p.slice(0, -1)) * UNITS[p.slice(-1)], 0);
  return total > 0 ? total : null;
}

/** `2h`, `1h30m`, `45m`, `90s`: how a limit is shown in the form. */
export function formatDuration(seconds: number | null | undefined): string {
  if (!seconds) {
    return '';
  }
  const s = Math.round(seconds);
  if (s % 60) {
    return `${s}s`;
  }
  const h = Math.floor(s / 3600);
  const m = (s % 3600) / 60;
  return `${h ? `${h}h` : ''}${m ? `${m}m` : ''}`;
}

/** What the form's fields hold, as typed. */
export interface ChangeFields {
  gpus: string;
  cpu: string;
  memory: string;
  limit: string;
  queue: string;
  name: string;
}

const BINARY: [string, number][] = [
  ['Ti', 2 ** 40],
  ['Gi', 2 ** 30],
  ['Mi', 2 ** 20],
  ['Ki', 2 ** 10]
];

/** `64Gi`, `512Mi` or bytes: how memory (bytes, as the service answers) is shown in the form. */
export function formatMemory(bytes: unknown): string {
  const n = Number(bytes ?? 0);
  if (!n) {
    return '';
  }
  const unit = BINARY.find(([, size]) => n % size === 0);
  return unit ? `${n / unit[1]}${unit[0]}` : String(n);
}

/** `2` for `2000m`, `500m` as it is: how CPU (millicores, as the service answers) is shown. */
export function formatCpu(cpu: unknown): string {
  const t = String(cpu ?? '').trim();
  const milli = t.match(/^(\d+)m$/);
  if (!t || t === '0' || t === '0m') {
    return '';
  }
  return milli && Number(milli[1]) % 1000 === 0 ? String(Number(milli[1]) / 1000) : t;
}

/** The fields as they show the job now (what the form opens with). */
export function fieldsOf(w: Workload): ChangeFields {
  const r = w.resources || {};
  return {
    gpus: String(r.gpu ?? 0),
    cpu: formatCpu(r.cpu),
    memory: formatMemory(r.memory),
    limit: formatDuration(w.time_limit),
    queue: w.queue,
    name: w.name || ''
  };
}

/** The changes the form's fields ask for, against the job as it is; a string says what is wrong.
 * Only what differs from what the form opened with is sent (the service checks the rest). */
export function changesFrom(w: Workload, f: ChangeFields): object | string {
  const was = fieldsOf(w);
  const out: { [key: string]: unknown } = {};
  const resources: { [key: string]: unknown } = {};
  const differs = (key: keyof ChangeFields) => f[key].trim() !== '' && f[key].trim() !== was[key];
  if (differs('gpus')) {
    if (!/^\d+$/.test(f.gpus.trim())) {
      return `GPUs must be a whole number, not "${f.gpus}"`;
    }
    resources.gpu = Number(f.gpus);
  }
  if (differs('cpu')) {
    if (!/^(\d+(\.\d+)?|\d+m)$/.test(f.cpu.trim())) {
      return `CPU must be a number of cores (2, 0.5) or millicores (500m), not "${f.cpu}"`;
    }
    resources.cpu = f.cpu.trim();
  }
  if (differs('memory')) {
    if (!/^\d+(\.\d+)?([KMGT]i?)?$/.test(f.memory.trim())) {
      return `Memory must look like 64Gi, 512Mi or a number of bytes, not "${f.memory}"`;
    }
    resources.memory = f.memory.trim();
  }
  if (Object.keys(resources).length) {
    out.resources = resources;
  }
  if (differs('limit')) {
    const seconds = parseDuration(f.limit);
    if (seconds === null) {
      return `The time limit must look like 30m, 2h or 1h30m, not "${f.limit}"`;
    }
    out.time_limit = seconds;
  }
  if (differs('queue')) {
    out.queue = f.queue.trim();
  }
  if (f.name.trim() !== was.name) {
    out.name = f.name.trim();
  }
  return Object.keys(out).length ? out : 'Nothing to change: change a field first';
}

/** `#2 in line, starts ~10 min` (or the reason it has no place to tell). */
export function standing(e: Workload['explanation'] | undefined): string {
  if (!e || e.position === undefined) {
    if (typeof e?.eta_seconds === 'number') {
      // Held, it runs after other work: from when that ends.
      const start = e.eta_seconds < 1 ? 'starts now' : `starts ${formatEta(e.eta_seconds, e.eta_earliest)}`;
      return `${start} once what it runs after ends`;
    }
    return e?.eta_reason || e?.reason || 'no place in line';
  }
  const eta = e.eta_seconds;
  const start =
    eta === null || eta === undefined
      ? 'start unknown'
      : eta < 1
        ? 'starts now'
        : `starts ${formatEta(eta, e.eta_earliest)}`;
  const released = (e.eta_reason || '').endsWith('(if released now)') ? ' if released now' : '';
  return `#${e.position} in line, ${start}${released}`;
}

export class ChangeForm {
  readonly node = el('section', 'jp-ComputeHub-change');
  private workload: Workload | null = null;
  private readonly title = el('h3', '', '');
  private readonly gpus = input('gpus', 'number');
  private readonly cpu = input('cpu', 'text', 'e.g. 4, 500m');
  private readonly memory = input('memory', 'text', 'e.g. 64Gi');
  private readonly limit = input('limit', 'text', 'e.g. 30m, 2h');
  private readonly queue = document.createElement('select');
  private readonly name = input('name', 'text');
  private readonly status = el('div', 'jp-ComputeHub-change-status');

  /** ``queues``: the queues my work may go to (the panel's "My queues"). */
  constructor(
    private readonly call: ChangeCall,
    private readonly changed: (id: string) => Promise<void>,
    private readonly queues: () => string[] = () => []
  ) {
    this.node.hidden = true;
    this.title.id = 'computehub-change-title';
    this.node.setAttribute('aria-labelledby', this.title.id);
    this.status.setAttribute('role', 'status'); // what the service said, read out
    this.gpus.min = '0';
    this.queue.className = 'jp-ComputeHub-change-queue';
    const field = (label: string, control: HTMLElement) => {
      const l = el('label', 'jp-ComputeHub-change-field', label);
      l.appendChild(control);
      return l;
    };
    const button = (text: string, cls: string, act: () => void) => {
      const b = el('button', `jp-ComputeHub-button ${cls}`, text);
      b.onclick = act;
      return b;
    };
    const bar = el('div', 'jp-ComputeHub-actions');
    bar.append(
      button('Try', 'jp-ComputeHub-change-try', () => void this.submit(true)),
      button('Apply', 'jp-ComputeHub-change-apply', () => void this.submit(false)),
      button('Close', 'jp-ComputeHub-change-close', () => this.close())
    );
    this.node.append(
      this.title,
      field('GPUs ', this.gpus),
      field('CPU ', this.cpu),
      field('Memory ', this.memory),
      field('Time limit ', this.limit),
      field('Queue ', this.queue),
      field('Name ', this.name),
      bar,
      this.status
    );
  }

  /** Show the form for waiting job `w`, its fields as the job is now, the keyboard on the first. */
  open(w: Workload): void {
    this.workload = w;
    const tasks = taskIds(w).length;
    this.title.textContent = `Change ${workloadName(w)}${tasks > 1 ? ` (its ${tasks} ${w.state} tasks)` : ''}`;
    const f = fieldsOf(w);
    this.gpus.value = f.gpus;
    this.cpu.value = f.cpu;
    this.memory.value = f.memory;
    this.limit.value = f.limit;
    this.queue.replaceChildren(
      ...[...new Set([w.queue, ...this.queues()])].map(q => {
        const o = document.createElement('option');
        o.value = o.textContent = q;
        return o;
      })
    );
    this.queue.value = f.queue;
    this.name.value = f.name;
    this.status.textContent = 'Try a change to see when it would start; Apply makes it.';
    this.node.hidden = false;
    this.gpus.focus();
  }

  close(): void {
    const w = this.workload;
    this.workload = null;
    this.node.hidden = true;
    if (w) {
      void this.changed(w.id); // the panel as it is now, the keyboard back on the job
    }
  }

  /** The service gives each caller one dry run a second (each is a simulation): a second Try
   * within it is made once the second has passed, not refused. */
  private async tryTwice(id: string, changes: object, dryRun: boolean, row: string | null): Promise<ChangeAnswer> {
    try {
      return await this.call(id, changes, dryRun, row);
    } catch (e) {
      if (!(dryRun && e instanceof ApiError && e.status === 429)) {
        throw e;
      }
      this.status.textContent = 'Trying…';
      await new Promise(resolve => setTimeout(resolve, RETRY_AFTER_MS));
      return await this.call(id, changes, dryRun, row);
    }
  }

  private async submit(dryRun: boolean): Promise<void> {
    const w = this.workload;
    if (!w) {
      return;
    }
    const changes = changesFrom(w, {
      gpus: this.gpus.value,
      cpu: this.cpu.value,
      memory: this.memory.value,
      limit: this.limit.value,
      queue: this.queue.value,
      name: this.name.value
    });
    if (typeof changes === 'string') {
      this.status.textContent = changes;
      return;
    }
    try {
      const whole = taskIds(w).length > 1;
      const row = whole && !dryRun ? w.state : null; // a try: its first task
      const answer = await this.tryTwice(w.id, changes, dryRun, row);
      if (dryRun) {
        this.status.textContent =
          `With the change${whole ? ' (its first task)' : ''}: ${standing(answer.explanation)} ` +
          `(now: ${standing(answer.explanation_before)}). Nothing changed yet.`;
        return;
      }
      this.close();
    } catch (e) {
      const message = e instanceof ApiError || e instanceof Error ? e.message : String(e);
      this.status.textContent = `Could not ${dryRun ? 'try' : 'make'} the change: ${message}`;
    }
  }
}

function input(field: string, type: string, placeholder = ''): HTMLInputElement {
  const i = document.createElement('input');
  i.type = type;
  i.className = `jp-ComputeHub-change-${field}`;
  i.placeholder = placeholder;
  return i;
}
