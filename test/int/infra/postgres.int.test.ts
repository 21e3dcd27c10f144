import pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool, inTransaction } from '../../../src/infra/postgres.js';
import { createTestDatabase } from '../../support/database.js';

/** The PostgreSQL helpers on a real server: a connection lost while checked out is an error of the work, never of the process. */
describe('PostgreSQL connections', () => {
  let databaseUrl: string;
  let pool: pg.Pool;
  let admin: pg.Client;

  beforeAll(async () => {
    databaseUrl = await createTestDatabase();
    pool = createPool(databaseUrl, pino({ level: 'silent' }), 2);
    admin = new pg.Client({ connectionString: databaseUrl });
    await admin.connect();
  });
  afterAll(async () => {
    await admin?.end();
    await pool?.end();
  });

  it('fails a transaction whose connection is terminated (an operator, a restart), and the pool goes on with a new one', async () => {
    const outcome = inTransaction(pool, async (client) => {
      const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      await admin.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);
      // The connection is gone by now, or goes while this waits: either way the work fails here.
      await client.query('SELECT pg_sleep(2)');
    });
    await expect(outcome).rejects.toThrow();
    // Had the lost connection's 'error' event found no listener, the process (this test file) would have ended.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect((await pool.query<{ one: number }>('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
  });
});
