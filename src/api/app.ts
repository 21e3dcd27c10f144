import { randomUUID } from 'node:crypto';
import { STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from 'fastify';
import type { Logger } from 'pino';
import { ServiceError, shortened, ShuttingDown } from '../errors.js';
import { observeHttp } from '../observability/http.js';
import type { Metrics } from '../observability/metrics.js';
import type { Readiness } from '../observability/readiness.js';
import type { Caller, CommandHandlers } from '../write/handlers.js';
import { soleAuthorization, type Principal, type TokenVerifier } from './auth.js';
import { registerApiDocs } from './docs.js';
import { ChangeStreams, wantsEventStream } from './change-stream.js';
import { drainConnectionsOnClose } from './connection-drain.js';
import { answeredErrorFields, errorBody, sendError, sendServiceError, TooManyHeaders } from './errors.js';
import { IdempotencyKeys } from './idempotency.js';
import { acceptJsonBodies, inexactNumbersOf, moreInexactNumbersThanNamed } from './json-body.js';
import { runKeyedCommand } from './keyed-command.js';
import type { PublicJwk } from '../integrity/checkpoints.js';
import {
  changeQueryOf,
  inaccessibleTo,
  isOperationName,
  operations,
  scopesOf,
  type OperationContext,
  type Queries,
  type Webhooks,
} from './operations.js';
import { createRateLimiter } from './rate-limit.js';
import { envelopeSchema, paramsSchemas, requestIdPattern, type ParamsOf } from './schemas.js';
import { validationDetails, validationErrorMap } from './validation-messages.js';

export type AppServices = {
  verifyToken: TokenVerifier;
  idempotency: IdempotencyKeys;
  commands: CommandHandlers;
  queries: Queries;
  webhooks: Webhooks;
  readiness: () => Promise<Readiness>;
  metrics: Metrics;
  /** The JWKS of GET /audit-keys (contract §13). */
  auditKeys: () => Promise<{ keys: PublicJwk[] }>;
};

export type AppOptions = {
  services: AppServices;
  logger: Logger;
  bodyLimitBytes: number;
  /** How long a client may take to send a whole request, headers and body (default 60 s). */
  requestTimeoutMs?: number;
  rateLimitPerMinute: number;
  /** Whether this app answers GET /metrics (false when METRICS_PORT gives it a listener of its own). */
  serveMetrics: boolean;
  /** Open change streams per caller (default 10). */
  changeStreamsPerCaller?: number;
  /** A comment on an idle change stream after this long (default 10 s). */
  changeStreamHeartbeatMs?: number;
  /** On close, requests in flight get this long to finish before their connections are closed (default 10 s). */
  shutdownDrainMs?: number;
};

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal;
  }
}

/**
 * Requests Node's HTTP parser refuses before any route or hook runs (headers over the size limit,
 * a malformed request line, a request that took too long) get the contract's error body and a
 * request id too (contract §1), written to the socket, which is then closed.
 */
function answerClientError(log: FastifyBaseLogger, error: NodeJS.ErrnoException, socket: Duplex): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, message] =
    error.code === 'HPE_HEADER_OVERFLOW'
      ? [431, 'the request headers are too large']
      : error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? // 400, not HTTP's 408: the contract's table has no 408, and the request is the client's to fix.
          [400, 'the request was not received in time']
        : [400, 'the request is not valid HTTP'];
  answerOnSocket(log, socket, status, new ServiceError('bad_request', message), { code: error.code });
}

/**
 * Node counts a request's header names and values, not the rest of each line, against its 16 KiB
 * limit, and past `maxHeadersCount` headers drops the others without a word (a Content-Type among
 * them would be lost): a request with this many is refused with 431 instead, which also bounds
 * the bytes a header block can hold beyond the 16 KiB.
 */
const headersCounted = 129;

/** The most `details` a validation_error lists: a body of thousands of faults gets an answer of a few kilobytes, not megabytes. */
const shownProblems = 100;

/** The request's id: the caller's `x-request-id` when it is a valid one (contract §1), else a new one. */
export const requestIdFrom = (incoming: string | string[] | undefined) =>
  typeof incoming === 'string' && requestIdPattern.test(incoming) ? incoming : randomUUID();

/** Writes the contract's error answer straight to a socket the HTTP server handed over, then closes it. */
function answerOnSocket(
  log: FastifyBaseLogger,
  socket: Duplex,
  status: number,
  error: ServiceError,
  logged: object,
  incomingId?: string | string[],
): void {
  const requestId = requestIdFrom(incomingId);
  log.info({ request_id: requestId, ...logged }, error.message);
  const body = JSON.stringify(errorBody(error, requestId));
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nx-request-id: ${requestId}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}

/**
 * What Node's HTTP server would answer by itself, without the contract's body or a request id
 * (contract §1): a request with no Host header (400, empty), an `Expect` other than
 * `100-continue` (417, empty) and `CONNECT` (the connection dropped). The first is refused by the
 * onRequest hook instead; an unknown expectation is ignored, as RFC 9110 §10.1.1 allows; CONNECT,
 * a method the service serves nowhere, gets 404 like the others.
 */
