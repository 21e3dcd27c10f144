import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { toServiceError } from '../../../src/api/errors.js';
import { EventStoreNotReached } from '../../../src/eventstore/port.js';
import { PostgresEventStore } from '../../../src/eventstore/postgres.js';
import { freePort } from '../../../src/infra/embedded-postgres.js';
import { createPool, PgListener } from '../../../src/infra/postgres.js';
import { createTestDatabase } from '../../support/database.js';

const logger = pino({ level: 'silent' });

/** An append that cannot get a connection never left: the store says so, and a command's 503 then says its outcome is known. */
describe('PostgreSQL event store with nothing listening at its address', () => {
  const closes: (() => Promise<void>)[] = [];
  afterAll(async () => {
    for (const close of closes) await close();
  });

  it('fails an append as not reached', async () => {
    const url = `postgresql://postgres@127.0.0.1:${await freePort()}/nowhere`;
    const pool = createPool(url, logger, 1);
    const listener = new PgListener(url, logger);
    closes.push(() => pool.end());
    const store = new PostgresEventStore(pool, listener);
    await expect(
      store.append(`workspace-ws_${randomUUID()}`, 0n, [{ id: randomUUID(), type: 'WorkspaceCreated', data: {}, metadata: {} }]),
    ).rejects.toBeInstanceOf(EventStoreNotReached);
  });

  // The server is there, but refuses the database's sessions (PostgreSQL raises these only when a
  // session starts): nothing was sent, and any statement answers 503, not 500.
  it.each([
    ['does not accept connections', 'ALTER DATABASE %I ALLOW_CONNECTIONS false'],
    ['no longer exists', 'DROP DATABASE %I'],
  ])('fails an append as not reached, and a query as unavailable, when the database %s', async (_case, statement) => {
    const url = await createTestDatabase();
    const admin = new pg.Client({ connectionString: inject('adminDatabaseUrl') });
    await admin.connect();
    try {
      const { rows } = await admin.query<{ sql: string }>('SELECT format($1::text, $2::text) AS sql', [
        statement,
        new URL(url).pathname.slice(1),
      ]);
      await admin.query(rows[0]!.sql);
    } finally {
      await admin.end();
    }
    const pool = createPool(url, logger, 1);
    closes.push(() => pool.end());
    const store = new PostgresEventStore(pool, new PgListener(url, logger));
    await expect(
      store.append(`workspace-ws_${randomUUID()}`, 0n, [{ id: randomUUID(), type: 'WorkspaceCreated', data: {}, metadata: {} }]),
    ).rejects.toBeInstanceOf(EventStoreNotReached);
    const refused = await pool.query('SELECT 1').catch((error: unknown) => error);
    expect(toServiceError(refused).code).toBe('unavailable');
  });
});
