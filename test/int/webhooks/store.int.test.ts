import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../../../src/infra/migrate.js';
import { retiredSecretsKept, rotationOverlapMs, signingSecrets, type Webhook } from '../../../src/webhooks/webhook.js';
import { WebhookStore } from '../../../src/webhooks/adapters/store.js';
import { createTestDatabase } from '../../support/database.js';

/** `list_webhooks` on a real PostgreSQL: the contract's page order and total, found on the organization index. */
describe('webhook list', () => {
  let pool: pg.Pool;
  let ids = 0;
  const statements: pg.QueryConfig[] = [];
  const created: Webhook[] = [];

  beforeAll(async () => {
    // Seq scans off: the plan shows the index the query can use, not the one a tiny table makes cheapest.
    pool = new pg.Pool({ connectionString: await createTestDatabase(), max: 1, options: '-c enable_seqscan=off' });
    await migrate(pool, { eventStore: false });
    const store = new WebhookStore(pool, () => `wh_${String(++ids).padStart(3, '0')}`);
    for (let i = 0; i < 9; i++) {
      const organization = ['org_a', 'org_b', 'org_c'][i % 3]!;
      const { secret: _secret, ...webhook } = await store.create({
        organization_id: organization,
        url: 'https://example.com/',
        types: ['WorkspaceCreated'],
        description: '',
      });
      created.push(webhook);
    }
    await pool.query('ANALYZE webhooks');
  });
  afterAll(() => pool?.end());

  /** A store on the test's pool, and a webhook of org_a it created with this id. */
  const oneWebhook = async (id: string) => {
    const store = new WebhookStore(pool, () => id);
    return {
      store,
      hook: await store.create({ organization_id: 'org_a', url: 'https://example.com/', types: ['WorkspaceCreated'], description: '' }),
    };
  };

  /** The store on the test's pool, the statements it sends kept for their plans. */
  const recordingStore = () => {
    const recording = Object.create(pool) as pg.Pool;
    recording.query = ((config: string | pg.QueryConfig, values?: unknown[]) => {
      statements.push(typeof config === 'string' ? { text: config, values } : config);
      return typeof config === 'string' ? pool.query(config, values) : pool.query(config);
    }) as pg.Pool['query'];
    return new WebhookStore(recording, () => 'wh_unused');
  };

  it('pages the organizations asked for in (created_at, id) order, with their total', async () => {
    const expected = created.filter((webhook) => webhook.organization_id !== 'org_b');
    const store = recordingStore();
    const pages = [];
    for (let page = 1; page <= 4; page++) pages.push(await store.list(['org_c', 'org_a'], { page, size: 2 }));
    expect(pages.flatMap((page) => page.items)).toEqual(expected);
    expect(pages.map((page) => [page.total, page.page, page.size, page.items.length])).toEqual([
      [6, 1, 2, 2],
      [6, 2, 2, 2],
      [6, 3, 2, 2],
      [6, 4, 2, 0],
    ]);
    expect(pages[0]!.items[0]).not.toHaveProperty('secret');
    expect(await store.list([], { page: 1, size: 2 })).toEqual({ total: 0, page: 1, size: 2, items: [] });
  });

  it("reads a page from each organization's index in order, without sorting the organizations' webhooks", async () => {
    const store = recordingStore();
    statements.length = 0;
    await store.list(['org_a', 'org_b'], { page: 2, size: 2 });
    const [statement] = statements;
    const { rows } = await pool.query({ text: `EXPLAIN (FORMAT JSON) ${statement!.text}`, values: statement!.values ?? [] });
    const plan = JSON.stringify(rows[0]['QUERY PLAN']);
    expect(plan).toContain('"Index Name":"webhooks_by_organization"');
    expect(plan).toContain('"Node Type":"Merge Append"');
  });

  it('keeps every secret replaced within 24 h signing, each until 24 h after its rotation, the most recent ones up to the bound', async () => {
    const { store, hook } = await oneWebhook('wh_rotated');
    const row = async () =>
      (await pool.query('SELECT secret, previous_secret, previous_secret_until, retired_secrets FROM webhooks WHERE id = $1', [hook.id]))
        .rows[0];
    const secrets = [hook.secret];
    const rotatedAt = [];
    for (let i = 0; i < 2; i++) {
      rotatedAt.push(Date.now());
      secrets.push((await store.rotate(hook.id, ['org_a']))!.secret);
    }
    const now = new Date();
    expect(signingSecrets(await row(), now)).toEqual([secrets[2], secrets[1], secrets[0]]);
    // The first secret signs until 24 h after the first rotation, not the second.
    const untilOf = (stored: { retired_secrets: Array<{ secret: string; until: string }> }, secret: string) =>
      Date.parse(stored.retired_secrets.find((retired) => retired.secret === secret)!.until);
    const stored = await row();
    expect(untilOf(stored, secrets[0]!) - rotationOverlapMs).toBeGreaterThanOrEqual(rotatedAt[0]! - 1000);
    expect(untilOf(stored, secrets[0]!) - rotationOverlapMs).toBeLessThanOrEqual(rotatedAt[1]! + 1000);
    expect(signingSecrets(stored, new Date(untilOf(stored, secrets[0]!) - 1))).toContain(secrets[0]);
    expect(signingSecrets(stored, new Date(untilOf(stored, secrets[0]!) + 1))).not.toContain(secrets[0]);

    // Rotated more often than the bound within 24 h: the most recently replaced sign.
    for (let i = 0; i < retiredSecretsKept + 3; i++) secrets.push((await store.rotate(hook.id, ['org_a']))!.secret);
    const signing = signingSecrets(await row(), new Date());
    expect(signing).toEqual(secrets.slice(-(retiredSecretsKept + 1)).reverse());
    expect((await row()).retired_secrets).toHaveLength(retiredSecretsKept);
    await store.remove(hook.id, ['org_a']);
  });

  it("deletes a webhook without deadlocking with an attempt's outcome, which locks the delivery first and then the webhook", async () => {
    const { store, hook } = await oneWebhook('wh_deleted');
    await pool.query(
      `INSERT INTO webhook_deliveries (webhook_id, commit_position, prepare_position, organization_id, stream_name, type, status)
       VALUES ($1, 1, 1, 'org_a', 'workspace-ws_1', 'WorkspaceCreated', 'pending')`,
      [hook.id],
    );
    // Connections of their own: the test's pool has one, which the deletion takes.
    const others = new pg.Pool({ connectionString: pool.options.connectionString, max: 2 });
    const attempt = await others.connect();
    try {
      // A failed attempt's outcome, between its two updates (WebhookDispatcher.record): the delivery locked, the webhook next.
      await attempt.query('BEGIN');
      await attempt.query(`UPDATE webhook_deliveries SET status = 'pending' WHERE webhook_id = $1`, [hook.id]);
      const deletion = store.remove(hook.id, ['org_a']);
      const blocked = async () =>
        (
          await others.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
          )
        ).rows[0]!.n > 0;
      for (let i = 0; i < 250 && !(await blocked()); i++) await new Promise((resolve) => setTimeout(resolve, 20));
      await attempt.query('UPDATE webhooks SET failing_since = now() WHERE id = $1', [hook.id]);
      await attempt.query('COMMIT');
      expect(await deletion).toBe(true);
      expect((await pool.query('SELECT count(*)::int AS n FROM webhook_deliveries WHERE webhook_id = $1', [hook.id])).rows[0].n).toBe(0);
    } finally {
      attempt.release();
      await others.end();
    }
  });
});