function answerWhatNodeWould(server: Server, log: FastifyBaseLogger): void {
  server.on('checkExpectation', (request: IncomingMessage, response: ServerResponse) => server.emit('request', request, response));
  server.on('connect', (request: IncomingMessage, socket: Duplex) =>
    answerOnSocket(
      log,
      socket,
      404,
      new ServiceError('not_found', 'no such endpoint'),
      { method: request.method, url: request.url },
      request.headers['x-request-id'],
    ),
  );
}

/**
 * A listener of the service without fastify (METRICS_PORT's) answers what Node's HTTP layer
 * refuses before any handler as the API's listener does: the contract's body and a request id.
 */
export function answerHttpEdges(server: Server, log: FastifyBaseLogger): void {
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Duplex) => answerClientError(log, error, socket));
  answerWhatNodeWould(server, log);
}

/**
 * Aborts when the client goes away before its answer, or when the service begins to stop: a long
 * poll stops waiting, and answers what it has (contract §14: possibly no items) while its
 * connection can still carry the answer, rather than being cut off when the drain time is up.
 */
function longPollSignal(reply: FastifyReply, stopping: AbortSignal): AbortSignal {
  const controller = new AbortController();
  const abort = () => controller.abort();
  stopping.addEventListener('abort', abort, { once: true });
  reply.raw.once('close', () => {
    stopping.removeEventListener('abort', abort);
    abort();
  });
  return controller.signal;
}

