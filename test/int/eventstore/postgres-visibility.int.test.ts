import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startOfLog } from '../../../src/eventstore/port.js';
import { migrate } from '../../../src/infra/migrate.js';
import { createTestDatabase } from '../../support/database.js';
import { startStack, type Stack } from '../../support/stack.js';

const event = () => ({ id: randomUUID(), type: 'Noted', data: {}, metadata: {} });
const batch = (stream: string) => JSON.stringify([{ stream, expected: '0', events: [event()] }]);

/**
 * Which running transactions hold the log back from its readers (src/eventstore/postgres.ts,
 * `visibleLogBound`): appends still running do, since their events may commit under ids below
 * those already visible; a transaction that writes anything else does not.
 */
describe('PostgreSQL event store: what a reader of the log waits for', () => {
  let stack: Stack;
  const open: pg.Client[] = [];

  beforeAll(async () => {
    stack = await startStack(undefined, { eventStoreUrl: '' });
  });
  afterEach(async () => {
    for (const client of open.splice(0)) await client.end();
  });
  afterAll(() => stack?.close());

  async function openTransaction(connectionString = stack.url): Promise<pg.Client> {
    const client = new pg.Client({ connectionString });
    await client.connect();
    open.push(client);
    await client.query('BEGIN');
    return client;
  }

  const streamsReadAfter = async (after = startOfLog) => (await stack.store.readAll(after, 100)).map((e) => e.streamName);
  /**
   * What `read` gives once it gives `expected`, or after 5 s. The server's other databases (the
   * other test files) append meanwhile, and every reader of the log on the server waits for an
   * append still running, for the milliseconds it runs (seen in CI: an append of this test read
   * as nothing). What this test holds open stays open for the whole wait: what it holds back stays held.
   */
  async function settled<T>(read: () => Promise<T>, expected: T): Promise<T> {
    const deadline = Date.now() + 5000;
    let value = await read();
    while (!isDeepStrictEqual(value, expected) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 25));
      value = await read();
    }
    return value;
  }

  it('reads appends committed while a transaction that writes something else still runs', async () => {
    const before = await stack.store.readLastPosition();
    const other = await openTransaction();
    await other.query('CREATE TEMP TABLE scratch (n int)');
    await other.query('INSERT INTO scratch VALUES (1)');
    expect((await other.query('SELECT pg_current_xact_id_if_assigned() AS xid')).rows[0].xid).not.toBeNull();

    const stream = `noted-${randomUUID()}`;
    const appended = await stack.store.append(stream, 0n, [event()]);

    expect(await settled(() => streamsReadAfter(before), [stream])).toEqual([stream]);
    expect(await settled(() => stack.store.readLastPosition(), appended.position)).toEqual(appended.position);
  });

  it("reads appends committed while another database's append still runs on the same server", async () => {
    const elsewhere = await createTestDatabase();
    const setup = new pg.Pool({ connectionString: elsewhere, max: 1 });
    try {
      await migrate(setup, { eventStore: true });
    } finally {
      await setup.end();
    }
    const before = await stack.store.readLastPosition();
    // Begun first, so that its transaction id is below the append's here.
    const running = await openTransaction(elsewhere);
    await running.query('SELECT * FROM es_append_batch($1::jsonb)', [batch(`noted-${randomUUID()}`)]);

    const stream = `noted-${randomUUID()}`;
    const appended = await stack.store.append(stream, 0n, [event()]);
    expect(await settled(() => streamsReadAfter(before), [stream])).toEqual([stream]);
    expect(await settled(() => stack.store.readLastPosition(), appended.position)).toEqual(appended.position);
  });

  it('reads nothing committed after an append that still runs, then both in their order once it commits', async () => {
    const before = await stack.store.readLastPosition();
    const earlier = `noted-${randomUUID()}`;
    const running = await openTransaction();
    await running.query('SELECT * FROM es_append_batch($1::jsonb)', [batch(earlier)]);

    const later = `noted-${randomUUID()}`;
    await stack.store.append(later, 0n, [event()]);
    expect(await streamsReadAfter(before)).toEqual([]);
    expect(await stack.store.readLastPosition()).toEqual(before);

    await running.query('COMMIT');
    expect(await settled(() => streamsReadAfter(before), [earlier, later])).toEqual([earlier, later]);
  });

  it('refuses an append, or an event inserted, in a transaction that has already written something else', async () => {
    for (const write of [
      (client: pg.Client) => client.query('SELECT * FROM es_append_batch($1::jsonb)', [batch(`noted-${randomUUID()}`)]),
      (client: pg.Client) =>
        client.query(
          `INSERT INTO es_events (stream_name, version, event_id, type, data, metadata) VALUES ($1, 1, gen_random_uuid(), 'Noted', '{}', '{}')`,
          [`noted-${randomUUID()}`],
        ),
    ]) {
      const client = await openTransaction();
      await client.query('CREATE TEMP TABLE scratch (n int)');
      await client.query('INSERT INTO scratch VALUES (1)');
      await expect(write(client)).rejects.toMatchObject({
        code: 'ES428',
        message: 'events must be appended before anything else is written in the same transaction',
      });
    }
  });

  it('holds the log back for events inserted past the append functions, as for an append', async () => {
    const before = await stack.store.readLastPosition();
    const foreign = `noted-${randomUUID()}`;
    const running = await openTransaction();
    await running.query(
      `WITH stream AS (INSERT INTO es_streams (stream_name, version) VALUES ($1, 1) RETURNING version)
       INSERT INTO es_events (stream_name, version, event_id, type, data, metadata)
       SELECT $1, version, gen_random_uuid(), 'Noted', '{}', '{}' FROM stream`,
      [foreign],
    );

    const later = `noted-${randomUUID()}`;
    await stack.store.append(later, 0n, [event()]);
    expect(await streamsReadAfter(before)).toEqual([]);

    await running.query('COMMIT');
    expect(await settled(() => streamsReadAfter(before), [foreign, later])).toEqual([foreign, later]);
  });
});
