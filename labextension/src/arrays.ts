/**
 * Job arrays in the panel: a task named by its array and index, and an array's waiting tasks
 * shown as one row (as squeue shows them) whose buttons act on all of them in one request.
 */

import { PENDING_STATES, Workload } from './model';

/** How a workload is named to a person: its name, and for a job array's task the array and index ("sweep w0000012[3]"; a collapsed row's indexes, "[5-19]"). */
export function workloadName(w: Workload): string {
  if (w.array) {
    return `${w.name ? `${w.name} ` : ''}${w.array.id}[${compactIndexes(w.waiting_indexes ?? [w.array.index])}]`;
  }
  return w.name || w.id;
}

/** "0-3,7,9-11": runs of consecutive indexes as ranges. */
export function compactIndexes(xs: number[]): string {
  const out: string[] = [];
  let start = 0;
  xs.forEach((x, i) => {
    if (i === 0 || xs[i - 1] !== x - 1) {
      start = x;
    }
    if (i === xs.length - 1 || xs[i + 1] !== x + 1) {
      out.push(start === x ? `${x}` : `${start}-${x}`);
    }
  });
  return out.join(',');
}

/** Each job array's waiting tasks of one state as one row (the first, with every task's id and index), as squeue shows them; the rest as they are. */
export function collapseArrays(ws: Workload[]): Workload[] {
  const out: Workload[] = [];
  const rows = new Map<string, Workload>();
  for (const w of ws) {
    if (!w.array || !PENDING_STATES.includes(w.state)) {
      out.push(w);
      continue;
    }
    const key = `${w.array.id} ${w.state}`;
    let row = rows.get(key);
    if (!row) {
      row = { ...w, waiting_tasks: [], waiting_indexes: [] };
      rows.set(key, row);
      out.push(row);
    }
    row.waiting_tasks!.push(w.id);
    row.waiting_indexes!.push(w.array.index);
  }
  return out;
}

/** The workloads a row acts on: the tasks it stands for, or itself. */
export function taskIds(w: Workload): string[] {
  return w.waiting_tasks ?? [w.id];
}
