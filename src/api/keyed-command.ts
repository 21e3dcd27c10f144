import type { FastifyBaseLogger } from 'fastify';
import type { ServiceError } from '../errors.js';
import { errorBody, statusOf, toServiceError } from './errors.js';
import type { IdempotencyKeys, RequestHashes } from './idempotency.js';

export type KeyedAnswer = { status: number; body: unknown; replayed: boolean };

/**
 * A command sent with an `Idempotency-Key` (contract §2): claims the key, or replays the answer
 * kept for it, then runs the command and keeps its answer. What a retry answers when the kept
 * answer is missing comes from the command's own events (src/write/execute.ts); so a failure to
 * keep an answer is logged and never changes the one given.
 */
export async function runKeyedCommand(options: {
  keys: IdempotencyKeys;
  subject: string;
  organizations: ReadonlySet<string>;
  key: string;
  hashes: RequestHashes;
  requestId: string;
  log: FastifyBaseLogger;
  /** Runs the command, with the hash its key holds (the first request's as sent), from which its id is made. */
  run: (requestHash: string) => Promise<unknown>;
  /** What the request answers now to a caller without access to the organization of the kept answer. */
  lostAccess: () => ServiceError;
}): Promise<KeyedAnswer> {
  const { keys, subject, organizations, key, hashes, requestId, log, run, lostAccess } = options;
  const keepFailed = (error: unknown) =>
    log.warn({ err: (error as Error).message }, 'could not keep the outcome of a keyed request; a retry finds it in the events');

  const started = await keys.begin(subject, key, hashes);
  if ('replay' in started) {
    // The caller may have lost access to the record since: a replay must not show it, and answers
    // what the request would without the key.
    const organizationId = (started.replay.body as { data?: { organization_id?: unknown } }).data?.organization_id;
    if (typeof organizationId === 'string' && !organizations.has(organizationId)) throw lostAccess();
    return { status: started.replay.status, body: withRequestId(started.replay.body, requestId), replayed: true };
  }
  const { claim } = started;
  let body: unknown;
  try {
    body = await run(started.requestHash);
  } catch (error) {
    const serviceError = toServiceError(error);
    const status = statusOf[serviceError.code];
    // After a 5xx the key is given back: a retry runs at once and, if the events did land,
    // answers what they did (they carry the command's id). So it is after a 429 (the record's
    // queue was full), which did nothing and asks to be retried: that key is free for any request.
    const rateLimited = status === statusOf.rate_limited;
    await (
      status < 500 && !rateLimited
        ? claim.complete({ status, body: errorBody(serviceError, requestId) })
        : claim.release({ ranNothing: rateLimited })
    ).catch(keepFailed);
    throw error;
  }
  // The command's events are stored: its answer stands even if keeping it for replays fails.
  await claim.complete({ status: 200, body }).catch(keepFailed);
  return { status: 200, body, replayed: false };
}

/**
 * A kept answer as this request gives it: a kept error names this request, as its `x-request-id`
 * header and log line do (contract §1), not the request that first answered it.
 */
function withRequestId(body: unknown, requestId: string): unknown {
  const error = (body as { error?: unknown } | null)?.error;
  if (typeof error !== 'object' || error === null || !('request_id' in error)) return body;
  return { ...(body as object), error: { ...error, request_id: requestId } };
}
