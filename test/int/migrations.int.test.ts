import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/infra/migrate.js';
import { migrations } from '../../src/infra/migrations/index.js';
import { readModelSchema } from '../../src/projections/schema.js';
import { signingSecrets } from '../../src/webhooks/webhook.js';
import { createTestDatabase } from '../support/database.js';
import { callApi, startTestService } from '../support/service.js';

const pools: pg.Pool[] = [];
const poolOn = (url: string) => {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pools.push(pool);
  return pool;
};
afterAll(async () => {
  await Promise.all(pools.map((pool) => pool.end()));
});

/** Columns, types, nullability and defaults of the tables in `schema`, and their storage options, comparable across schemas. */
async function tableShapes(pool: pg.Pool, schema: string, tables: string[]) {
  const { rows: columns } = await pool.query(
    `SELECT table_name, column_name, data_type, is_nullable, column_default
     FROM information_schema.columns WHERE table_schema = $1 AND table_name = ANY($2)
     ORDER BY table_name, ordinal_position`,
    [schema, tables],
  );
  const { rows: options } = await pool.query(
    `SELECT c.relname, c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = $1 AND c.relname = ANY($2) ORDER BY c.relname`,
    [schema, tables],
  );
  return { columns, options };
}

describe('versioned migrations', () => {
  it('applies every step once, in order, and nothing the second time', async () => {
    const pool = poolOn(await createTestDatabase());
    expect(await migrate(pool, { eventStore: true })).toEqual(migrations.map((step) => step.version));
    expect(await migrate(pool, { eventStore: true })).toEqual([]);
    const { rows } = await pool.query('SELECT version, name FROM schema_migrations ORDER BY version');
    expect(rows).toEqual(migrations.map(({ version, name }) => ({ version, name })));
  });

  it('tells an older release the steps a newer one applied, and still migrates and starts it; tells an up-to-date one nothing', async () => {
    const pool = poolOn(await createTestDatabase());
    const told: number[][] = [];
    const onNewerSchema = (steps: number[]) => told.push(steps);
    await migrate(pool, { eventStore: true, onNewerSchema });
    expect(told).toEqual([]);
    // The release before the last two steps, on the schema the newest one made.
    expect(await migrate(pool, { eventStore: true, onNewerSchema }, migrations.slice(0, -2))).toEqual([]);
    expect(told).toEqual([migrations.slice(-2).map((step) => step.version)]);
  });

  it('lets instances that start together take turns: each step runs once', async () => {
    const url = await createTestDatabase();
    const applied = await Promise.all([1, 2, 3].map(() => migrate(poolOn(url), { eventStore: true })));
    expect(applied.flat().sort((a, b) => a - b)).toEqual(migrations.map((step) => step.version));
  });

  it('applies the event store step only where events are kept in PostgreSQL, and later when they are', async () => {
    const pool = poolOn(await createTestDatabase());
    await migrate(pool, { eventStore: false });
    expect((await pool.query("SELECT to_regclass('es_events') AS t")).rows[0].t).toBeNull();
    expect(await migrate(pool, { eventStore: true })).toEqual([1, 6, 14]);
    expect((await pool.query("SELECT to_regclass('es_events') AS t")).rows[0].t).toBe('es_events');
  });

  it('creates the read tables exactly as the rebuild does (src/projections/schema.ts)', async () => {
    const pool = poolOn(await createTestDatabase());
    await migrate(pool, { eventStore: false });
    const client = await pool.connect();
    try {
      await client.query('CREATE SCHEMA fresh; SET search_path TO fresh');
      await client.query(readModelSchema);
    } finally {
      await client.query('RESET search_path');
      client.release();
    }
    const tables = [
      'workspaces',
      'solutions',
      'organization_counts',
      'workspace_solution_counts',
      'cascade_pending',
      'projection_checkpoints',
      'changes',
    ];
    const migrated = await tableShapes(pool, 'public', tables);
    expect(migrated.columns.length).toBeGreaterThan(20);
    expect(migrated.options).toContainEqual({ relname: 'solutions', reloptions: ['fillfactor=80'] });
    expect(await tableShapes(pool, 'fresh', tables)).toEqual(migrated);
  });

  it('upgrades webhooks rotated before migration 17 and created before 18: the old secret still signs, the start is unknown', async () => {
    const pool = poolOn(await createTestDatabase());
    const upTo16 = migrations.filter((step) => step.version <= 16);
    await migrate(pool, { eventStore: false }, upTo16);
    // As the version before wrote them: one rotated an hour ago, one rotated two days ago.
    for (const [id, rotated] of [
      ['wh_recent', '1 hour'],
      ['wh_old', '2 days'],
    ]) {
      await pool.query(
        `INSERT INTO webhooks (id, organization_id, url, types, description, enabled, secret, previous_secret, previous_secret_until,
           enqueued_commit, enqueued_prepare, created_at, updated_at)
         VALUES ($1, 'org_up', 'https://example.com/', '{WorkspaceCreated}', '', true, 'whsec_new', 'whsec_old',
           now() - $2::interval + interval '24 hours', 7, 7, now(), now())`,
        [id, rotated],
      );
    }
    expect(await migrate(pool, { eventStore: false })).toEqual(migrations.filter((step) => step.version > 16).map((step) => step.version));
    const { rows } = await pool.query(
      `SELECT id, secret, previous_secret, previous_secret_until, retired_secrets, start_commit FROM webhooks ORDER BY id`,
    );
    const now = new Date();
    expect(rows.map((row) => [row.id, signingSecrets(row, now), row.retired_secrets.length, row.start_commit])).toEqual([
      ['wh_old', ['whsec_new'], 0, null],
      ['wh_recent', ['whsec_new', 'whsec_old'], 1, null],
    ]);
  });

  it('upgrades a database created by the schema before migrations, keeping its data, and the service runs on it', async () => {
    const url = await createTestDatabase();
    const pool = poolOn(url);
    // Steps 1 to 3 are the schema every database had before versioned migrations (commit 6f8da1a),
    // created IF NOT EXISTS at each start, with no record of what was applied.
    for (const step of migrations.slice(0, 3)) await pool.query(step.sql);
    // A record and a kept answer, written as the previous version wrote them.
    const workspaceId = `ws_${'u'.repeat(21)}`;
    const data = { id: workspaceId, organization_id: 'org_upgrade', name: 'Before', description: '', attributes: {} };
    const metadata = { actor: 'user-1', request_id: 'old', occurred_at: '2026-01-01T00:00:00.000000Z', schema_version: 2 };
    await pool.query('SELECT * FROM es_append($1, 0, $2, $3, $4, $5)', [
      `workspace-${workspaceId}`,
      [randomUUID()],
      ['WorkspaceCreated'],
      [data],
      [metadata],
    ]);
    await pool.query(
      `INSERT INTO idempotency_keys (subject, key, request_hash, claim, heartbeat_at, response_status, response_body)
       VALUES ('user-1', 'old-key', 'h', $1, now(), 200, '{"data":{}}')`,
      [randomUUID()],
    );

    expect(await migrate(pool, { eventStore: true })).toEqual(migrations.map((step) => step.version));
    const columns = (await pool.query("SELECT column_name FROM information_schema.columns WHERE table_name = 'idempotency_keys'")).rows.map(
      (row) => row.column_name,
    );
    expect(columns).toEqual(expect.arrayContaining(['holder_pid', 'holder_started']));
    expect(columns).not.toContain('heartbeat_at');
    expect((await pool.query("SELECT count(*)::int AS n FROM idempotency_keys WHERE key = 'old-key'")).rows[0].n).toBe(1);

    const service = await startTestService({ databaseUrl: url, eventStoreUrl: '' });
    try {
      const token = await service.token(['org_upgrade']);
      const history = await callApi(service, token, 'get_workspace_history', { id: workspaceId, page: 1, size: 10 });
      expect(history.body.data.items.map((item: { type: string }) => item.type)).toEqual(['WorkspaceCreated']);
      const updated = await callApi(
        service,
        token,
        'update_workspace',
        { id: workspaceId, name: 'After' },
        { 'idempotency-key': 'new-key' },
      );
      expect(updated.status).toBe(200);
      expect(updated.body.data.name).toBe('After');
    } finally {
      await service.close();
    }
  });
});
