import { pino, type Logger } from 'pino';
import { ConfigError, parseConfig, type Config } from '../config.js';
import type { EventStore } from '../eventstore/port.js';
import type { Pool } from '../infra/postgres.js';
import { onStopSignal, type StopSignal } from '../infra/stop-signals.js';
import { openStores } from '../runtime/stores.js';

/** Set once the tool's stores are open: what an interrupt must release before the tool exits. */
let releaseStores: (() => Promise<void>) | undefined;
let interruptedBy: StopSignal | undefined;
/** Whether the tool starts a PostgreSQL of its own (no DATABASE_URL): one an interrupt must not leave behind. */
let startsItsDatabase = false;

/**
 * Ctrl-C or SIGTERM ends a tool at once (each of its writes is one transaction, so nothing is
 * left half-written) and stops the embedded PostgreSQL when nothing else uses it. A signal that
 * arrives while the stores are still opening ends a tool on DATABASE_URL at once too; one that
 * starts its own database ends as soon as the stores are open (or failed to), so that the
 * database started for it is not left behind.
 */
async function exitOnInterrupt(signal: StopSignal): Promise<void> {
  interruptedBy = signal;
  if (!releaseStores && startsItsDatabase) return;
  process.stderr.write(`interrupted by ${signal}\n`);
  await releaseStores?.();
  process.exit(130);
}

/**
 * The operator tools' start: the service's settings read for a tool (a bad value exits 2), a
 * logger on stderr, and what a stop signal does: by default it ends the tool at once; a tool that
 * winds down its own way (the rebuild, after its current batch) passes `onStop` and closes its
 * connection itself.
 */
export function operatorSetup(onStop: (signal: StopSignal) => unknown = exitOnInterrupt): { config: Config; logger: Logger } {
  onStopSignal(onStop);
  try {
    // A tool logs warnings and worse unless told otherwise: its report is what it prints.
    const config = parseConfig({ ...process.env, LOG_LEVEL: process.env.LOG_LEVEL || 'warn' }, 'tool');
    startsItsDatabase = config.databaseUrl === undefined;
    return { config, logger: pino({ level: config.logLevel }, pino.destination(2)) };
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`${error.message}\n`);
    process.exit(2);
  }
}

export type OperatorConnection = {
  databaseUrl: string;
  pool: Pool;
  store: EventStore;
  /** The number of events in the log, when the store can tell cheaply. */
  estimateTotal: () => Promise<number | undefined>;
  close: () => Promise<void>;
};

/**
 * The stores as the service opens them (src/runtime/stores.ts), shared with a service running on the same
 * DATA_DIR; `$all` pages may take a minute on a large EventStoreDB log. A DATABASE_URL the
 * service has never run on is refused, unless the tool builds one (`requireSchema: false`): a
 * mistyped one must not get the service's tables and a clean report.
 */
export async function connectOperator(
  config: Config,
  logger: Logger,
  options: { migrate?: boolean; requireSchema?: boolean } = {},
): Promise<OperatorConnection> {
  const stores = await openStores(config, logger, {
    poolSize: 6,
    listen: false,
    migrate: options.migrate ?? true,
    requireSchema: options.requireSchema ?? true,
    eventStoreReadTimeoutMs: 60_000,
  }).catch((error: unknown) => {
    // Interrupted while the stores were opening: the interrupt is the outcome, not what opening met meanwhile.
    if (interruptedBy) {
      process.stderr.write(`interrupted by ${interruptedBy}\n`);
      process.exit(130);
    }
    throw error;
  });
  releaseStores = () =>
    stores.abandon().catch((error: unknown) => logger.warn({ err: error }, 'the embedded PostgreSQL could not be stopped'));
  if (interruptedBy) await exitOnInterrupt(interruptedBy);
  return {
    databaseUrl: stores.databaseUrl,
    pool: stores.pool,
    store: stores.store,
    estimateTotal: async () => {
      if (config.eventStoreUrl) return undefined;
      const { rows } = await stores.pool.query<{ count: string }>('SELECT count(*) AS count FROM es_events');
      return Number(rows[0]?.count ?? 0);
    },
    close: stores.close,
  };
}
