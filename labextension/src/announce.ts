/**
 * What the panel's polite live region says: one line per workload (where a waiting job
 * stands and why; the state of the others), and one when ComputeHub cannot be reached.
 * Only what a listener needs to hear when it changes: no ETA (it ticks every minute),
 * no utilisation, no timestamps. `Announcer` keeps one element for the panel's life and
 * touches a line only when its words change, so a screen reader reads just that line.
 */

import { workloadName } from './arrays';
import { PENDING_STATES, Workload, reasonText, stateWords } from './model';

const QUIET_STATES = ['admitted', 'running']; // their reason adds nothing a listener needs

/** "train: waiting, position 2 of 5 in vision — needs 2 × a100; …", "train: running". */
export function announcement(w: Workload): string {
  const name = workloadName(w);
  if (w.state === 'pending') {
    const e = w.explanation || {};
    const pos = e.position_in_queue ?? w.position_in_queue;
    const where = `position ${pos ?? 'unknown'}${e.queue_length ? ` of ${e.queue_length}` : ''} in ${w.queue}`;
    return `${name}: waiting, ${where} — ${reasonText(w)}`;
  }
  const words = stateWords(w.state);
  const reason = reasonText(w);
  if (QUIET_STATES.includes(w.state) || reason === words || reason === w.state) {
    return `${name}: ${words}`;
  }
  return `${name}: ${words} — ${reason}`;
}

/** The lines to announce, keyed (a workload's id, or "service" for an outage). */
export function announcements(workloads: Workload[], problem = ''): Map<string, string> {
  const lines = new Map<string, string>();
  if (problem) {
    lines.set('service', problem);
  }
  const waitingFirst = [...workloads].sort(
    (a, b) => Number(PENDING_STATES.includes(b.state)) - Number(PENDING_STATES.includes(a.state))
  );
  for (const w of waitingFirst) {
    lines.set(w.id, announcement(w));
  }
  return lines;
}

/** A polite live region that changes only the lines whose words changed. */
export class Announcer {
  readonly node: HTMLElement;
  private lines = new Map<string, HTMLElement>();

  constructor(cls: string) {
    this.node = document.createElement('div');
    this.node.className = cls;
    this.node.setAttribute('aria-live', 'polite');
    this.node.setAttribute('aria-atomic', 'false');
  }

  update(wanted: Map<string, string>): void {
    for (const [key, line] of this.lines) {
      if (!wanted.has(key)) {
        line.remove();
        this.lines.delete(key);
      }
    }
    for (const [key, text] of wanted) {
      let line = this.lines.get(key);
      if (!line) {
        line = document.createElement('div');
        line.dataset.key = key;
        this.node.appendChild(line);
        this.lines.set(key, line);
      }
      if (line.textContent !== text) {
        line.textContent = text;
      }
    }
  }
}
