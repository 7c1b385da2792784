/**
 * A job's log as the panel shows it: its last lines when opened, then, at each poll while
 * the job may still write, only the lines after the byte offset the service gave
 * (`logs?after=N`), so a long log costs what is new. The panel keeps the last MAX_LINES.
 */

import { ApiError } from './apierror';

export const FIRST_LINES = 500;
export const MAX_LINES = 5000;
const MAX_READS = 8; // reads of 4 MiB at most in one update: the rest comes at the next poll

export interface LogPiece {
  lines: string[];
  offset: number;
  partial?: boolean;
  more?: boolean;
}

export type FetchPiece = (id: string, query: { tail?: number; after?: number }) => Promise<LogPiece>;

export class LogFollower {
  lines: string[] = [];
  /** What to show while there are no lines: the service's words ("no logs recorded …"). */
  message = '';
  private offset: number | null = null;
  private busy = false; // an update in flight: another one (a poll come early) would read the same bytes

  constructor(
    readonly id: string,
    private readonly fetchPiece: FetchPiece
  ) {}

  get text(): string {
    return this.lines.join('\n') || this.message || '(empty)';
  }

  /** The last lines (a line still being written is shown once it is whole). */
  async open(): Promise<void> {
    try {
      const piece = await this.fetchPiece(this.id, { tail: FIRST_LINES });
      this.lines = piece.partial ? piece.lines.slice(0, -1) : piece.lines;
      this.offset = piece.offset;
      this.message = '';
    } catch (e) {
      this.failed(e);
    }
  }

  /** Appends what was written since; true if something changed. */
  async update(): Promise<boolean> {
    if (this.busy) {
      return false;
    }
    this.busy = true;
    try {
      return await this.read();
    } finally {
      this.busy = false;
    }
  }

  private async read(): Promise<boolean> {
    if (this.offset === null) {
      const before = this.text;
      await this.open();
      return this.text !== before;
    }
    let added = 0;
    try {
      for (let reads = 0; reads < MAX_READS; reads++) {
        const piece = await this.fetchPiece(this.id, { after: this.offset });
        this.lines.push(...piece.lines);
        added += piece.lines.length;
        this.offset = piece.offset;
        if (!piece.more) {
          break;
        }
      }
    } catch (e) {
      const before = this.message;
      this.failed(e);
      return added > 0 || this.message !== before;
    }
    if (this.lines.length > MAX_LINES) {
      this.lines.splice(0, this.lines.length - MAX_LINES);
    }
    if (added) {
      this.message = '';
    }
    return added > 0;
  }

  private failed(e: unknown): void {
    if (e instanceof ApiError && e.status === 404 && this.lines.length === 0) {
      this.offset = 0; // no log yet: read it from its start once there is one
    }
    this.message = e instanceof ApiError ? e.message : String(e);
  }
}
