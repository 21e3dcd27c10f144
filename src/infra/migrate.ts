import { lockKeys } from './lock-keys.js';
import { migrations, type Migration } from './migrations/index.js';
import { inTransaction, type Pool } from './postgres.js';

/**
 * Brings the database's schema up to date: each step of src/infra/migrations that is not yet in
 * `schema_migrations` is applied and recorded, in order, in one transaction. Instances starting
 * together take turns under an advisory lock, so each step runs once. Steps recorded that this
 * version does not have (a newer release migrated the database) are told to `onNewerSchema`: such
 * an instance still starts, as the older side of a rolling upgrade must, but an operator who
 * rolled back by mistake should hear of it.
 */
export async function migrate(
  pool: Pool,
  options: { eventStore: boolean; onNewerSchema?: (unknownSteps: number[]) => void },
  steps: readonly Migration[] = migrations,
): Promise<number[]> {
  return inTransaction(pool, async (client) => {
    await client.query('SELECT pg_advisory_xact_lock($1)', [lockKeys.migration]);
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version int PRIMARY KEY,
      name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`);
    const { rows } = await client.query<{ version: number }>('SELECT version FROM schema_migrations');
    const done = new Set(rows.map((row) => row.version));
    const applied: number[] = [];
    for (const step of steps) {
      if (done.has(step.version) || (step.when === 'events in PostgreSQL' && !options.eventStore)) continue;
      await client.query(step.sql);
      await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [step.version, step.name]);
      applied.push(step.version);
    }
    const known = new Set(steps.map((step) => step.version));
    const unknownSteps = [...done].filter((version) => !known.has(version)).sort((a, b) => a - b);
    if (unknownSteps.length > 0) options.onNewerSchema?.(unknownSteps);
    return applied;
  });
}
