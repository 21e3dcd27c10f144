import { createParser, type EventSourceMessage } from 'eventsource-parser';
import type { OperationName, ParamsInputOf, ResultOf } from '../api/schemas.js';
import type { ErrorCode, ErrorDetail } from '../errors.js';
import { exactBase64Bytes } from './verify.js';

/**
 * The typed client: one method per operation, parameter and result types inferred from the zod
 * schemas the server validates with (type imports only: nothing of the server runs here).
 */

export type { ErrorCode, ErrorDetail, OperationName };
export {
  canonicalJson,
  checkpointSignatureValid,
  consistencyPathValid,
  rootFromInclusionPath,
  verifyConsistency,
  verifyRecord,
  type AuditKeys,
  type Checkpoint,
  type ConsistencyProof,
  type RecordProof,
  type Verification,
} from './verify.js';
export type Params<O extends OperationName> = ParamsInputOf<O>;
export type Result<O extends OperationName> = ResultOf<O>;

/** Commands change records and carry an Idempotency-Key; queries only read. Checked against the server's table by a test. */
export const operationKinds: { readonly [O in OperationName]: 'command' | 'query' } = {
  get_workspace: 'query',
  get_workspace_history: 'query',
  list_workspaces: 'query',
  create_workspace: 'command',
  update_workspace: 'command',
  delete_workspace: 'command',
  get_solution: 'query',
  get_solution_history: 'query',
  list_solutions: 'query',
  create_solution: 'command',
  update_solution: 'command',
  delete_solution: 'command',
  get_workspace_provenance: 'query',
  get_solution_provenance: 'query',
  diff_workspace: 'query',
  diff_solution: 'query',
  get_checkpoint: 'query',
  get_workspace_proof: 'query',
  get_solution_proof: 'query',
  get_consistency_proof: 'query',
  list_changes: 'query',
  create_webhook: 'command',
  get_webhook: 'query',
  list_webhooks: 'query',
  update_webhook: 'command',
  delete_webhook: 'command',
  rotate_webhook_secret: 'command',
  list_webhook_deliveries: 'query',
  redeliver_webhook_change: 'command',
};

/** A change of the feed (contract §14). */
export type Change = Result<'list_changes'>['items'][number];
/** What the feed's readers take: `list_changes`' parameters. */
export type ChangeParams = Params<'list_changes'>;

/** The operations answering a page: their `page` is the client's to turn. */
export type PagedOperation = {
  [O in OperationName]: Result<O> extends { items: unknown[]; total: number } ? O : never;
}[OperationName];
export type ItemOf<O extends PagedOperation> = Result<O>['items'][number];

/** An answer other than 200, with the contract's error body (§2). */
export class ApiError extends Error {
  override readonly name = 'ApiError';
  /** For a command: the Idempotency-Key it was sent with, to send it again later with the same key. */
  idempotencyKey: string | undefined;
  constructor(
    readonly status: number,
    readonly code: ErrorCode,
    message: string,
    readonly details: ErrorDetail[] | undefined,
    readonly requestId: string | undefined,
    /** The answer's `Retry-After` in seconds (a 429, or a 503 that names one). */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
  }
}

export type ClientOptions = {
  /** Where the service runs, e.g. `http://localhost:3000`. */
  baseUrl: string;
  /** A bearer token, or a function giving one per request (to refresh it). */
  token: string | (() => string | Promise<string>);
  /**
   * Retries after a lost connection or a 503, with the same Idempotency-Key for a command, so a
   * command whose answer was lost is done once. Default 3; 0 turns retrying off.
   */
  retries?: number;
  /** First retry delay in milliseconds, doubled each time. Default 200. */
  retryDelayMs?: number;
  /** Another fetch (a proxy agent, instrumentation). Default: the global fetch. */
  fetch?: typeof fetch;
  /**
   * How long one try may take before it counts as a lost connection (and is retried, with the
   * same key for a command), in milliseconds; a long poll gets its `wait_ms` on top. Default 60,000.
   */
  timeoutMs?: number;
  /**
   * How long `streamChanges` waits on a stream that sends nothing, not even its heartbeat (at most
   * 15 s apart), before it drops it and reconnects, in milliseconds. Default 35,000.
   */
  streamIdleMs?: number;
};

export type CallOptions = {
  /** For a command: the key to send instead of a generated one (to retry across processes). */
  idempotencyKey?: string;
  /** Sent as x-request-id, to find the request in the service's logs. */
  requestId?: string;
  signal?: AbortSignal;
};

