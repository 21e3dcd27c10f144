import pg from 'pg';
import type { Logger } from 'pino';
import { inChildSpan } from '../observability/tracing.js';

// Bigints arrive as strings; positions and counts are converted where they are read, never as floats.
export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;

/**
 * Settings for every connection. Keepalives on both ends, so that a vanished peer is noticed in
 * about a minute (the server then releases the projector's advisory lock for a standby). No session
 * may sit idle inside a transaction for long: an open transaction holds back the event store's
 * read watermark for every reader.
 */
export const connectionSettings = {
  // Tells an operator (and pg_stat_activity) which process holds a connection.
  application_name: `workspace-solution-api pid ${process.pid}`,
  keepAlive: true,
  connectionTimeoutMillis: 5000,
  options: '-c idle_in_transaction_session_timeout=60000 -c tcp_keepalives_idle=30 -c tcp_keepalives_interval=10 -c tcp_keepalives_count=3',
};

type Query = (...args: unknown[]) => unknown;

/**
 * A query in a child span of the request's span, made at this boundary rather than by
 * @opentelemetry/instrumentation-pg. Tried here: that package patches `pg` only if it is registered
 * before `pg` is first loaded (a side-effect import ahead of every other, reading the environment
 * before src/config.ts does), it saw nothing under the import-in-the-middle ESM loader, and a test
 * process that has loaded `pg` already could not check it; this works whenever tracing starts.
 * Only the promise form is traced: the service uses nothing else, and the pool's own `query` calls
 * its client's with a callback, so that query is traced once, at the pool, in the caller's context.
 */
function traced(query: Query): Query {
  return function (this: unknown, ...args: unknown[]) {
    const first = args[0] as { text?: unknown; submit?: unknown } | string;
    if (typeof args.at(-1) === 'function' || (typeof first === 'object' && typeof first.submit === 'function'))
      return query.apply(this, args);
    const text = typeof first === 'string' ? first : String(first.text);
    return inChildSpan(
      'pg query',
      { 'db.system.name': 'postgresql', 'db.query.text': text },
      () => query.apply(this, args) as Promise<unknown>,
    );
  };
}

class TracedClient extends pg.Client {}
TracedClient.prototype.query = traced(pg.Client.prototype.query as Query) as typeof pg.Client.prototype.query;
class TracedPool extends pg.Pool {}
TracedPool.prototype.query = traced(pg.Pool.prototype.query as Query) as typeof pg.Pool.prototype.query;

const statementNames = new Map<string, string>();
/** Distinct statements named at most; a list query's text varies with the caller's organization count. */
const maxNamedStatements = 1000;

/**
 * A query as a named statement: each connection parses and plans it once, not at every call (for
 * a lookup by key that halves PostgreSQL's work). PostgreSQL plans it again by itself when a table
 * it uses changes, as at a rebuild's switch. Each distinct text gets its own name; the service's
 * texts are few (a batch write's text depends only on which kinds of change it holds), and past
 * `maxNamedStatements` the rest run unnamed. Behind a connection pooler in transaction mode, that
 * pooler must support prepared statements (PgBouncer 1.21 and later with max_prepared_statements).
 */
export function named(text: string, values: unknown[]): pg.QueryConfig {
  let name = statementNames.get(text);
  if (name === undefined && statementNames.size < maxNamedStatements) statementNames.set(text, (name = `wsapi_${statementNames.size + 1}`));
  return name === undefined ? { text, values } : { name, text, values };
}

export function createPool(connectionString: string, logger: Logger, max = 10): pg.Pool {
  const pool = new TracedPool({ connectionString, max, idleTimeoutMillis: 30_000, Client: TracedClient, ...connectionSettings });
  // An idle client losing its connection must not crash the process; the next query reconnects.
  pool.on('error', (error) => logger.warn({ err: error.message }, 'idle PostgreSQL connection lost'));
  return pool;
}

export async function inTransaction<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>, begin = 'BEGIN'): Promise<T> {
  return withClient(pool, async (client) => {
    try {
      await client.query(begin);
      const result = await work(client);
      await client.query('COMMIT');
      return result;
    } catch (error) {
      // The work's error is rethrown; a failed rollback means the connection is broken, and the pool drops it.
      await client.query('ROLLBACK').catch(() => undefined);
      throw error;
    }
  });
}

/**
 * A client of its own from `pool`, to `release` when done. The pool listens for a connection's
 * loss only while the client is idle: here, a connection lost meanwhile (terminated, PostgreSQL
 * restarted) fails the client's query, and its 'error' event, which would otherwise end the
 * process, is noted so that `release` discards the client rather than let it be reused. So it does
 * when told to (`discard`): a client that may still be inside a transaction or a stream.
 */
