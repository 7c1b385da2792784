/**
 * Polling with backoff that goes quiet while the tab is hidden.
 *
 * After a success the next poll comes `interval` ms later; after n failures in a
 * row it comes interval × factor^n ms later, capped at `maxInterval` (or the interval, if longer). While the
 * page is hidden no poll runs at all; becoming visible polls at once. Timers and
 * visibility are injected so that tests drive it without a browser.
 */

export interface PollerOptions {
  interval: number; // ms between polls while things work
  maxInterval: number; // ms, the longest wait after failures
  factor?: number; // backoff multiplier per failure in a row
  isHidden?: () => boolean;
  setTimer?: (fn: () => void, ms: number) => unknown;
  clearTimer?: (handle: unknown) => void;
}

export class Poller {
  failures = 0;
  polls = 0;
  private timer: unknown = null;
  private running = false;
  private inFlight = false;
  private readonly opts: Required<PollerOptions>;

  constructor(private readonly task: () => Promise<void>, options: PollerOptions) {
    this.opts = {
      factor: 2,
      isHidden: () => typeof document !== 'undefined' && document.visibilityState === 'hidden',
      setTimer: (fn, ms) => setTimeout(fn, ms),
      clearTimer: h => clearTimeout(h as ReturnType<typeof setTimeout>),
      ...options
    };
  }

  /** How long to wait before the next poll, given the failures in a row so far. */
  delay(failures = this.failures): number {
    const { interval, maxInterval, factor } = this.opts;
    return Math.min(Math.max(maxInterval, interval), interval * Math.pow(factor, failures));
  }

  /** A new interval (a setting changed): a poll already waited for comes at the new pace. */
  setInterval(ms: number): void {
    this.opts.interval = ms;
    if (this.timer !== null) {
      this.cancelTimer();
      this.timer = this.opts.setTimer(() => void this.tick(), this.delay());
    }
  }

  get isRunning(): boolean {
    return this.running;
  }

  start(): void {
    if (!this.running) {
      this.running = true;
      void this.tick();
    }
  }

  stop(): void {
    this.running = false;
    this.cancelTimer();
  }

  /** Poll now (a click, or the page became visible), then carry on as usual. */
  refresh(): Promise<void> {
    this.cancelTimer();
    return this.tick();
  }

  /** Call on `visibilitychange`: a hidden page stops polling, a visible one polls at once. */
  visibilityChanged(): void {
    if (!this.running) {
      return;
    }
    if (this.opts.isHidden()) {
      this.cancelTimer();
    } else if (this.timer === null && !this.inFlight) {
      void this.tick();
    }
  }

  private async tick(): Promise<void> {
    this.timer = null;
    if (!this.running || this.inFlight || this.opts.isHidden()) {
      return; // hidden: stay quiet until visibilityChanged()
    }
    this.inFlight = true;
    try {
      this.polls++;
      await this.task();
      this.failures = 0;
    } catch {
      this.failures++;
    } finally {
      this.inFlight = false;
    }
    if (this.running && !this.opts.isHidden()) {
      this.timer = this.opts.setTimer(() => void this.tick(), this.delay());
    }
  }

  private cancelTimer(): void {
    if (this.timer !== null) {
      this.opts.clearTimer(this.timer);
      this.timer = null;
    }
  }
}
