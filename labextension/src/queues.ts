/** The panel's "My queues" section: each queue's use against its guarantee and limit. */

import { el } from './dom';
import { QueueUsage, queueFill, queueUsageText } from './model';

export function queueSection(queues: QueueUsage[]): HTMLElement {
  const sec = el('section', 'jp-ComputeHub-queues');
  sec.appendChild(el('h3', '', 'My queues'));
  for (const q of queues) {
    sec.appendChild(queueRow(q));
  }
  return sec;
}

function queueRow(q: QueueUsage): HTMLElement {
  const row = el('div', 'jp-ComputeHub-queue');
  row.dataset.queue = q.name;
  row.appendChild(el('div', 'jp-ComputeHub-name', `${q.name} · ${q.running ?? 0} running, ${q.pending ?? 0} waiting`));
  const bar = el('div', 'jp-ComputeHub-bar');
  bar.setAttribute('aria-hidden', 'true'); // the usage is in words below it
  const fill = el('div', 'jp-ComputeHub-bar-fill');
  fill.style.width = `${Math.round(queueFill(q) * 100)}%`;
  bar.appendChild(fill);
  row.appendChild(bar);
  row.appendChild(el('div', 'jp-ComputeHub-facts', queueUsageText(q)));
  return row;
}
