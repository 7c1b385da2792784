/**
 * "Change…" on a waiting job: ask for other GPUs or another time limit, try it first (the
 * service's dry run: where it would stand and when it would start, beside where it stands now),
 * then apply it. The form sits above the panel's content, so the panel's redraws (every poll)
 * leave what is typed alone.
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

/** ``wholeArray``: every waiting task of the job array ``id`` belongs to (a row of its tasks). */
export type ChangeCall = (id: string, changes: object, dryRun: boolean, wholeArray: boolean) => Promise<ChangeAnswer>;

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

/** The changes the form's fields ask for, against the job as it is; a string says what is wrong. */
export function changesFrom(w: Workload, gpus: string, limit: string): object | string {
  const out: { [key: string]: unknown } = {};
  const now = Number(w.resources?.gpu ?? 0);
  if (gpus.trim() !== '' && Number(gpus) !== now) {
    if (!/^\d+$/.test(gpus.trim())) {
      return `GPUs must be a whole number, not "${gpus}"`;
    }
    out.resources = { gpu: Number(gpus) };
  }
  if (limit.trim() !== '' && limit.trim() !== formatDuration(w.time_limit)) {
    const seconds = parseDuration(limit);
    if (seconds === null) {
      return `The time limit must look like 30m, 2h or 1h30m, not "${limit}"`;
    }
    out.time_limit = seconds;
  }
  return Object.keys(out).length ? out : 'Nothing to change: give other GPUs or another time limit';
}

/** `#2 in line, starts ~10 min` (or the reason it has no place to tell). */
export function standing(e: Workload['explanation'] | undefined): string {
  if (!e || e.position === undefined) {
    return e?.reason || 'no place in line';
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
  private readonly gpus = document.createElement('input');
  private readonly limit = document.createElement('input');
  private readonly status = el('div', 'jp-ComputeHub-change-status');

  constructor(
    private readonly call: ChangeCall,
    private readonly changed: (id: string) => Promise<void>
  ) {
    this.node.hidden = true;
    this.title.id = 'computehub-change-title';
    this.node.setAttribute('aria-labelledby', this.title.id);
    this.status.setAttribute('role', 'status'); // what the service said, read out
    this.gpus.type = 'number';
    this.gpus.min = '0';
    this.gpus.className = 'jp-ComputeHub-change-gpus';
    this.limit.className = 'jp-ComputeHub-change-limit';
    this.limit.placeholder = 'e.g. 30m, 2h';
    const field = (label: string, input: HTMLInputElement) => {
      const l = el('label', 'jp-ComputeHub-change-field', label);
      l.appendChild(input);
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
    this.node.append(this.title, field('GPUs ', this.gpus), field('Time limit ', this.limit), bar, this.status);
  }

  /** Show the form for waiting job `w`, its fields as the job is now, the keyboard on the first. */
  open(w: Workload): void {
    this.workload = w;
    const tasks = taskIds(w).length;
    this.title.textContent = `Change ${workloadName(w)}${tasks > 1 ? ' (every waiting task of its array)' : ''}`;
    this.gpus.value = String(w.resources?.gpu ?? 0);
    this.limit.value = formatDuration(w.time_limit);
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

  private async submit(dryRun: boolean): Promise<void> {
    const w = this.workload;
    if (!w) {
      return;
    }
    const changes = changesFrom(w, this.gpus.value, this.limit.value);
    if (typeof changes === 'string') {
      this.status.textContent = changes;
      return;
    }
    try {
      const whole = taskIds(w).length > 1;
      const answer = await this.call(w.id, changes, dryRun, whole && !dryRun); // a try: its first task
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
