/** Calls to the server extension (`<base>/computehub/...`), authenticated like any Lab request. */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type { ChangeAnswer } from './change';
import type { LogPiece } from './logview';
import { GpuReport, WorkloadsReport } from './model';

import { ApiError } from './apierror';

export { ApiError };

export async function requestAPI<T>(path: string, init: RequestInit = {}): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'computehub', path);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (e) {
    throw new ApiError(`the notebook server is unreachable: ${(e as Error).message}`, 0, 'network');
  }
  const text = await response.text();
  let body: any = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!response.ok) {
    const message = body?.message || `${response.status} ${response.statusText}`;
    throw new ApiError(message, response.status, body?.error || 'error');
  }
  return body as T;
}

export const fetchWorkloads = () => requestAPI<WorkloadsReport>('workloads');
export const fetchGpu = () => requestAPI<GpuReport>('gpu');
export const cancelWorkload = (id: string) =>
  requestAPI<unknown>(`workloads/${encodeURIComponent(id)}`, { method: 'DELETE' });
/** Keep one of my waiting workloads from starting (`hold`), let it go (`release`), or put it
 * first among my own waiting work of its queue and class (`top`). */
export const holdOrRelease = (id: string, action: 'hold' | 'release' | 'top') =>
  requestAPI<unknown>(`workloads/${encodeURIComponent(id)}/${action}`, { method: 'POST', body: '{}' });
/** Cancel, hold, release or put first (`top`) the tasks of job array `id` that are in `states`, in one
 * request. */
export const arrayAction = (id: string, action: 'cancel' | 'hold' | 'release' | 'top', states: string[]) =>
  requestAPI<unknown>(`workloads/${encodeURIComponent(id)}/array-action`, {
    method: 'POST',
    body: JSON.stringify({ action, states })
  });
/** Change one of my waiting workloads (`PATCH`; `row`: every task of its job array waiting in that
 * state, a row of the panel), or with `dryRun` only ask where it would stand. */
export const changeWorkload = (id: string, changes: object, dryRun: boolean, row: string | null) =>
  requestAPI<ChangeAnswer>(
    `workloads/${encodeURIComponent(id)}` +
      (dryRun ? '?dry_run=true' : row ? `?tasks=all&state=${encodeURIComponent(row)}` : ''),
    { method: 'PATCH', body: JSON.stringify(changes) }
  );
/** What one of my live workloads (a job array's: the whole array) mails me about from now on. */
export const setMail = (id: string, mail: string[]) =>
  requestAPI<unknown>(`workloads/${encodeURIComponent(id)}/mail`, { method: 'POST', body: JSON.stringify({ mail }) });
/** A piece of a job's log: its last `tail` lines, or the lines after byte `after` (logview.ts). */
export const fetchLogPiece = (id: string, query: { tail?: number; after?: number }) =>
  requestAPI<LogPiece>(
    `workloads/${encodeURIComponent(id)}/logs?` +
      (query.after !== undefined ? `after=${query.after}` : `tail=${query.tail ?? 200}`)
  );