type CamelCase<S extends string> = S extends `${infer Head}_${infer Tail}` ? `${Head}${Capitalize<CamelCase<Tail>>}` : S;

type Methods = {
  [O in OperationName as CamelCase<O>]: (params: Params<O>, options?: CallOptions) => Promise<Result<O>>;
};

export type Client = Methods & {
  /** Any operation by its API name. */
  call<O extends OperationName>(operation: O, params: Params<O>, options?: CallOptions): Promise<Result<O>>;
  /** Every page of a list or history, from `params.page` (default 1) to the last. */
  pages<O extends PagedOperation>(
    operation: O,
    params: Omit<Params<O>, 'page'> & { page?: number },
    options?: Omit<CallOptions, 'idempotencyKey'>,
  ): AsyncGenerator<Result<O>>;
  /** Every item of a list or history, page after page. */
  items<O extends PagedOperation>(
    operation: O,
    params: Omit<Params<O>, 'page'> & { page?: number },
    options?: Omit<CallOptions, 'idempotencyKey'>,
  ): AsyncGenerator<ItemOf<O>>;
  /**
   * Every change from `params.after` on, page after page following `next`. Stops at the end of
   * the feed, or with `follow`, long-polls (`wait_ms`, default 25 s) for the next changes until
   * `signal` aborts, and then ends without an error. While following, a service that cannot be
   * reached or answers 503 (an instance restarting) is tried again for as long as it takes, the
   * delay doubling up to 5 s, unless `retries` is 0. Resume later from the last change's `id` as `after`.
   */
  changes(params?: ChangeParams, options?: Omit<CallOptions, 'idempotencyKey'> & { follow?: boolean }): AsyncGenerator<Change>;
  /**
   * The changes as a Server-Sent Events stream, reconnecting with `Last-Event-ID` whenever the
   * stream ends (the token expired, the instance stopped, the connection dropped), until `signal`
   * aborts, and then ends without an error. A service that cannot be reached or answers 503 is
   * tried again for as long as it takes, the delay doubling up to 5 s, unless `retries` is 0. A
   * stream that ends without delivering a change counts as a failed try too (the next one waits,
   * the delay doubling up to 5 s); one that delivered changes is reconnected at once. A stream
   * silent for `streamIdleMs` is a dropped connection, reconnected the same way. A refusal
   * (401, such as a token no longer accepted, 403, 400, 429) ends the iteration, thrown as ApiError.
   */
  streamChanges(params?: Omit<ChangeParams, 'wait_ms' | 'limit'>, options?: Omit<CallOptions, 'idempotencyKey'>): AsyncGenerator<Change>;
};

const camelCase = (name: string) => name.replace(/_([a-z])/g, (_, letter: string) => letter.toUpperCase());

const sleep = (ms: number, signal: AbortSignal | undefined) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    // The listener goes with the wait: a long-lived signal sees many of them while a feed retries.
    const aborted = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', aborted);
      resolve();
    }, ms);
    signal?.addEventListener('abort', aborted, { once: true });
  });

/** No answer came: the connection failed, was lost or went silent. For a command, whether it was done is unknown. */
export class ServiceUnreachable extends Error {
  override readonly name = 'ServiceUnreachable';
  /** For a command: the Idempotency-Key it was sent with, to send it again later with the same key. */
  idempotencyKey: string | undefined;
}

/** The seconds of a `Retry-After` header in its delay-seconds form (the service's), else undefined. */
function retryAfterOf(response: Response): number | undefined {
  const value = response.headers.get('retry-after');
  return value !== null && /^\d+$/.test(value) ? Number(value) : undefined;
}

/**
 * Worth another try with the same request (and key): no answer, the service unavailable, or, on a
 * retry, the first attempt still running (409) after its connection was lost.
 */
const retryable = (error: unknown, retry: number) =>
  error instanceof ServiceUnreachable ||
  (error instanceof ApiError && (error.code === 'unavailable' || (retry > 0 && error.code === 'conflict')));

/** The longest wait between two tries of a feed that follows the changes. */
const followDelayCapMs = 5_000;

