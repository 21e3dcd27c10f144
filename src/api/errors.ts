import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { InvalidValue, RecordIdTaken, RecordNotFound } from '../domain/errors.js';
import { invalid, RetryLater, ServiceError, ShuttingDown, unavailable, unexpected, type ErrorCode, type ErrorDetail } from '../errors.js';
import { EventStoreUnavailable } from '../eventstore/port.js';
import { isConnectionError } from '../infra/postgres.js';

export const statusOf: Record<ErrorCode, number> = {
  bad_request: 400,
  unknown_operation: 400,
  validation_error: 400,
  unauthenticated: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  idempotency_key_reused: 422,
  payload_too_large: 413,
  unsupported_media_type: 415,
  rate_limited: 429,
  internal_error: 500,
  unavailable: 503,
};

/** 431 `bad_request` (contract §2): more request headers than the server reads, refused before routing. */
export class TooManyHeaders extends ServiceError {
  constructor(limit: number) {
    super('bad_request', `the request has too many headers (at most ${limit})`);
  }
}

const fastifyCodes: Record<string, [ErrorCode, string]> = {
  FST_ERR_CTP_BODY_TOO_LARGE: ['payload_too_large', 'the request body is too large'],
  FST_ERR_CTP_INVALID_MEDIA_TYPE: ['unsupported_media_type', 'the body must be application/json'],
  FST_ERR_CTP_INVALID_JSON_BODY: ['bad_request', 'the body is not valid JSON'],
  FST_ERR_CTP_EMPTY_JSON_BODY: ['bad_request', 'the body is empty'],
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: ['bad_request', 'the Content-Length does not match the body'],
};

/** Turns any failure into the contract's error (§2); nothing internal ever reaches the body. */
export function toServiceError(error: unknown): ServiceError {
  if (error instanceof ServiceError) return error;
  if (error instanceof RecordNotFound) return new ServiceError('not_found', error.message);
  if (error instanceof InvalidValue) return invalid(`params.${error.field}`, error.message);
  // Every domain error is mapped here; a generated id already in use is a bug, answered 500 and logged.
  if (error instanceof RecordIdTaken) return unexpected();
  if (error instanceof EventStoreUnavailable || isConnectionError(error)) {
    return unavailable();
  }
  const fastifyError = error as Partial<FastifyError>;
  const known = fastifyError.code ? fastifyCodes[fastifyError.code] : undefined;
  if (known) return new ServiceError(known[0], known[1]);
  if (error instanceof SyntaxError || (fastifyError.statusCode && fastifyError.statusCode >= 400 && fastifyError.statusCode < 500)) {
    return new ServiceError('bad_request', 'the request is malformed');
  }
  return unexpected();
}

export function sendError(error: unknown, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  // The body could not be read because the client closed its connection: nobody gets the answer,
  // and nothing failed in the service (it is neither a 5xx nor worth a stack trace).
  const hasBody = request.headers['content-length'] !== undefined || request.headers['transfer-encoding'] !== undefined;
  if (hasBody && request.raw.readableAborted && (error as { code?: unknown }).code === 'ECONNRESET') {
    request.log.info('the client went away before its request was read');
    return reply.code(statusOf.bad_request).send(errorBody(new ServiceError('bad_request', 'the request was not received'), request.id));
  }
  // Unknown paths and methods are 404 whatever their body: a body the router's 404 handler failed
  // to parse (invalid JSON, empty, too large) must not turn it into a 400 or 413 (contract §1).
  return sendServiceError(request.is404 ? new ServiceError('not_found', 'no such endpoint') : toServiceError(error), request, reply, error);
}

/** Errors answered without a log line of their own: the request's one line (`answeredErrorFields`) names them. */
const answeredErrors = new WeakMap<FastifyRequest, ServiceError>();

/** What the one line logged per answered request says of the error it was answered with, if any. */
export function answeredErrorFields(request: FastifyRequest): { code?: ErrorCode; error?: string } {
  const error = answeredErrors.get(request);
  return error ? { code: error.code, error: error.message } : {};
}

/** Sends the contract's error body for `serviceError`; `cause` is logged for a 5xx. */
export function sendServiceError(
  serviceError: ServiceError,
  request: FastifyRequest,
  reply: FastifyReply,
  cause: unknown = serviceError,
): FastifyReply {
  const status = serviceError instanceof TooManyHeaders ? 431 : statusOf[serviceError.code];
  // Set while a command waited for its projection: it speaks of a change answered as done, never of an error.
  reply.removeHeader('x-projection-behind');
  if (serviceError.code === 'internal_error') request.log.error({ err: cause }, 'request failed');
  // A store outage or an overload: the operator's to see, in one line per request with its cause; the
  // stack of a refused connection says nothing more (a stop in progress is planned, so only info).
  else if (serviceError.code === 'unavailable' && !(serviceError instanceof ShuttingDown)) {
    request.log.warn({ code: serviceError.code, cause: cause instanceof Error ? cause.message : String(cause) }, serviceError.message);
  } else answeredErrors.set(request, serviceError);
  if (serviceError.code === 'unauthenticated') reply.header('WWW-Authenticate', 'Bearer');
  if (serviceError instanceof RetryLater) reply.header('Retry-After', String(serviceError.retryAfterSeconds));
  // Also on answers given before the onRequest hook that sets it (a path the router refused).
  reply.header('x-request-id', request.id);
  return reply.code(status).send(errorBody(serviceError, request.id));
}

export function errorBody(serviceError: ServiceError, requestId: string) {
  const error: { code: ErrorCode; message: string; details?: ErrorDetail[]; request_id: string } = {
    code: serviceError.code,
    message: serviceError.message,
    request_id: requestId,
  };
  if (serviceError.details) error.details = serviceError.details;
  return { error };
}