export async function checkOut(pool: pg.Pool): Promise<{ client: pg.PoolClient; release: (discard?: boolean) => void }> {
  const client = await pool.connect();
  let lost: Error | undefined;
  const onLoss = (error: Error) => (lost = error);
  client.on('error', onLoss);
  const release = (discard = false) => {
    client.removeListener('error', onLoss);
    client.release(lost ?? discard);
  };
  return { client, release };
}

/**
 * Runs `work` on a client of its own from `pool` (checkOut), discarded afterwards if its
 * connection was lost, or if the work did not end and `reusable` says so.
 */
export async function withClient<T>(
  pool: pg.Pool,
  work: (client: pg.PoolClient) => Promise<T>,
  reusable: (ended: boolean) => boolean = () => true,
): Promise<T> {
  const { client, release } = await checkOut(pool);
  let ended = false;
  try {
    const result = await work(client);
    ended = true;
    return result;
  } finally {
    release(!reusable(ended));
  }
}

/** Runs read-only `work` on one client in one REPEATABLE READ snapshot: everything it reads is of one instant. */
export const inReadOnlySnapshot = <T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> =>
  inTransaction(pool, work, 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');

/**
 * Begins a read-only transaction in the snapshot another transaction exported (pg_export_snapshot),
 * which must still be open: several connections then read one state of the database.
 */
export async function joinSnapshot(client: pg.ClientBase, snapshotId: string): Promise<void> {
  await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY');
  await client.query(`SET TRANSACTION SNAPSHOT ${client.escapeLiteral(snapshotId)}`);
}

/**
 * Errors PostgreSQL raises while it starts a session, refusing it: the database dropped or renamed
 * (3D000), the role's login refused (28000, 28P01), the server starting (57P03) or full (53300).
 * No statement of the service's raises these, so they are known by their code alone (the severity
 * comes in the server's language, lc_messages).
 */
const startupOnlyCodes = ['3D000', '28000', '28P01', '57P03', '53300'];
/**
 * Refusals of a session that statements can raise too, at ERROR level: the database not accepting
 * sessions (55000), the connect privilege gone (42501). A refusal only when it ends the session.
 */
const startupCodesIfFatal = ['55000', '42501'];
/** Errors that always end the session, whatever their severity's wording: idle timeouts, the database dropped. */
const sessionEndingCodes = ['25P03', '57P04', '57P05'];
/**
 * The server function that raised an error is named in English on every server, while the severity
 * (FATAL) comes in its language (lc_messages); this one refuses a session as it starts.
 */
const sessionStartRoutines = ['CheckMyDatabase'];

const isFatal = (error: Error) => {
  const { severity, routine = '' } = error as { severity?: string; routine?: string };
  return severity === 'FATAL' || sessionStartRoutines.includes(routine);
};

/** Connection-level failures (refused, reset, terminated, timeouts, any error that ends the session), as opposed to errors in a statement. */
export function isConnectionError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: string }).code ?? '';
  return (
    [
      'ECONNREFUSED',
      'ECONNRESET',
      'ETIMEDOUT',
      'EPIPE',
      'ENOTFOUND',
      'EHOSTUNREACH',
      '57P01',
      '57P02',
      ...startupOnlyCodes,
      ...sessionEndingCodes,
    ].includes(code) ||
    code.startsWith('08') ||
    isFatal(error) ||
    /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error/i.test(error.message)
  );
}

/**
 * A connection that could not be made (refused, no such host, the server starting, shutting down
 * or full, the pool's wait for one over): no statement was sent on it.
 */
