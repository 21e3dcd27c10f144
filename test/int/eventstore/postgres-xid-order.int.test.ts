import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../../support/stack.js';

const event = () => ({ id: randomUUID(), type: 'Noted', data: {}, metadata: {} });

/** Consumes transaction ids until the next power of ten, one subtransaction each. */
async function burnTransactionIdsPastNextPowerOfTen(stack: Stack): Promise<void> {
  const { rows } = await stack.pool.query<{ xid: string }>('SELECT pg_current_xact_id()::text AS xid');
  const current = Number(rows[0]!.xid);
  const target = 10 ** String(current).length;
  await stack.pool.query('CREATE TEMP TABLE IF NOT EXISTS burn (n int)');
  await stack.pool.query(
    `DO $$ BEGIN FOR i IN 1..${target - current + 5} LOOP
       BEGIN INSERT INTO burn VALUES (i); EXCEPTION WHEN others THEN NULL; END;
     END LOOP; END $$`,
  );
}

describe('PostgreSQL event store global order', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.close());

  it('orders by transaction id as a number, also across a change in its digit count', async () => {
    await stack.store.append('other-a', 0n, [event()]);
    await burnTransactionIdsPastNextPowerOfTen(stack);
    await stack.store.append('other-b', 0n, [event()]);

    const all = await stack.store.readAll({ commit: 0n, prepare: 0n }, 10);
    expect(all.map((e) => e.streamName)).toEqual(['other-a', 'other-b']);
    expect(String(all[1]!.position.commit).length).toBeGreaterThan(String(all[0]!.position.commit).length);
    expect(await stack.store.readAll(all[0]!.position, 10)).toEqual([all[1]]);
  });
});
