/** Failures the contract names (§2); the API's one error handler maps each code to its HTTP status. */
export const errorCodes = [
  'bad_request',
  'unknown_operation',
  'validation_error',
  'unauthenticated',
  'forbidden',
  'not_found',
  'conflict',
  'idempotency_key_reused',
  'payload_too_large',
  'unsupported_media_type',
  'rate_limited',
  'internal_error',
  'unavailable',
] as const;
export type ErrorCode = (typeof errorCodes)[number];

export type ErrorDetail = { path: string; message: string };

export class ServiceError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: ErrorDetail[],
  ) {
    super(message);
    this.name = 'ServiceError';
  }
}

/** Refused for now: 429 `rate_limited`, with `Retry-After` set to `retryAfterSeconds`. */
export class RetryLater extends ServiceError {
  constructor(
    message: string,
    readonly retryAfterSeconds: number,
  ) {
    super('rate_limited', message);
  }
}

/** 503 `unavailable` to a request that arrived after a stop began: planned, so not logged as a failure. */
export class ShuttingDown extends ServiceError {
  constructor() {
    super('unavailable', 'the service is shutting down; retry on another instance');
  }
}

export const notFound = (what: string) => new ServiceError('not_found', `${what} not found`);

/** `create_workspace` naming an organization the token does not grant (contract §2). */
export const organizationNotGranted = () => new ServiceError('forbidden', 'the token does not grant access to this organization');

export const invalid = (path: string, message: string) => new ServiceError('validation_error', 'invalid parameters', [{ path, message }]);

/** A failure the service did not foresee: its body tells nothing internal (§2). */
export const unexpected = () => new ServiceError('internal_error', 'an unexpected error occurred');

/** The event store or read database cannot be reached, or did not answer in time. */
export const unavailable = (message = 'the service is temporarily unavailable') => new ServiceError('unavailable', message);

/** A caller's `text` named in a message, up to `length` characters (whole code points), marked with "…" where cut: a megabyte sent must not come back as a megabyte of error. */
export const shortened = (text: string, length: number): string => {
  // Twice as many UTF-16 units hold at least `length` code points.
  const points = [...text.slice(0, 2 * length)];
  return points.length > length || text.length > 2 * length ? `${points.slice(0, length).join('')}…` : text;
};
