import { pino } from 'pino';
import { parseConfig } from '../../src/config.js';
import type { EventStore, GlobalPosition, RecordedEvent } from '../../src/eventstore/port.js';
import { ProjectionProgress } from '../../src/projections/progress.js';
import { ProjectionRunner, type ProjectionRunnerOptions } from '../../src/projections/runner.js';
import { actualReadModel, compareReadModels, expectedReadModel } from '../../src/projections/verify.js';
import { openStores } from '../../src/runtime/stores.js';
import { createTestDatabase } from './database.js';
import { eventStoreUrlFor, prepareReadDatabase } from './event-store.js';

export const silentLogger = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });

/**
 * The event store of the test's mode (PostgreSQL unless a vitest project says otherwise) and the
 * read tables on a fresh database, without HTTP.
 */
export async function startStack(databaseUrl?: string, options: { eventStoreUrl?: string } = {}) {
  const url = databaseUrl ?? (await prepareReadDatabase(await createTestDatabase()));
  const eventStoreUrl = options.eventStoreUrl ?? (await eventStoreUrlFor(url));
  // The stores as every process opens them (src/runtime/stores.ts), without the service around them.
  const config = parseConfig({ DATABASE_URL: url, EVENTSTORE_URL: eventStoreUrl ?? '' }, 'tool');
  const stores = await openStores(config, silentLogger, { poolSize: 30, listen: true });
  const { pool, listener, store } = stores;
  const progress = new ProjectionProgress(pool, (from, to) => store.estimateEventsBetween(from, to), listener, silentLogger);
  const runners: ProjectionRunner[] = [];
  return {
    url,
    pool,
    store,
    progress,
    runner(options: Partial<ProjectionRunnerOptions> = {}) {
      const runner = new ProjectionRunner({
        connectionString: url,
        store,
        progress,
        logger: silentLogger,
        standbyRetryMs: 100,
        ...options,
      });
      runners.push(runner);
      return runner;
    },
    /** Differences between the read tables and a fold of every stream; empty when they agree. */
    async differences() {
      return compareReadModels(await expectedReadModel(store), await actualReadModel(pool));
    },
    async close() {
      await Promise.all(runners.map((runner) => runner.stop()));
      progress.close();
      await stores.close();
    },
  };
}

export type Stack = Awaited<ReturnType<typeof startStack>>;

/** Resolves once `condition` holds, polling; fails after `timeoutMs`. */
export async function eventually(condition: () => Promise<boolean> | boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** `store` with its `readAll` replaced by `readAll` (which may call the store's own); every other call is the store's. */
export function withReadAll(store: EventStore, readAll: (after: GlobalPosition, limit: number) => Promise<RecordedEvent[]>): EventStore {
  return new Proxy(store, {
    get(target, property) {
      if (property === 'readAll') return readAll;
      const value = Reflect.get(target, property, target) as unknown;
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}