/** The HTTP application, without a listening port: the server start-up and the tests build it alike. */
export async function buildApp(options: AppOptions): Promise<FastifyInstance> {
  const { services, requestTimeoutMs = 60_000 } = options;
  const logger: FastifyBaseLogger = options.logger;
  const app = Fastify({
    loggerInstance: logger,
    bodyLimit: options.bodyLimitBytes,
    // Forbidden keys are rejected by validation with a clear message, not by the parser.
    onProtoPoisoning: 'ignore',
    onConstructorPoisoning: 'ignore',
    // One line per request, when it is answered (the onResponse hook), instead of one on arrival and one on answer.
    logController: new LogController({ requestIdLogLabel: 'request_id', disableRequestLogging: true }),
    genReqId: (request) => requestIdFrom(request.headers['x-request-id']),
    // Requests that arrive while closing get the contract's 503 from the onRequest hook below.
    return503OnClosing: false,

    // A path with invalid percent-encoding never reaches a route; it still gets the contract's body.
    frameworkErrors: (_error, request, reply) => {
      sendServiceError(new ServiceError('bad_request', 'the request path is not valid'), request, reply);
    },
    clientErrorHandler(this: FastifyInstance, error, socket) {
      answerClientError(this.log, error, socket);
    },
    // A request still arriving after this long is answered 400 by answerClientError: Fastify's
    // default, none, would let a client hold a connection for ever by sending its body slowly.
    requestTimeout: requestTimeoutMs,
    http: {
      // Refused with the contract's body by the onRequest hook rather than by Node with an empty one.
      requireHostHeader: false,
      headersTimeout: Math.min(60_000, requestTimeoutMs),
      // Node checks for late requests at this interval (30 s by default): a timeout fires at most a tenth late.
      connectionsCheckingInterval: Math.min(30_000, Math.max(100, Math.floor(requestTimeoutMs / 10))),
    },
  });
  answerWhatNodeWould(app.server, app.log);
  app.server.maxHeadersCount = headersCounted;
  const rateLimiter = createRateLimiter(options.rateLimitPerMinute);
  const changeStreams = new ChangeStreams(
    options.changeStreamsPerCaller ?? 10,
    services.metrics.changeStreamsOpen,
    options.changeStreamHeartbeatMs,
  );
  observeHttp(app, services.metrics, { serveMetrics: options.serveMetrics, isOperationName });

  acceptJsonBodies(app);
  const connections = drainConnectionsOnClose(app, options.shutdownDrainMs ?? 10_000);
  // The stop begins: open change streams end (their clients resume elsewhere with Last-Event-ID), long polls answer.
  const stopping = new AbortController();
  app.addHook('preClose', async () => {
    stopping.abort();
    changeStreams.closeAll();
  });
  // The last preClose hook: the grace for idle connections does not hold up the ones above.
  app.addHook('preClose', connections.idleGraceOver);
  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id);
    // Node keeps the first maxHeadersCount headers and drops the rest unsaid: at the limit, some may be missing.
    if (request.raw.rawHeaders.length / 2 >= headersCounted) throw new TooManyHeaders(headersCounted - 1);
    // RFC 9112 §3.2: an HTTP/1.1 request without Host is refused (HTTP/1.0 had none).
    if (request.raw.httpVersion === '1.1' && request.headers.host === undefined) {
      throw new ServiceError('bad_request', 'the request has no Host header');
    }
    // Read after the stop began, behind an answer saying `connection: close`: the client takes it as not done, so it is not.
    if (connections.closing()) throw new ShuttingDown();
  });
  app.addHook('onResponse', async (request, reply) => {
    request.log.info(
      {
        method: request.method,
        url: request.url,
        status: reply.statusCode,
        ms: Math.round(reply.elapsedTime * 10) / 10,
        ...answeredErrorFields(request),
      },
      'request',
    );
  });
  app.setErrorHandler((error, request, reply) => sendError(error, request, reply));
  app.setNotFoundHandler((request, reply) => sendError(new ServiceError('not_found', 'no such endpoint'), request, reply));

  registerApiDocs(app);
  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/audit-keys', () => services.auditKeys());
  app.get('/readyz', async (_request, reply) => {
    const readiness = await services.readiness();
    return reply.code(readiness.ready ? 200 : 503).send({ status: readiness.ready ? 'ready' : 'not_ready', checks: readiness.checks });
  });

  app.post('/api', {
    // Authentication comes before the body is read (contract §1, §2 order of checks).
    onRequest: async (request, reply) => {
      request.principal = await services.verifyToken(soleAuthorization(request.raw.rawHeaders));
      const retryAfter = rateLimiter(request.principal.subject);
      if (retryAfter !== undefined) {
        reply.header('Retry-After', String(retryAfter));
        throw new ServiceError('rate_limited', 'too many requests; retry later');
      }
    },
    handler: async (request, reply) => {
      if (!request.headers['content-type']) throw new ServiceError('unsupported_media_type', 'the body must be application/json');
      const envelope = envelopeSchema.safeParse(request.body);
      if (!envelope.success) {
        throw new ServiceError('bad_request', 'the body must be an object with a string "query" and an object "params", nothing else');
      }
      const { query, params } = envelope.data;
      if (!isOperationName(query)) throw new ServiceError('unknown_operation', `unknown operation "${shortened(query, 100)}"`);
      const operation = operations[query];
      // A malformed key is a bad_request, which comes before the scope check (contract §2).
      const key = operation.kind === 'command' ? IdempotencyKeys.parseKey(request.headers['idempotency-key']) : undefined;
      const principal = request.principal!;
      const accepted = scopesOf(query);
      if (!accepted.some((scope) => principal.scopes.has(scope))) {
        throw new ServiceError('forbidden', `the token lacks the scope ${accepted.join(' or ')}`);
      }
      // Issues a schema left without a message of its own are worded by the service (validation-messages.ts).
      const parsed = paramsSchemas[query].safeParse(params, { error: validationErrorMap });
      const invalid = parsed.success ? [] : validationDetails(parsed.error, 'params');
      // A number the schema refuses already (out of range, say) is not told to be sent as a string as well.
      const paths = new Set(invalid.map((issue) => issue.path));
      const problems = [...invalid, ...inexactNumbersOf(request.body).filter((detail) => !paths.has(detail.path))];
      if (problems.length > 0) {
        const shown = problems.slice(0, shownProblems);
        // Inexact numbers are looked for only up to a hundred: beyond, their count is not known.
        const more = moreInexactNumbersThanNamed(request.body) ? 'more than ' : '';
        const told = problems.length > shown.length || more ? `the first ${shown.length} of ${more}${problems.length} problems` : undefined;
        throw new ServiceError('validation_error', told ? `invalid parameters (${told})` : 'invalid parameters', shown);
      }
      const caller: Caller = {
        subject: principal.subject,
        organizations: principal.organizations,
        requestId: request.id,
        // Reads may not show this command's effect yet: its events are stored, the projection has not applied them.
        onProjectionBehind: () => void reply.header('x-projection-behind', 'true'),
      };
      if (query === 'list_changes' && wantsEventStream(request)) {
        await changeStreams.serve(request, reply, {
          subject: principal.subject,
          endsAt: principal.acceptedUntil,
          query: changeQueryOf(parsed.data as ParamsOf<'list_changes'>, caller, principal.scopes),
          listChanges: services.queries.listChanges,
        });
        return reply;
      }
      const context: OperationContext = {
        caller,
        scopes: principal.scopes,
        commands: services.commands,
        queries: services.queries,
        webhooks: services.webhooks,
        ...(query === 'list_changes' ? { signal: longPollSignal(reply, stopping.signal) } : {}),
      };
      const run = async (commandContext: OperationContext) => ({
        data: await (operation.run as (p: unknown, c: unknown) => Promise<unknown>)(parsed.data, commandContext),
      });
      if (key === undefined) return run(context);
      const answer = await runKeyedCommand({
        keys: services.idempotency,
        subject: principal.subject,
        organizations: principal.organizations,
        key,
        hashes: IdempotencyKeys.hashes(query, params),
        requestId: request.id,
        log: request.log,
        run: (requestHash) =>
          run({ ...context, caller: { ...caller, commandId: IdempotencyKeys.commandId(principal.subject, key, requestHash) } }),
        lostAccess: () => inaccessibleTo(query),
      });
      if (answer.replayed) reply.header('idempotent-replayed', 'true');
      return reply.code(answer.status).send(answer.body);
    },
  });

  return app;
}
