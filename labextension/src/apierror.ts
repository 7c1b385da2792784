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
