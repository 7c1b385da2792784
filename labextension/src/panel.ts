/**
 * The side panel: this server's GPUs, my notebooks, jobs and services (state,
 * position, ETA, the reason in plain words, a utilisation sparkline, actions) and
 * my queues' usage against guarantee and limit. Plain DOM, redrawn on each change.
 *
 * Accessibility: a redraw puts the keyboard focus back on the same control (each has a
 * `data-focus-key`); the waiting jobs' position and reason go to a polite live region
 * (announce.ts) that outlives redraws; pictures (sparklines, bars) are hidden from
 * assistive technology, their numbers are in the text next to them.
 */

import { Widget } from '@lumino/widgets';

import { Announcer, announcements } from './announce';
import { arrayAction, cancelWorkload, changeWorkload, fetchLogPiece, holdOrRelease, setMail } from './api';
import { el } from './dom';
import { LogFollower } from './logview';
import {
  Workload,
  cancellable,
  firstable,
  holdAction,
  formatEta,
  gpuRequest,
  meanHistory,
  placementText,
  preemptedText,
  checkpointText,
  reasonText,
  stateWords,
  LIVE_STATES
} from './model';
import { collapseArrays, taskIds, workloadName } from './arrays';
import { ChangeForm } from './change';
import { gpuSection, sparkline } from './gpus';
import { queueSection } from './queues';
import { ComputeHubStore } from './store';

export class ComputeHubPanel extends Widget {
  private logs: LogFollower | null = null; // the open log, followed while its job may still write
  private logsLive = false;
  private logsAtEnd = true; // the log box was scrolled to its end: it stays there as lines come
  private armed = ''; // a workload whose Cancel was clicked once and awaits confirmation
  private actionError = '';
  private readonly content = el('div', 'jp-ComputeHub-content');
  private readonly announcer = new Announcer('jp-ComputeHub-live');
  private focusAfterRender = ''; // a control to focus once drawn (a `data-focus-key`)
  private readonly change = new ChangeForm(
    changeWorkload,
    id => this.changed(id),
    () => (this.store.report?.queues ?? []).map(q => q.name)
  );

