import { pino } from 'pino';
import { describe } from 'vitest';
import { EventStoreDBEventStore } from '../../src/eventstore/eventstoredb.js';
import { InMemoryEventStore } from '../../src/eventstore/in-memory.js';
import { PostgresEventStore } from '../../src/eventstore/postgres.js';
import { migrate } from '../../src/infra/migrate.js';
import { createPool, PgListener } from '../../src/infra/postgres.js';
import { createTestDatabase } from '../support/database.js';
import { dockerAnswers, startEventStoreDBContainer } from '../support/eventstoredb-container.js';
import { EventStoreDBStandIn, type StandInOptions } from '../support/eventstoredb-standin/index.js';
import { eventStoreContract, type StoreUnderTest } from './event-store-contract.js';

const logger = pino({ level: 'silent' });

describe('event store port on PostgreSQL', () => {
  eventStoreContract(async () => {
    const url = await createTestDatabase();
    const pool = createPool(url, logger, 30);
    await migrate(pool, { eventStore: true });
    const listener = new PgListener(url, logger);
    await listener.start();
    return {
      store: new PostgresEventStore(pool, listener),
      close: async () => {
        await listener.close();
        await pool.end();
      },
    };
  });
});

/** The adapter on a store at `url`, once the node serves reads (a fresh node elects itself leader first). */
async function openEventStoreDB(url: string, stop: () => Promise<void>): Promise<StoreUnderTest> {
  const store = new EventStoreDBEventStore(url, { logger, commandTimeoutMs: 10_000 });
  for (let attempt = 1; ; attempt++) {
    try {
      await store.ping();
      break;
    } catch (error) {
      if (attempt >= 60) throw error;
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }
  return {
    store,
    close: async () => {
      await store.close();
      await stop();
    },
  };
}

async function onStandIn(options: StandInOptions): Promise<StoreUnderTest> {
  const standIn = await EventStoreDBStandIn.start(options);
  return openEventStoreDB(standIn.url, () => standIn.stop());
}

describe('event store port in memory (for tests that need no database)', () => {
  eventStoreContract(async () => ({ store: new InMemoryEventStore(), close: async () => undefined }));
});

describe('event store port on the EventStoreDB stand-in (BatchAppend, servers from 21.10)', () => {
  eventStoreContract(() => onStandIn({ batchAppend: true }));
});

describe('event store port on the EventStoreDB stand-in (Append, older servers)', () => {
  eventStoreContract(() => onStandIn({ batchAppend: false }));
});

/**
 * A real EventStoreDB where one can be had: EVENTSTORE_URL (a throwaway node: the suite writes test
 * streams), else a testcontainers node when a Docker engine answers. Elsewhere the suite is not
 * registered at all, and one line says so: nothing is counted as skipped.
 */
if (process.env.EVENTSTORE_URL) {
  // eslint-disable-next-line vitest/no-conditional-tests -- which server, if any, is this machine's; not one test's outcome
  describe('event store port on EventStoreDB (EVENTSTORE_URL)', () => {
    eventStoreContract(() => openEventStoreDB(process.env.EVENTSTORE_URL!, async () => undefined));
  });
} else if (await dockerAnswers()) {
  // eslint-disable-next-line vitest/no-conditional-tests -- as above
  describe('event store port on EventStoreDB (testcontainers)', () => {
    eventStoreContract(async () => {
      const container = await startEventStoreDBContainer();
      return openEventStoreDB(container.url, container.stop);
    });
  });
} else {
  console.info('event store port on a real EventStoreDB: not run here (no EVENTSTORE_URL, no Docker engine); the stand-in runs it');
}
