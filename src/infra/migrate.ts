import { idempotencySchema } from '../api/idempotency.js';
import { postgresEventStoreSchema } from '../eventstore/postgres.js';
import { projectorLeaderSchema } from '../projections/runner.js';
import { readModelSchema } from '../projections/schema.js';
import { inTransaction, type Pool } from './postgres.js';

const migrationLockKey = 7_720_411_901;

/** Creates the tables every instance needs; idempotent, and serialised when instances start together. */
export async function migrate(pool: Pool, options: { eventStore: boolean }): Promise<void> {
  await inTransaction(pool, async (client) => {
    await client.query('SELECT pg_advisory_xact_lock($1)', [migrationLockKey]);
    if (options.eventStore) await client.query(postgresEventStoreSchema);
    await client.query(readModelSchema);
    await client.query(projectorLeaderSchema);
    await client.query(idempotencySchema);
  });
}
