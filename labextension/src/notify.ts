/**
 * JupyterLab notifications for my work, from what two looks of the panel's poll differ in:
 * a job that starts after waiting, one that ends (finished, failed, cancelled by someone else),
 * one preempted back into line, and a job array once none of its tasks is live (one notice for
 * the array, not one per task). The first look only learns what is there; a notebook server is
 * left to the hub's spawn page, and this server's own workload is not reported to itself.
 */

import { workloadName } from './arrays';
import { LIVE_STATES, PENDING_STATES, Workload, WorkloadsReport } from './model';

export interface Notice {
  message: string;
  type: 'info' | 'success' | 'warning' | 'error';
  /** The workload whose logs the notice's button opens ('' for none). */
  logs: string;
}

/** Which notices I want (the extension's `notifications` setting). */
export type NoticeLevel = 'all' | 'problems' | 'none';

/** Whether I asked to be told ``n``: problems are the notices that warn or report an error. */
export function wanted(n: Notice, level: NoticeLevel): boolean {
  return level === 'all' || (level === 'problems' && (n.type === 'warning' || n.type === 'error'));
}

interface Seen {
  state: string;
  preemptions: number;
}

/** Keeps what the last look saw; ``update`` says what changed since, as notices. */
export class Noticer {
  private seen: Map<string, Seen> | null = null;
  private arrays = new Map<string, { name: string; live: Set<string> }>();

  update(report: WorkloadsReport): Notice[] {
    const mine = report.workloads.filter(w => w.kind !== 'notebook' && w.id !== report.this_workload);
    const first = this.seen === null;
    const before = this.seen ?? new Map<string, Seen>();
    const out: Notice[] = [];
    for (const w of mine) {
      const was = before.get(w.id);
      if (!first && !w.array && was) {
        const notice = change(w, was, report.user);
        if (notice) {
          out.push(notice);
        }
      }
    }
    out.push(...this.arraysDone(mine, first));
    this.seen = new Map(mine.map(w => [w.id, { state: w.state, preemptions: w.preemptions ?? 0 }]));
    return out;
  }

  /** An array none of whose tasks is live any more, that had some at the last look. */
  private arraysDone(mine: Workload[], first: boolean): Notice[] {
    const live = new Map<string, Set<string>>();
    for (const w of mine) {
      if (w.array && LIVE_STATES.includes(w.state)) {
        const tasks = live.get(w.array.id) ?? new Set<string>();
        tasks.add(w.id);
        live.set(w.array.id, tasks);
        if (!this.arrays.has(w.array.id)) {
          this.arrays.set(w.array.id, { name: w.name, live: tasks });
        }
      }
    }
    const out: Notice[] = [];
    for (const [id, known] of [...this.arrays]) {
      const now = live.get(id);
      if (now) {
        known.live = now;
        continue;
      }
      this.arrays.delete(id);
      if (!first) {
        const name = known.name ? `${known.name} ` : '';
        out.push({
          message: `Job array ${name}${id}: all its tasks have ended (computehub jobs --array ${id} lists how)`,
          type: 'info',
          logs: ''
        });
      }
    }
    return out;
  }
}

/** What one workload's change since the last look says, if anything. */
export function change(w: Workload, was: Seen, user: string): Notice | null {
  const name = workloadName(w);
  const reason = w.reason ? `: ${w.reason}` : '';
  if ((w.preemptions ?? 0) > was.preemptions && LIVE_STATES.includes(w.state)) {
    return { message: `${name} was preempted${reason}; it waits in line again`, type: 'warning', logs: w.id };
  }
  if (w.state === was.state || !LIVE_STATES.includes(was.state)) {
    return null;
  }
  switch (w.state) {
    case 'admitted':
    case 'running': // it waited: now it starts (a job that started at once needs no word)
      return PENDING_STATES.includes(was.state) ? { message: `${name} is starting`, type: 'info', logs: w.id } : null;
    case 'finished':
      return { message: `${name} finished`, type: 'success', logs: w.id };
    case 'failed':
      return { message: `${name} failed${reason}`, type: 'error', logs: w.id };
    case 'preempted':
    case 'reclaimed':
    case 'rejected':
      return { message: `${name} was ${w.state}${reason}`, type: 'warning', logs: w.id };
    case 'cancelled':
      // Cancelled by its owner (from here, the CLI or a notebook): she knows.
      return (w.reason ?? '').startsWith(`cancelled by ${user}`)
        ? null
        : { message: `${name} was cancelled${reason}`, type: 'warning', logs: w.id };
    default:
      return null;
  }
}
