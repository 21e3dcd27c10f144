import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IdempotencyKeys } from '../../../src/api/idempotency.js';
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
    const hash = IdempotencyKeys.hash('update_workspace', { id: 'ws_1', name: 'x' });
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
    const hash = IdempotencyKeys.hash('update_workspace', { id: 'ws_2', name: 'y' });
    expect(await first.keys.begin('alice', 'key-2', hash)).toHaveProperty('claim');
    await first.listener.close();
    expect(await second.keys.begin('alice', 'key-2', hash)).toHaveProperty('claim');
  });

  it('matches a key that a release before kept under the hash of the members in the order sent, and keeps that hash for the command id', async () => {
    const params = { name: 'z', id: 'ws_3' };
    const canonical = IdempotencyKeys.hash('update_workspace', params);
    const asSent = IdempotencyKeys.hashBeforeCanonical('update_workspace', params);
    expect(canonical).not.toBe(asSent);
    // An instance of the release before claimed the key, then died mid-command.
    const before = await instance();
    expect(await before.keys.begin('alice', 'key-3', asSent)).toHaveProperty('claim');
    await before.listener.close();

    const now = await instance();
    const retry = await now.keys.begin('alice', 'key-3', canonical, [asSent]);
    expect(retry).toMatchObject({ requestHash: asSent });
    await (retry as { claim: { complete: (response: { status: number; body: unknown }) => Promise<void> } }).claim.complete({
      status: 200,
      body: { data: 'done' },
    });
    expect(await now.keys.begin('alice', 'key-3', canonical, [asSent])).toEqual({ replay: { status: 200, body: { data: 'done' } } });
    await expect(
      now.keys.begin('alice', 'key-3', IdempotencyKeys.hash('update_workspace', { ...params, name: 'other' })),
    ).rejects.toMatchObject({
      code: 'idempotency_key_reused',
    });
  });
});
