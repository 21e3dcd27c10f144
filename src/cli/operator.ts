import { pino, type Logger } from 'pino';
import { ConfigError, parseConfig, type Config } from '../config.js';
import type { EventStore } from '../eventstore/port.js';
import type { Pool } from '../infra/postgres.js';
import { openStores } from '../stores.js';

/** The operator tools' start: the service's settings read for a tool (a bad value exits 2), and a logger on stderr. */
export function operatorSetup(): { config: Config; logger: Logger } {
  try {
    const config = parseConfig(process.env, 'tool');
    return { config, logger: pino({ level: process.env.LOG_LEVEL || 'warn' }, pino.destination(2)) };
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
 * The stores as the service opens them (src/stores.ts), shared with a service running on the same
 * DATA_DIR; `$all` pages may take a minute on a large EventStoreDB log.
 */
export async function connectOperator(config: Config, logger: Logger, options: { migrate?: boolean } = {}): Promise<OperatorConnection> {
  const stores = await openStores(config, logger, {
    poolSize: 6,
    listen: false,
    migrate: options.migrate ?? true,
    eventStoreReadTimeoutMs: 60_000,
  });
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
