import { createHash } from 'node:crypto';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IdempotencyKeys, type Claim } from '../../../src/api/idempotency.js';
import { migrate } from '../../../src/infra/migrate.js';
import { createPool, PgListener, type Pool } from '../../../src/infra/postgres.js';
import { createTestDatabase } from '../../support/database.js';

const logger = pino({ level: 'silent' });

/** Two instances' key tables on one database, each holding its claims by its own LISTEN session. */
describe("Idempotency-Key claims (contract §2) when an instance's session is replaced", () => {
  let pool: Pool;
  const listeners: PgListener[] = [];
  let databaseUrl: string;

  beforeAll(async () => {
    databaseUrl = await createTestDatabase();
    pool = createPool(databaseUrl, logger, 4);
    await migrate(pool, { eventStore: true });
  });
  afterAll(async () => {
    for (const listener of listeners) await listener.close();
    await pool?.end();
  });

  async function instance(): Promise<{ keys: IdempotencyKeys; listener: PgListener }> {
    const listener = new PgListener(databaseUrl, logger);
    await listener.start();
    listeners.push(listener);
    const keys = new IdempotencyKeys(pool, () => listener.session);
    listener.onReconnect(() => void keys.reattach());
    return { keys, listener };
  }

  it("keeps a running request's claim when its instance's LISTEN connection is reset and made again: a retry elsewhere gets 409", async () => {
    const first = await instance();
    const second = await instance();
    const hash = IdempotencyKeys.hashes('update_workspace', { id: 'ws_1', name: 'x' });
    const running = await first.keys.begin('alice', 'key-1', hash);
    expect(running).toHaveProperty('claim');

    const before = first.listener.session!;
    await pool.query('SELECT pg_terminate_backend($1)', [before.pid]);
    for (let attempt = 0; attempt < 200 && (first.listener.session?.pid ?? before.pid) === before.pid; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    expect(first.listener.session?.pid).not.toBe(before.pid);
    // The claim follows the instance to its new session (on reconnect, in a statement of its own).
    const holderOf = async () =>
      (await pool.query<{ holder_pid: number }>(`SELECT holder_pid FROM idempotency_keys WHERE key = 'key-1'`)).rows[0]?.holder_pid;
    for (let attempt = 0; attempt < 200 && (await holderOf()) !== first.listener.session?.pid; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 25));
    }

    await expect(second.keys.begin('alice', 'key-1', hash)).rejects.toMatchObject({ code: 'conflict' });
    // The request answers, and a retry then replays its answer.
    await (running as { claim: { complete: (response: { status: number; body: unknown }) => Promise<void> } }).claim.complete({
      status: 200,
      body: { data: 'done' },
    });
    expect(await second.keys.begin('alice', 'key-1', hash)).toEqual({ replay: { status: 200, body: { data: 'done' } } });
  });

  it('frees a claim at once when its instance is gone for good', async () => {
    const first = await instance();
    const second = await instance();
    const hash = IdempotencyKeys.hashes('update_workspace', { id: 'ws_2', name: 'y' });
    expect(await first.keys.begin('alice', 'key-2', hash)).toHaveProperty('claim');
    await first.listener.close();
    expect(await second.keys.begin('alice', 'key-2', hash)).toHaveProperty('claim');
  });

  it('matches a key that a release before kept (no canonical hash) with a retry of the members in the same order, and keeps its hash', async () => {
    const params = { name: 'z', id: 'ws_3' };
    const hashes = IdempotencyKeys.hashes('update_workspace', params);
    // The hash every release before kept, and made its command ids from: a retry answered by this
    // release finds the events a command of that release wrote.
    expect(hashes.asSent).toBe(
      createHash('sha256')
        .update(JSON.stringify(['update_workspace', params]))
        .digest('hex'),
    );
    // An instance of the release before claimed the key, then died mid-command.
    await pool.query(
      `INSERT INTO idempotency_keys (subject, key, request_hash, claim, holder_pid, holder_started) VALUES ('alice', 'key-3', $1, gen_random_uuid(), -1, now())`,
      [hashes.asSent],
    );
    const { keys } = await instance();
    const retry = await keys.begin('alice', 'key-3', hashes);
    expect(retry).toMatchObject({ requestHash: hashes.asSent });
    await (retry as { claim: Claim }).claim.complete({ status: 200, body: { data: 'done' } });
    expect(await keys.begin('alice', 'key-3', hashes)).toEqual({ replay: { status: 200, body: { data: 'done' } } });
    const other = IdempotencyKeys.hashes('update_workspace', { ...params, name: 'other' });
    await expect(keys.begin('alice', 'key-3', other)).rejects.toMatchObject({ code: 'idempotency_key_reused' });
  });

  it("keeps a key given back after a failure with its hashes: a retry with the members in another order takes it with the first request's command id", async () => {
    const { keys } = await instance();
    const first = IdempotencyKeys.hashes('create_workspace', { organization_id: 'org_a', name: 'n' });
    const reordered = IdempotencyKeys.hashes('create_workspace', { name: 'n', organization_id: 'org_a' });
    expect(reordered.canonical).toBe(first.canonical);
    expect(reordered.asSent).not.toBe(first.asSent);
    const failed = await keys.begin('alice', 'key-4', first);
    await (failed as { claim: Claim }).claim.release();

    const retry = await keys.begin('alice', 'key-4', reordered);
    expect(retry).toMatchObject({ requestHash: first.asSent });
    await (retry as { claim: Claim }).claim.release();
    // Given back, the key still holds the request: another request with it is refused.
    const other = IdempotencyKeys.hashes('create_workspace', { organization_id: 'org_a', name: 'other' });
    await expect(keys.begin('alice', 'key-4', other)).rejects.toMatchObject({ code: 'idempotency_key_reused' });
  });
});
