/**
 * The one place the latest state lives: both views read it and redraw on `changed`.
 * A failed poll keeps the last known state and records that the service is unreachable.
 */

import { ISignal, Signal } from '@lumino/signaling';

import { fetchGpu, fetchWorkloads } from './api';
import { clockOffset, GpuReport, WorkloadsReport } from './model';
import { Poller } from './poller';

export const POLL_MS = 2000; // between polls while things work
export const MAX_POLL_MS = 30000; // the longest backoff after failures

export class ComputeHubStore {
  report: WorkloadsReport | null = null;
  gpu: GpuReport | null = null;
  /** Why the last poll of the service failed ("" when it worked). */
  error = '';
  errorSince: Date | null = null;
  lastUpdate: Date | null = null;
  /** Seconds the server's clock is ahead of this browser's, as of the last report (`clockOffset`). */
  clockOffset = 0;
  readonly poller: Poller;
  private _changed = new Signal<this, void>(this);

  constructor() {
    this.poller = new Poller(() => this.poll(), { interval: POLL_MS, maxInterval: MAX_POLL_MS });
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get unreachable(): boolean {
    return this.error !== '';
  }

  /** Now on the server's clock (UNIX seconds): what the report's times are measured against. */
  serverNow(): number {
    return Date.now() / 1000 + this.clockOffset;
  }

  /** One poll of the server extension (the poller calls it; failures throw, for its backoff). */
  async poll(): Promise<void> {
    const [w, g] = await Promise.allSettled([fetchWorkloads(), fetchGpu()]);
    if (g.status === 'fulfilled') {
      this.gpu = g.value;
    }
    if (w.status === 'fulfilled') {
      this.report = w.value;
      this.clockOffset = clockOffset(w.value, Date.now() / 1000);
      this.error = '';
      this.errorSince = null;
      this.lastUpdate = new Date();
    } else {
      this.error = (w.reason as Error).message || String(w.reason);
      this.errorSince = this.errorSince ?? new Date();
    }
    this._changed.emit();
    if (w.status === 'rejected') {
      throw w.reason; // the poller backs off
    }
  }
}
