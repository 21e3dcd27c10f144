import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { EventStoreNotReached } from '../../../src/eventstore/port.js';
import { PostgresEventStore } from '../../../src/eventstore/postgres.js';
import { freePort } from '../../../src/infra/embedded-postgres.js';
import { createPool, PgListener } from '../../../src/infra/postgres.js';

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
});
