import { existsSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { EventStoreDBEventStore } from '../../src/eventstore/eventstoredb.js';
import { EventStoreUnavailable, startOfLog } from '../../src/eventstore/port.js';
import { freePort } from '../../src/infra/embedded-postgres.js';
import { PostgresEventStore } from '../../src/eventstore/postgres.js';
import { migrate } from '../../src/infra/migrate.js';
import { createPool, PgListener } from '../../src/infra/postgres.js';
import { createTestDatabase } from '../support/database.js';
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

/**
 * Where an EventStoreDB comes from: EVENTSTORE_URL, else a container when a Docker engine answers
 * (checked cheaply before testcontainers is loaded at all), else nowhere, and the reason why.
 */
async function eventStoreDBSource(): Promise<{ source: string } | { skip: string }> {
  if (process.env.EVENTSTORE_URL) return { source: 'EVENTSTORE_URL' };
  if (!process.env.DOCKER_HOST && !existsSync('/var/run/docker.sock')) {
    return { skip: 'EVENTSTORE_URL is not set and there is no Docker engine (no DOCKER_HOST, no /var/run/docker.sock)' };
  }
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await getContainerRuntimeClient();
    return { source: 'testcontainers' };
  } catch (error) {
    return { skip: `EVENTSTORE_URL is not set and the Docker engine does not answer (${(error as Error).message})` };
  }
}

const image = process.env.EVENTSTORE_IMAGE ?? 'eventstore/eventstore:24.10';
const esdb = await eventStoreDBSource();
if ('skip' in esdb) console.info(`event store port on EventStoreDB: skipped, ${esdb.skip}`);

async function openEventStoreDB(): Promise<StoreUnderTest> {
  let url = process.env.EVENTSTORE_URL;
  let stopContainer = async () => undefined as void;
  if (!url) {
    const { GenericContainer, Wait } = await import('testcontainers');
    const container = await new GenericContainer(image)
      .withEnvironment({ EVENTSTORE_INSECURE: 'true', EVENTSTORE_RUN_PROJECTIONS: 'None', EVENTSTORE_MEM_DB: 'true' })
      .withExposedPorts(2113)
      .withWaitStrategy(Wait.forHttp('/health/live', 2113).forStatusCodeMatching((status) => status >= 200 && status < 300))
      .withStartupTimeout(180_000)
      .start();
    // Built by hand: @testcontainers/kurrentdb answers kurrentdb://, which this client does not parse.
    url = `esdb://${container.getHost()}:${container.getMappedPort(2113)}?tls=false`;
    stopContainer = async () => {
      await container.stop();
    };
  }
  const store = new EventStoreDBEventStore(url, { logger, commandTimeoutMs: 10_000 });
  // Live is not yet ready: wait until the node serves reads (it has elected itself leader).
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
      await stopContainer();
    },
  };
}

describe.skipIf('skip' in esdb)(`event store port on EventStoreDB (${'source' in esdb ? esdb.source : 'skipped'})`, () => {
  eventStoreContract(openEventStoreDB);
});

describe('EventStoreDB adapter when EventStoreDB cannot be reached (runs everywhere)', () => {
  const newEvent = { id: '8e0c2b8a-4b1e-4c7e-9d2a-0f3b5c6d7e8f', type: 'WorkspaceCreated', data: {}, metadata: {} };

  /** A TCP server that accepts connections and never says anything: the case a deadline alone does not cover. */
  const silent: { server?: Server; sockets: Set<Socket> } = { sockets: new Set() };
  async function silentNode(): Promise<string> {
    const server = createServer((socket) => {
      silent.sockets.add(socket);
      socket.on('error', () => undefined);
    });
    silent.server = server;
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return `esdb://127.0.0.1:${(server.address() as { port: number }).port}?tls=false`;
  }
  afterAll(async () => {
    for (const socket of silent.sockets) socket.destroy();
    await new Promise((resolve) => (silent.server ? silent.server.close(resolve) : resolve(undefined)));
  });

  it.each([
    ['a single node that refuses connections', async () => `esdb://127.0.0.1:${await freePort()}?tls=false`],
    ['a cluster whose nodes all refuse connections', async () => `esdb://127.0.0.1:${await freePort()},127.0.0.1:${await freePort()}?tls=false`],
    ['a node that accepts connections and never answers', silentNode],
  ])('%s: every call fails promptly with EventStoreUnavailable, and waiting falls back to polling', async (_, url) => {
    // Constructing connects to nothing: the service starts without EventStoreDB.
    const store = new EventStoreDBEventStore(await url(), { logger, commandTimeoutMs: 2000, readTimeoutMs: 2000 });
    try {
      for (const call of [
        () => store.ping(),
        () => store.append('workspace-unreachable', 0n, [newEvent]),
        () => store.readStream('workspace-unreachable'),
        () => store.readAll(startOfLog, 10),
      ]) {
        const started = Date.now();
        await expect(call()).rejects.toBeInstanceOf(EventStoreUnavailable);
        expect(Date.now() - started).toBeLessThan(2000 + 1000);
      }
      const started = Date.now();
      await store.waitForEvents(startOfLog, 300, new AbortController().signal);
      await store.waitForEvents(startOfLog, 300, new AbortController().signal);
      expect(Date.now() - started).toBeLessThan(3000);
    } finally {
      await store.close();
    }
  });
});
