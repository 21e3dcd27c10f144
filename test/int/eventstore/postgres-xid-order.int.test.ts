import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbeddedPostgres, type EmbeddedDatabase } from '../../../src/infra/embedded-postgres.js';
import { silentLogger, startStack, type Stack } from '../../support/stack.js';

/** More than this many transaction ids to the next power of ten would take minutes to burn: the server is not a fresh one. */
const mostToBurn = 1_000_000;

const event = () => ({ id: randomUUID(), type: 'Noted', data: {}, metadata: {} });

/** Consumes transaction ids until the next power of ten, one subtransaction each. */
async function burnTransactionIdsPastNextPowerOfTen(stack: Stack): Promise<void> {
  const { rows } = await stack.pool.query<{ xid: string }>('SELECT pg_current_xact_id()::text AS xid');
  const current = Number(rows[0]!.xid);
  const target = 10 ** String(current).length;
  if (target - current > mostToBurn)
    throw new Error(`transaction id ${current} is ${target - current} short of ${target}: not a fresh server`);
  await stack.pool.query('CREATE TEMP TABLE IF NOT EXISTS burn (n int)');
  await stack.pool.query(
    `DO $$ BEGIN FOR i IN 1..${target - current + 5} LOOP
       BEGIN INSERT INTO burn VALUES (i); EXCEPTION WHEN others THEN NULL; END;
     END LOOP; END $$`,
  );
}

describe('PostgreSQL event store global order', () => {
  let stack: Stack;
  let dataDir: string;
  let server: EmbeddedDatabase | undefined;
  // A server of its own, made for this test: its transaction ids are a few thousand at most, close
  // to the next power of ten. The suite's shared server (DATABASE_URL's, or the run's) may be at any
  // count, and burning ids up to its next power of ten would take hours while holding back every
  // other database's readers on it.
  beforeAll(async () => {
    dataDir = await mkdtemp(path.join(tmpdir(), 'wsapi-xid-order-'));
    server = await startEmbeddedPostgres(dataDir, silentLogger);
    stack = await startStack(server.url, { eventStoreUrl: '' });
  });
  afterAll(async () => {
    await stack?.close();
    await server?.forceStop();
    await rm(dataDir, { recursive: true, force: true });
  });

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
