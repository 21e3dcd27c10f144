import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startOfLog, type GlobalPosition } from '../../../src/eventstore/port.js';
import { PostgresEventStore } from '../../../src/eventstore/postgres.js';
import { migrate } from '../../../src/infra/migrate.js';
import { createPool, PgListener } from '../../../src/infra/postgres.js';
import { createTestDatabase } from '../../support/database.js';
import { eventually } from '../../support/stack.js';

const logger = pino({ level: 'silent' });

/** The last event in this database's log, whatever transactions still run on the server. */
async function lastEventOf(url: string): Promise<GlobalPosition | undefined> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ commit: string; prepare: string }>(
      'SELECT transaction_id::text AS commit, position::text AS prepare FROM es_events ORDER BY transaction_id DESC, position DESC LIMIT 1',
    );
    return rows[0] && { commit: BigInt(rows[0].commit), prepare: BigInt(rows[0].prepare) };
  } finally {
    await client.end();
  }
}

/** Two instances of the service on one database: each its own pool, listener and store. */
describe('PostgreSQL event store: waking the projector after an append', () => {
  const instances: { store: PostgresEventStore; close: () => Promise<void> }[] = [];
  let url: string;

  beforeAll(async () => {
    url = await createTestDatabase();
    const pool = createPool(url, logger, 2);
    await migrate(pool, { eventStore: true });
    await pool.end();
  });

  afterAll(async () => {
    for (const instance of instances) await instance.close();
  });

  async function instance(): Promise<PostgresEventStore> {
    const pool = createPool(url, logger, 4);
    const listener = new PgListener(url, logger);
    await listener.start();
    const store = new PostgresEventStore(pool, listener);
    instances.push({
      store,
      close: async () => {
        await listener.close();
        await pool.end();
      },
    });
    return store;
  }

  const append = (store: PostgresEventStore) =>
    store.append(`workspace-ws_${randomUUID()}`, 0n, [{ id: randomUUID(), type: 'WorkspaceCreated', data: {}, metadata: {} }]);

  /** How long a wait of at most `timeoutMs` lasted. */
  async function waitOn(store: PostgresEventStore, timeoutMs: number): Promise<number> {
    const started = performance.now();
    await store.waitForEvents(startOfLog, timeoutMs, new AbortController().signal);
    return performance.now() - started;
  }

  it('wakes the projector of another instance by a notification while the active one is not its own', async () => {
    const writer = await instance();
    const reader = await instance();
    writer.readLocally(() => false);

    const waited = waitOn(reader, 30_000);
    await append(writer);
    expect(await waited).toBeLessThan(10_000);
  });

  it('wakes its own projector directly, and sends no notification, while the active one is its own', async () => {
    const writer = await instance();
    const elsewhere = await instance();
    writer.readLocally(() => true);

    const ownWait = waitOn(writer, 30_000);
    const elsewhereWait = waitOn(elsewhere, 1500);
    await append(writer);
    expect(await ownWait).toBeLessThan(10_000);
    // Only its timeout ends the other instance's wait: no notification reached it.
    expect(await elsewhereWait).toBeGreaterThanOrEqual(1400);
  });

  it('looks again soon, not after the whole wait, for its appended events that an older append still hides', async () => {
    const store = await instance();
    store.readLocally(() => true);
    // The log's last event, read past the store's watermark: another database's transaction on the server may hold that back.
    const last = await lastEventOf(url);
    const before = last ?? startOfLog;
    // Another instance's append, begun before this one and still running.
    const blocker = new pg.Client({ connectionString: url });
    await blocker.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query('SELECT * FROM es_append_batch($1::jsonb)', [
        JSON.stringify([
          {
            stream: `workspace-ws_${randomUUID()}`,
            expected: '0',
            events: [{ id: randomUUID(), type: 'WorkspaceCreated', data: {}, metadata: {} }],
          },
        ]),
      ]);
      await append(store);
      expect(await store.readAll(before, 10)).toEqual([]);
      // The append's own wake-up ends the first wait; the next one is what the projector waits after reading nothing.
      await waitOn(store, 30_000);
      expect(await store.readAll(before, 10)).toEqual([]);
      expect(await waitOn(store, 30_000)).toBeLessThan(10_000);
      await blocker.query('COMMIT');
      // Visible, both, once no older append runs anywhere on the server (other test files' too).
      await eventually(async () => (await store.readAll(before, 10)).length === 2);
    } finally {
      await blocker.end();
    }
  });
});