export function isConnectRefusal(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const { code = '', syscall } = error as { code?: string; syscall?: string };
  // A socket error counts only from opening the connection: the same codes on an open one
  // (EHOSTUNREACH when TCP gives up) may come after a statement was sent.
  const opening = syscall === 'connect' || syscall === 'getaddrinfo';
  return (
    (opening && ['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'EAI_AGAIN'].includes(code)) ||
    // The server refused the session before any statement.
    startupOnlyCodes.includes(code) ||
    (isFatal(error) && startupCodesIfFatal.includes(code)) ||
    /timeout exceeded when trying to connect/i.test(error.message)
  );
}

/**
 * One LISTEN connection per process, shared by every channel; reconnects with back-off and tells
 * listeners when it has, since notifications sent while it was away are lost.
 */
export class PgListener {
  private client: pg.Client | undefined;
  private readonly handlers = new Map<string, Set<(payload: string) => void>>();
  private readonly reconnectHandlers = new Set<() => void>();
  private closed = false;
  private reconnecting = false;
  private readonly notifying = new Set<string>();
  private readonly notifyAgain = new Set<string>();
  private retryDelayMs = 100;
  private sessionIdentity: { pid: number; startedAt: string } | undefined;
  /** The connection's statements, one at a time (LISTENs and notifications may overlap). */
  private statements: Pick<pg.PoolClient, 'query'> | undefined;

  constructor(
    private readonly connectionString: string,
    private readonly logger: Logger,
  ) {}

  /**
   * This connection's database session while it is up: it ends when the process dies, so whatever
   * is tied to it (an idempotency claim) is free at once for another instance.
   */
  get session(): { pid: number; startedAt: string } | undefined {
    return this.client ? this.sessionIdentity : undefined;
  }

  async start(): Promise<void> {
    await this.connect();
  }

  on(channel: string, handler: (payload: string) => void): () => void {
    let set = this.handlers.get(channel);
    if (!set) {
      set = new Set();
      this.handlers.set(channel, set);
      // A failed LISTEN means the connection is lost; connect() re-issues it after reconnecting.
      this.statements
        ?.query(`LISTEN ${pg.escapeIdentifier(channel)}`)
        .catch((error: unknown) =>
          this.logger.warn({ err: (error as Error).message, channel }, 'LISTEN failed; it is repeated once the connection is back'),
        );
    }
    set.add(handler);
    return () => set.delete(handler);
  }

  /**
   * Sends a notification from this connection, coalesced: at most one in flight, and one more after
   * it when asked again meanwhile. Without waiting for the commit to reach disk: a notification is
   * only a wake-up, and the data it announces is already durable.
   */
  notify(channel: string): void {
    if (this.notifying.has(channel)) {
      this.notifyAgain.add(channel);
      return;
    }
    const statements = this.statements;
    if (!statements) return;
    this.notifying.add(channel);
    // A lost notification is only a lost wake-up: waiters also poll.
    statements
      .query('SELECT pg_notify($1, $2)', [channel, ''])
      .catch(() => undefined)
      .finally(() => {
        this.notifying.delete(channel);
        if (this.notifyAgain.delete(channel)) this.notify(channel);
      });
  }

  onReconnect(handler: () => void): void {
    this.reconnectHandlers.add(handler);
  }

  async close(): Promise<void> {
    this.closed = true;
    // Closing: the connection is discarded whatever its end does.
    await this.client?.end().catch(() => undefined);
    this.client = undefined;
    this.statements = undefined;
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({ connectionString: this.connectionString, ...connectionSettings });
    client.on('notification', (message) => {
      for (const handler of this.handlers.get(message.channel) ?? []) handler(message.payload ?? '');
    });
    const lost = () => {
      if (this.client !== client) return;
      this.client = undefined;
      this.statements = undefined;
      // Already lost: ending it only frees what is left of it.
      client.end().catch(() => undefined);
      this.scheduleReconnect();
    };
    client.on('error', lost);
    client.on('end', lost);
    await client.connect();
    await client.query('SET synchronous_commit = off');
    const { rows } = await client.query<{ pid: number; started_at: string }>(
      'SELECT pid, backend_start::text AS started_at FROM pg_stat_activity WHERE pid = pg_backend_pid()',
    );
    this.sessionIdentity = rows[0] && { pid: rows[0].pid, startedAt: rows[0].started_at };
    for (const channel of this.handlers.keys()) await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
    this.client = client;
    // pg 9 refuses a statement sent while another runs on the same connection.
    this.statements = oneAtATime(client);
    this.retryDelayMs = 100;
    for (const handler of this.reconnectHandlers) handler();
  }

  private scheduleReconnect(): void {
    if (this.closed || this.reconnecting) return;
    this.reconnecting = true;
    const delay = this.retryDelayMs;
    this.retryDelayMs = Math.min(this.retryDelayMs * 2, 5000);
    this.logger.warn({ retryInMs: delay }, 'LISTEN connection lost; reconnecting');
    setTimeout(() => {
      this.reconnecting = false;
      if (this.closed) return;
      this.connect().catch(() => this.scheduleReconnect());
    }, delay).unref();
  }
}

/** A timestamptz column in the contract's timestamp form (§8), microseconds included. */
export const isoMicros = (column: string) => `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/**
 * A client that runs the statements given to it one after the other. loadRows (and
 * actualReadModel) send theirs at once, which a single pg.Client only queues, with a deprecation
 * warning (an error in pg 9).
 */
export function oneAtATime(client: pg.ClientBase): Pick<pg.PoolClient, 'query'> {
  let last: Promise<unknown> = Promise.resolve();
  const query = (...args: unknown[]) => {
    const next = last.then(() => (client.query as (...a: unknown[]) => Promise<unknown>)(...args));
    // Only orders the next query after this one; the caller sees this one's failure through `next`.
    last = next.catch(() => undefined);
    return next;
  };
  return { query } as unknown as Pick<pg.PoolClient, 'query'>;
}