  constructor(private readonly store: ComputeHubStore) {
    super();
    this.id = 'computehub-panel';
    this.addClass('jp-ComputeHubPanel');
    this.title.caption = 'ComputeHub';
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'ComputeHub');
    this.node.append(this.change.node, this.content, this.announcer.node); // the form on top: toasts cover the foot
    store.changed.connect(this.render, this);
    store.changed.connect(this.followLogs, this);
    this.render();
  }

  dispose(): void {
    this.store.changed.disconnect(this.render, this);
    this.store.changed.disconnect(this.followLogs, this);
    super.dispose();
  }

  /** At each poll, the open log's new lines; one last read once its job has ended. */
  private async followLogs(): Promise<void> {
    const logs = this.logs;
    if (!logs || !this.logsLive || !this.store.report) {
      return;
    }
    const w = this.store.report.workloads.find(x => x.id === logs.id);
    this.logsLive = !!w && LIVE_STATES.includes(w.state);
    const changed = await logs.update();
    if (logs === this.logs && (changed || !this.logsLive)) {
      this.render();
    }
  }

  render(): void {
    // Where the keyboard focus is, to put it back on the same control after the redraw.
    const active = document.activeElement as HTMLElement | null;
    const had = !!active && this.content.contains(active);
    const key = this.focusAfterRender || (had ? active?.dataset.focusKey || '' : '');
    this.focusAfterRender = '';
    const root = el('div', 'jp-ComputeHub-body');
    root.appendChild(el('h2', 'jp-ComputeHub-title', 'ComputeHub'));
    root.appendChild(this.banner());
    root.appendChild(gpuSection(this.store.gpu));
    root.appendChild(this.workSection());
    root.appendChild(queueSection(this.store.report?.queues || []));
    const logs = this.logs;
    if (logs) {
      const box = el('section', 'jp-ComputeHub-logs');
      const head = el('div', 'jp-ComputeHub-logs-head');
      const title = el('h3', '', `Logs of ${logs.id}${this.logsLive ? ' (following)' : ''}`);
      title.id = 'computehub-logs-title';
      const close = el('button', 'jp-ComputeHub-button', 'Close');
      close.setAttribute('aria-label', `Close the logs of ${logs.id}`);
      close.dataset.focusKey = 'logs-close';
      const shown = logs.id;
      close.onclick = () => {
        this.logs = null;
        this.focusAfterRender = `logs:${shown}`;
        this.render();
      };
      head.append(title, close);
      box.setAttribute('aria-labelledby', title.id);
      box.appendChild(head);
      // A box that scrolls: reachable with Tab so the keyboard can scroll it.
      const before = this.content.querySelector<HTMLElement>('.jp-ComputeHub-logs-text');
      const pre = el('pre', 'jp-ComputeHub-logs-text', logs.text);
      pre.tabIndex = 0;
      pre.setAttribute('role', 'region');
      pre.setAttribute('aria-labelledby', title.id);
      pre.dataset.focusKey = 'logs-text';
      box.appendChild(pre);
      root.appendChild(box);
      if (before) {
        this.logsAtEnd = before.scrollTop + before.clientHeight >= before.scrollHeight - 4;
      }
      pre.onscroll = () => {
        this.logsAtEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      };
      const top = before?.scrollTop ?? 0;
      requestAnimationFrame(() => {
        pre.scrollTop = this.logsAtEnd ? pre.scrollHeight : top; // new lines in view, unless scrolled up
      });
    }
    this.content.replaceChildren(root);
    const report = this.store.report;
    this.announcer.update(announcements(collapseArrays(report?.workloads || []), this.problem()));
    if (key) {
      const again = this.content.querySelector<HTMLElement>(`[data-focus-key="${CSS.escape(key)}"]`);
      // The control is gone (its job ended): the focus goes to its section, not to the page.
      (again || this.content.querySelector<HTMLElement>('.jp-ComputeHub-work > h3'))?.focus();
    }
  }

  /** The outage or failed action the banner shows, without its timestamps (for the live region). */
  private problem(): string {
    const s = this.store;
    if (s.unreachable) {
      return s.error.startsWith('ComputeHub') ? s.error : `ComputeHub is unreachable: ${s.error}`;
    }
    return this.actionError;
  }

  private banner(): HTMLElement {
    const s = this.store;
    const b = el('div', 'jp-ComputeHub-banner');
    if (s.unreachable) {
      b.classList.add('jp-mod-offline');
      const since = s.errorSince ? ` since ${s.errorSince.toLocaleTimeString()}` : '';
      const shown = s.report ? `showing what was known at ${s.lastUpdate?.toLocaleTimeString()}` : 'nothing known yet';
      // The server extension's messages already name ComputeHub ("ComputeHub at … is unreachable: …").
      const what = s.error.startsWith('ComputeHub') ? s.error : `ComputeHub is unreachable: ${s.error}`;
      b.textContent = `${what} (${since.trim() || 'now'}; ${shown}; retrying)`;
    } else if (this.actionError) {
      b.classList.add('jp-mod-offline');
      b.textContent = this.actionError;
    } else {
      b.textContent = s.lastUpdate ? `Updated ${s.lastUpdate.toLocaleTimeString()}` : 'Loading…';
    }
    return b;
  }

  private workSection(): HTMLElement {
    const sec = el('section', 'jp-ComputeHub-work');
    const h = el('h3', '', 'My notebooks, jobs and services');
    h.tabIndex = -1; // where the focus goes when the control it was on disappears
    sec.appendChild(h);
    const report = this.store.report;
    if (!report) {
      return sec;
    }
    if (!report.workloads.length) {
      sec.appendChild(el('div', 'jp-ComputeHub-muted', 'Nothing queued or running.'));
    }
    for (const w of collapseArrays(report.workloads)) {
      // A job array's waiting tasks are one row; its buttons act on each of them.
      sec.appendChild(this.workload(w, w.id === report.this_workload));
    }
    return sec;
  }

  private workload(w: Workload, here: boolean): HTMLElement {
    const row = el('div', 'jp-ComputeHub-workload');
    row.dataset.workloadId = w.id;
    row.dataset.state = w.state;
    const head = el('div', 'jp-ComputeHub-name');
    head.appendChild(el('span', '', `${workloadName(w)} `));
    head.appendChild(el('span', 'jp-ComputeHub-kind', `${w.kind}${here ? ' (this server)' : ''}`));
    head.appendChild(el('span', `jp-ComputeHub-state jp-ComputeHub-state-${w.state}`, w.state.replace(/_/g, ' ')));
    row.appendChild(head);
    const facts: string[] = [`queue ${w.queue}`];
    const req = gpuRequest(w);
    if (req) {
      facts.push(req);
    }
    if (w.state === 'pending') {
      const e = w.explanation || {};
      const pos = e.position_in_queue ?? w.position_in_queue;
      facts.push(`position ${pos ?? '?'}${e.queue_length ? ` of ${e.queue_length}` : ''}`);
      facts.push(`ETA ${formatEta(e.eta_seconds, e.eta_earliest)}`);
    } else if (w.state === 'held' && typeof w.explanation?.eta_seconds === 'number') {
      // It runs after other work: estimated from when that ends.
      facts.push(`ETA ${formatEta(w.explanation.eta_seconds, w.explanation.eta_earliest)}`);
    }
    const where = placementText(w);
    if (where) {
      facts.push(where);
    }
    const preempted = preemptedText(w);
    if (preempted) {
      facts.push(preempted);
    }
    const saved = checkpointText(w, this.store.serverNow());
    if (saved) {
      facts.push(saved);
    }
    row.appendChild(el('div', 'jp-ComputeHub-facts', facts.join(' · ')));
    const reason = reasonText(w);
    if (reason !== w.state) {
      // "running" needs no words beyond its badge; everything else says why, in the scheduler's words.
      const words = reason === stateWords(w.state) ? reason : `${stateWords(w.state)}: ${reason}`;
      row.appendChild(el('div', 'jp-ComputeHub-reason', words));
    }
    const gpu = this.store.gpu;
    if (here && w.state === 'running' && gpu?.available && gpu.devices.length) {
      row.appendChild(sparkline(meanHistory(gpu.devices)));
    }
    row.appendChild(this.actions(w, here));
    return row;
  }

  private actions(w: Workload, here: boolean): HTMLElement {
    const bar = el('div', 'jp-ComputeHub-actions');
    // This server's own workload is stopped from the hub's control panel, not from inside itself.
    if (cancellable(w) && !here) {
      const armed = this.armed === w.id;
      const b = el('button', 'jp-ComputeHub-button jp-ComputeHub-cancel', armed ? 'Really cancel?' : 'Cancel');
      b.setAttribute('aria-label', armed ? `Really cancel? (${workloadName(w)})` : `Cancel ${workloadName(w)}`);
      b.dataset.focusKey = `cancel:${w.id}`;
      b.onclick = () => void this.cancel(w, armed);
      bar.appendChild(b);
    }
    const hold = here ? null : holdAction(w);
    if (hold) {
      const label = hold === 'hold' ? 'Hold' : 'Release';
      const b = el('button', `jp-ComputeHub-button jp-ComputeHub-${hold}`, label);
      b.setAttribute('aria-label', `${label} ${workloadName(w)}`);
      b.dataset.focusKey = `${hold}:${w.id}`;
      b.onclick = () => void this.perform(hold, w, () => onRow(w, hold, id => holdOrRelease(id, hold)));
      bar.appendChild(b);
    }
    if (!here && firstable(w, this.store.report?.workloads ?? [])) {
      const b = el('button', 'jp-ComputeHub-button jp-ComputeHub-first', 'First');
      b.setAttribute('aria-label', `Put ${workloadName(w)} first among my waiting jobs`);
      b.title = 'Start it before my other waiting jobs of its queue (nobody else moves)';
      b.dataset.focusKey = `first:${w.id}`;
      b.onclick = () => void this.perform('put first', w, () => onRow(w, 'top', id => holdOrRelease(id, 'top')));
      bar.appendChild(b);
    }
    if (changeable(w) && !here) {
      const b = el('button', 'jp-ComputeHub-button jp-ComputeHub-change-open', 'Change…');
      b.setAttribute('aria-label', `Change ${workloadName(w)}: resources, time limit, queue, name`);
      b.dataset.focusKey = `change:${w.id}`;
      b.onclick = () => this.change.open(w);
      bar.appendChild(b);
    }
    if (this.store.report?.mail && w.kind !== 'notebook' && !here && LIVE_STATES.includes(w.state)) {
      // A toggle: mail me when it ends (keeping whatever else it mails about).
      const types: string[] = w.metadata?.mail ?? [];
      const on = types.includes('end');
      const b = el('button', 'jp-ComputeHub-button jp-ComputeHub-mail', 'Mail at end');
      b.setAttribute('aria-pressed', String(on));
      b.setAttribute('aria-label', `Mail me when ${workloadName(w)} ends`);
      const to = this.store.report.mail_address;
      b.title = to ? `Mail ${to} when it ends` : 'Mail me when it ends';
      b.dataset.focusKey = `mail:${w.id}`;
      const next = on ? types.filter(t => t !== 'end') : [...types, 'end'];
      b.onclick = () => void this.perform('change the mail of', w, () => setMail(w.id, next));
      bar.appendChild(b);
    }
    if (w.kind !== 'notebook') {
      const b = el('button', 'jp-ComputeHub-button jp-ComputeHub-logs-button', 'Logs');
      b.setAttribute('aria-label', `Logs of ${workloadName(w)}`);
      b.dataset.focusKey = `logs:${w.id}`;
      b.onclick = () => void this.showLogs(w.id);
      bar.appendChild(b);
    }
    if (w.serve_url && w.state === 'running') {
      const a = el('a', 'jp-ComputeHub-button jp-ComputeHub-open', 'Open');
      a.setAttribute('aria-label', `Open ${workloadName(w)} (new tab)`);
      a.dataset.focusKey = `open:${w.id}`;
      a.href = w.serve_url;
      a.target = '_blank';
      a.rel = 'noopener';
      bar.appendChild(a);
    }
    return bar;
  }

  private async cancel(w: Workload, confirmed: boolean): Promise<void> {
    if (!confirmed) {
      this.armed = w.id;
      this.render();
      return;
    }
    this.armed = '';
    await this.perform('cancel', w, () => onRow(w, 'cancel', cancelWorkload));
  }

  /** Do something to a workload, say why if it failed, and show what it changed. */
  private async perform(what: string, w: Workload, call: () => Promise<unknown>): Promise<void> {
    try {
      await call();
      this.actionError = '';
    } catch (e) {
      this.actionError = `Could not ${what} ${workloadName(w)}: ${(e as Error).message}`;
    }
    await this.store.poller.refresh();
    this.render();
  }

  /** After the change form applied a change (or was closed): the panel as it is now, the
   * keyboard back on the job's Change button. */
  private async changed(id: string): Promise<void> {
    this.focusAfterRender = `change:${id}`;
    await this.store.poller.refresh();
    this.render();
  }

  /** Open the log box on workload ``id`` (a notification's Logs button). */
  openLogs(id: string): Promise<void> {
    return this.showLogs(id);
  }

  private async showLogs(id: string): Promise<void> {
    const logs = new LogFollower(id, fetchLogPiece);
    this.logs = logs;
    this.logsAtEnd = true;
    const w = this.store.report?.workloads.find(x => x.id === id);
    this.logsLive = !!w && LIVE_STATES.includes(w.state);
    await logs.open();
    if (logs !== this.logs) {
      return; // another log was opened meanwhile
    }
    this.focusAfterRender = 'logs-text'; // the logs open where the keyboard is
    this.render();
  }
}

/** A job waiting in line or held, or a row of an array's waiting tasks (not a notebook's spawn). */
function changeable(w: Workload): boolean {
  return ['pending', 'held'].includes(w.state) && w.kind !== 'notebook';
}

/** ``action`` on what a row stands for: a row of a job array's waiting tasks in one request (the
 * array's tasks in the row's state; ``top``: first among mine, in index order), any other row by
 * itself (``one``). */
async function onRow(
  w: Workload,
  action: 'cancel' | 'hold' | 'release' | 'top',
  one: (id: string) => Promise<unknown>
): Promise<void> {
  if (w.array && taskIds(w).length > 1) {
    await arrayAction(w.array.id, action, [w.state]);
  } else {
    await one(w.id);
  }
}