export function createClient(options: ClientOptions): Client {
  const baseUrl = options.baseUrl.replace(/\/+$/, '');
  // A mistake in the settings is the caller's, said at once: not a service to retry for ever.
  const endpoint = (() => {
    try {
      return new URL(`${baseUrl}/api`).href;
    } catch {
      throw new TypeError(`baseUrl must be an absolute http(s) URL such as http://127.0.0.1:8080, not ${JSON.stringify(options.baseUrl)}`);
    }
  })();
  const retries = options.retries ?? 3;
  const retryDelayMs = options.retryDelayMs ?? 200;
  const timeoutMs = options.timeoutMs ?? 60_000;
  const streamIdleMs = options.streamIdleMs ?? 35_000;
  const fetchImpl = options.fetch ?? fetch;
  const token = async () => (typeof options.token === 'function' ? options.token() : options.token);

  /**
   * One try. `signal` is the caller's; `connection` aborts this try alone (a timeout, a silent
   * stream), which the caller sees as a lost connection, never as its own abort.
   */
  async function send(
    body: string,
    headers: Record<string, string>,
    signal: AbortSignal | undefined,
    connection: AbortSignal,
  ): Promise<Response> {
    // The token function's failure is the caller's own, not the service's: it is thrown as it is.
    const authorization = `Bearer ${await token()}`;
    try {
      return await fetchImpl(endpoint, {
        method: 'POST',
        headers: { ...headers, authorization },
        body,
        signal: signal ? AbortSignal.any([signal, connection]) : connection,
      });
    } catch (error) {
      if (signal?.aborted) throw error;
      throw new ServiceUnreachable(`the service at ${baseUrl} could not be reached`, { cause: error });
    }
  }

  async function attempt(body: string, headers: Record<string, string>, signal: AbortSignal | undefined, waitMs = 0): Promise<unknown> {
    const connection = AbortSignal.timeout(timeoutMs + waitMs);
    return answerOf(await send(body, headers, signal, connection), signal);
  }

  async function answerOf(response: Response, signal: AbortSignal | undefined): Promise<unknown> {
    let text: string;
    try {
      text = await response.text();
    } catch (error) {
      if (signal?.aborted) throw error;
      throw new ServiceUnreachable(`the connection to ${baseUrl} was lost while its answer arrived`, { cause: error });
    }
    let parsed: { data?: unknown; error?: { code: ErrorCode; message: string; details?: ErrorDetail[]; request_id?: string } };
    try {
      parsed = JSON.parse(text) as typeof parsed;
    } catch {
      // A proxy's or load balancer's own page: no contract body to read.
      const code = response.status >= 502 && response.status <= 504 ? 'unavailable' : 'internal_error';
      throw new ApiError(
        response.status,
        code,
        `HTTP ${response.status} without a JSON body`,
        undefined,
        undefined,
        retryAfterOf(response),
      );
    }
    if (response.ok) return parsed.data;
    const error = parsed.error;
    throw new ApiError(
      response.status,
      error?.code ?? 'internal_error',
      error?.message ?? `HTTP ${response.status}`,
      error?.details,
      error?.request_id ?? response.headers.get('x-request-id') ?? undefined,
      retryAfterOf(response),
    );
  }

  async function call<O extends OperationName>(operation: O, params: Params<O>, callOptions: CallOptions = {}): Promise<Result<O>> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    const key = operationKinds[operation] === 'command' ? (callOptions.idempotencyKey ?? crypto.randomUUID()) : undefined;
    if (key !== undefined) headers['idempotency-key'] = key;
    if (callOptions.requestId !== undefined) headers['x-request-id'] = callOptions.requestId;
    const body = JSON.stringify({ query: operation, params });
    const waitMs = (params as { wait_ms?: number }).wait_ms ?? 0;
    for (let retry = 0; ; retry += 1) {
      try {
        return (await attempt(body, headers, callOptions.signal, waitMs)) as Result<O>;
      } catch (error) {
        if (retry >= retries || !retryable(error, retry)) {
          if (error instanceof ApiError || error instanceof ServiceUnreachable) error.idempotencyKey = key;
          throw error;
        }
        await sleep(retryDelayOf(error, retry), callOptions.signal);
      }
    }
  }

  /** The wait before retry `retry`: doubling from retryDelayMs, or longer when the service said how long (Retry-After). */
  const retryDelayOf = (error: unknown, retry: number) =>
    Math.max(
      retryDelayMs * 2 ** retry,
      error instanceof ApiError && error.retryAfterSeconds !== undefined ? error.retryAfterSeconds * 1000 : 0,
    );

  async function* pages<O extends PagedOperation>(
    operation: O,
    params: Omit<Params<O>, 'page'> & { page?: number },
    callOptions: Omit<CallOptions, 'idempotencyKey'> = {},
  ): AsyncGenerator<Result<O>> {
    for (let page = params.page ?? 1; ; page += 1) {
      const result = (await call(operation, { ...params, page } as Params<O>, callOptions)) as Result<O> & {
        items: unknown[];
        total: number;
      };
      yield result;
      if (result.items.length === 0 || page * result.size >= result.total) return;
    }
  }

  async function* items<O extends PagedOperation>(
    operation: O,
    params: Omit<Params<O>, 'page'> & { page?: number },
    callOptions: Omit<CallOptions, 'idempotencyKey'> = {},
  ): AsyncGenerator<ItemOf<O>> {
    for await (const page of pages(operation, params, callOptions)) yield* page.items as ItemOf<O>[];
  }

  async function* changes(
    params: ChangeParams = {},
    callOptions: Omit<CallOptions, 'idempotencyKey'> & { follow?: boolean } = {},
  ): AsyncGenerator<Change> {
    const { follow, ...options } = callOptions;
    const { signal } = options;
    let after = params.after;
    for (let failures = 0; ;) {
      const waitMs = follow ? (params.wait_ms ?? 25_000) : params.wait_ms;
      let page: Result<'list_changes'>;
      try {
        page = await call(
          'list_changes',
          { ...params, ...(after === undefined ? {} : { after }), ...(waitMs === undefined ? {} : { wait_ms: waitMs }) },
          options,
        );
      } catch (error) {
        // Following ends when the signal aborts; a page-through cut short is an error, not the feed's end.
        if (follow && signal?.aborted) return;
        if (!follow || !(await waitedToRetry(error, failures++, signal))) throw error;
        continue;
      }
      failures = 0;
      yield* page.items;
      after = page.next;
      if (!page.has_more && !follow) return;
      if (signal?.aborted) {
        if (follow) return;
        throw signal.reason;
      }
    }
  }

  /**
   * For a feed that follows the changes: after a failure worth retrying, waits (the delay doubling
   * up to followDelayCapMs) and says to go on; false when it is not worth it, or retrying is off.
   * An abort during the wait ends it at once.
   */
  async function waitedToRetry(error: unknown, failures: number, signal: AbortSignal | undefined): Promise<boolean> {
    if (retries === 0 || !retryable(error, 0)) return false;
    await backOff(failures, signal);
    return true;
  }

  /** The wait before the next try after `failures` failures in a row: doubling up to followDelayCapMs, cut short by an abort. */
  const backOff = (failures: number, signal: AbortSignal | undefined) =>
    sleep(Math.min(retryDelayMs * 2 ** failures, followDelayCapMs), signal).catch(() => undefined);

  async function* streamChanges(
    params: Omit<ChangeParams, 'wait_ms' | 'limit'> = {},
    callOptions: Omit<CallOptions, 'idempotencyKey'> = {},
  ): AsyncGenerator<Change> {
    const { signal } = callOptions;
    let lastEventId: string | undefined;
    for (let failures = 0; !signal?.aborted;) {
      const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'text/event-stream' };
      if (lastEventId !== undefined) headers['last-event-id'] = lastEventId;
      if (callOptions.requestId !== undefined) headers['x-request-id'] = callOptions.requestId;
      let response: Response;
      // Aborted when the stream goes silent for streamIdleMs: the connection is gone, even if no error says so.
      const connection = new AbortController();
      let idle: ReturnType<typeof setTimeout> | undefined;
      const heard = () => {
        clearTimeout(idle);
        idle = setTimeout(() => connection.abort(), streamIdleMs);
      };
      heard();
      try {
        response = await send(JSON.stringify({ query: 'list_changes', params }), headers, signal, connection.signal);
        if (!response.ok || !response.body) await answerOf(response, signal);
      } catch (error) {
        clearTimeout(idle);
        if (signal?.aborted) return;
        if (!(await waitedToRetry(error, failures++, signal))) throw error;
        continue;
      }
      let delivered = false;
      const received: Change[] = [];
      const parser = createParser({
        onEvent: (message: EventSourceMessage) => {
          if (message.id !== undefined) received.push(JSON.parse(message.data) as Change);
        },
      });
      const decoder = new TextDecoder();
      try {
        for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
          heard();
          parser.feed(decoder.decode(chunk, { stream: true }));
          for (const change of received.splice(0)) {
            lastEventId = change.id;
            delivered = true;
            yield change;
          }
        }
      } catch (error) {
        // A dropped or silent connection: reconnect from the last change seen.
        if (signal?.aborted) return;
        if (!(error instanceof Error)) throw error;
      } finally {
        clearTimeout(idle);
      }
      // A stream that ended (or dropped) without a change is a failed try, whatever its status said:
      // reconnecting at once would hammer a service (or a proxy) that keeps ending streams at once.
      if (delivered) failures = 0;
      else if (!signal?.aborted) await backOff(failures++, signal);
    }
  }

  const methods = Object.fromEntries(
    (Object.keys(operationKinds) as OperationName[]).map((operation) => [
      camelCase(operation),
      (params: never, callOptions?: CallOptions) => call(operation, params, callOptions),
    ]),
  ) as Methods;
  return { ...methods, call, pages, items, changes, streamChanges };
}

