import type { Logger } from 'pino';
import type { Config } from '../config.js';
import { foreignEventLog, reportForeignEvents } from '../eventstore/event-log.js';
import type { EventStore } from '../eventstore/port.js';
import { PostgresEventStore } from '../eventstore/postgres.js';
import { startEmbeddedPostgres } from '../infra/embedded-postgres.js';
import { migrate } from '../infra/migrate.js';
import { createPool, isConnectionError, PgListener, type Pool } from '../infra/postgres.js';

export type Stores = {
  databaseUrl: string;
  pool: Pool;
  listener: PgListener;
  store: EventStore;
  /** Closes the event store, the listener and the pool, and stops an embedded PostgreSQL no other process uses. */
  close: () => Promise<void>;
  /**
   * For a process about to exit on an interrupt: stops an embedded PostgreSQL no other process
   * uses, without waiting for this process's own queries (the server's fast shutdown ends them).
   */
  abandon: () => Promise<void>;
};

/**
 * The one way every process opens its stores (the service, the operator tools, the tests and the
 * bench): the read database (DATABASE_URL, or the embedded PostgreSQL in DATA_DIR, shared between
 * processes), its schema brought up to date, and the event store (EVENTSTORE_URL, or PostgreSQL).
 */
export async function openStores(
  config: Config,
  logger: Logger,
  options: {
    poolSize: number;
    listen: boolean;
    migrate?: boolean;
    /** Refuse a DATABASE_URL the service has never run on, rather than create its tables there (a tool that only reads or repairs). */
    requireSchema?: boolean;
    eventStoreReadTimeoutMs?: number;
  },
): Promise<Stores> {
  const embedded = config.databaseUrl ? undefined : await startEmbeddedPostgres(config.dataDir, logger);
  const databaseUrl = config.databaseUrl ?? embedded!.url;
  const pool = createPool(databaseUrl, logger, options.poolSize);
  // The PostgreSQL store listens only to wake waiting projectors; a tool never waits and never starts it.
  const listener = new PgListener(databaseUrl, logger);
  try {
    // A DATA_DIR is the service's own (a tool on a new one makes it, as npm start would); a
    // DATABASE_URL may name anyone's database.
    if (options.requireSchema && config.databaseUrl) await requireServiceSchema(pool);
    if (options.migrate ?? true)
      await migrate(pool, {
        eventStore: !config.eventStoreUrl,
        onNewerSchema: (unknownSteps) =>
          logger.warn(
            { unknownSteps },
            'the database was migrated by a newer release of the service (schema steps this version does not know): ' +
              "running as the older side of a rolling upgrade; if this is a rollback, the newer release's changes stay in the schema",
          ),
      });
    if (options.listen) await listener.start();
  } catch (error) {
    await listener.close();
    await pool.end();
    await embedded?.stop();
    throw config.databaseUrl && isConnectionError(error) ? new DatabaseUnreachable(config.databaseUrl, error as Error) : error;
  }
  // Loaded only in that mode: the EventStoreDB client (gRPC and its protocol buffers) takes a
  // fifth of a second to load, on every start of the service and of every tool.
  const store: EventStore = config.eventStoreUrl
    ? new (await import('../eventstore/eventstoredb.js')).EventStoreDBEventStore(config.eventStoreUrl, {
        logger: logger.child({ component: 'eventstoredb' }),
        ...(options.eventStoreReadTimeoutMs ? { readTimeoutMs: options.eventStoreReadTimeoutMs } : {}),
      })
    : new PostgresEventStore(pool, listener);
  // The service reports through its own instrumented store (src/runtime/service.ts); the tools, the tests and the bench through this one.
  reportForeignEvents(store, foreignEventLog(logger));
  return {
    databaseUrl,
    pool,
    listener,
    store,
    close: async () => {
      await store.close();
      await listener.close();
      await pool.end();
      await embedded?.stop();
    },
    abandon: async () => {
      await embedded?.stop();
    },
  };
}

/** Throws unless the service has migrated this database (its `schema_migrations` is there). */
async function requireServiceSchema(pool: Pool): Promise<void> {
  const { rows } = await pool.query<{ present: boolean }>("SELECT to_regclass('schema_migrations') IS NOT NULL AS present");
  if (!rows[0]?.present) {
    throw new Error("the database holds none of the service's tables: the service has never run on it; check DATABASE_URL");
  }
}

/** The database DATABASE_URL names could not be reached or refused the session: says which, its password hidden. */
class DatabaseUnreachable extends Error {
  constructor(databaseUrl: string, cause: Error) {
    super(`the database at DATABASE_URL (${withoutPassword(databaseUrl)}) could not be used: ${cause.message}`, { cause });
  }
}

function withoutPassword(databaseUrl: string): string {
  try {
    const url = new URL(databaseUrl);
    if (url.password) url.password = '***';
    return url.toString();
  } catch {
    // Not a URL (a libpq key/value string): pg has parsed it, but it may hold a password; name only the variable.
    return 'as set';
  }
}
