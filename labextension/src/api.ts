/** Calls to the server extension (`<base>/computehub/...`), authenticated like any Lab request. */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { GpuReport, WorkloadsReport } from './model';

/** An error with the server extension's one-line message ("ComputeHub is unreachable: ..."). */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string
  ) {
    super(message);
  }
}

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
export const fetchLogs = (id: string) =>
  requestAPI<{ id: string; lines: string[] }>(`workloads/${encodeURIComponent(id)}/logs?tail=500`);