/** The bytes of standard base64, or undefined when the text is not base64. */
function base64Bytes(text: string): Uint8Array | undefined {
  try {
    return Uint8Array.from(atob(text), (character) => character.charCodeAt(0));
  } catch {
    return undefined;
  }
}

/** A webhook delivery's body (contract §15): the change, its type and when it was committed. */
export type WebhookPayload = { type: Change['type']; timestamp: string; data: Change };

/** Headers looked up by name: a Headers of any fetch implementation, or a Map of lower-case names. */
export type HeaderLookup = { get(name: string): string | string[] | null | undefined };

/** A webhook delivery whose signature did not verify: refuse it (answer 400), never act on it. */
export class WebhookVerificationError extends Error {
  override readonly name = 'WebhookVerificationError';
}

/**
 * Verifies a webhook delivery (contract §15, Standard Webhooks) and returns its payload: one of
 * the `webhook-signature` signatures must be the HMAC-SHA256 of `id.timestamp.body` with the
 * secret, and `webhook-timestamp` within 5 minutes of now. `body` is the raw request body, as
 * received. Uses Web Crypto, so it runs in Node and in browsers alike.
 */
export async function verifyWebhook(
  secret: string,
  headers: Record<string, string | string[] | undefined> | HeaderLookup,
  body: string,
  toleranceSeconds = 300,
): Promise<WebhookPayload> {
  // The secret is the receiver's own setting: a wrong one is its bug, not a bad delivery.
  const keyBytes = typeof secret === 'string' ? base64Bytes(secret.replace(/^whsec_/, '')) : undefined;
  // Standard Webhooks' bounds: a string that merely decodes (a password, a placeholder) is not a secret.
  if (!keyBytes || keyBytes.length < 24 || keyBytes.length > 64)
    throw new TypeError('the webhook secret must be the one create_webhook gave: whsec_ and base64');
  // Header names are case-insensitive; Node gives them in lower case, other frameworks as sent.
  // A Headers finds a name in any case itself; a plain object is looked up through its lower-cased names.
  const lookup: HeaderLookup =
    typeof headers.get === 'function'
      ? (headers as HeaderLookup)
      : new Map(
          Object.entries(headers as Record<string, string | string[] | undefined>).map(([name, value]) => [name.toLowerCase(), value]),
        );
  const header = (name: string) => {
    const value = lookup.get(name);
    return Array.isArray(value) ? value[0] : (value ?? undefined);
  };
  const [id, timestamp, signatures] = [header('webhook-id'), header('webhook-timestamp'), header('webhook-signature')];
  if (!id || !timestamp || !signatures || !/^\d+$/.test(timestamp)) throw new WebhookVerificationError('missing webhook headers');
  if (Math.abs(Date.now() / 1000 - Number(timestamp)) > toleranceSeconds) throw new WebhookVerificationError('timestamp too old or new');
  const key = await crypto.subtle.importKey('raw', keyBytes, { name: 'HMAC', hash: 'SHA-256' }, false, ['verify']);
  const message = new TextEncoder().encode(`${id}.${timestamp}.${body}`);
  for (const candidate of signatures.split(' ')) {
    const [version, encoded] = candidate.split(',');
    // The headers are the sender's: a signature that is not base64 is one that does not match.
    const signature = version === 'v1' && encoded ? exactBase64Bytes(encoded, 'base64') : undefined;
    if (!signature) continue;
    // crypto.subtle.verify compares in constant time.
    if (await crypto.subtle.verify('HMAC', key, signature, message)) {
      return JSON.parse(body) as WebhookPayload;
    }
  }
  throw new WebhookVerificationError('no signature matches the secret');
}
