import { BACKWARDS, END, EventStoreDBClient } from '@eventstore/db-client';
import pg from 'pg';
import { afterAll, inject } from 'vitest';
import { startOfLog } from '../../src/eventstore/port.js';
import { migrate } from '../../src/infra/migrate.js';
import { advanceCheckpoint } from '../../src/projections/tables.js';
import { EventStoreDBStandIn } from './eventstoredb-standin/index.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A real EventStoreDB/KurrentDB for the `eventstoredb-server` project (EVENTSTORE_URL or a container). */
    eventStoreServerUrl: string;
  }
}

/**
 * The event store the tests of a vitest project run on (`TEST_EVENT_STORE`, set per project in
 * vitest.config.ts): PostgreSQL, the wire-level EventStoreDB stand-in, or a real EventStoreDB.
 * Read tables are in PostgreSQL in every mode, as in production.
 */
export type TestEventStore = 'postgres' | 'eventstoredb-standin' | 'eventstoredb-server';

const modes: TestEventStore[] = ['postgres', 'eventstoredb-standin', 'eventstoredb-server'];
const configured = process.env.TEST_EVENT_STORE ?? 'postgres';
if (!modes.includes(configured as TestEventStore)) throw new Error(`TEST_EVENT_STORE must be one of ${modes.join(', ')}`);
export const testEventStore = configured as TestEventStore;
export const onEventStoreDB = testEventStore !== 'postgres';

/** One stand-in per read database: instances that share a database share its events, and test files share nothing. */
const standIns = new Map<string, Promise<EventStoreDBStandIn>>();

/** The stand-in behind a service on `databaseUrl`, started on first use; only in `eventstoredb-standin` mode. */
export function standInFor(databaseUrl: string): Promise<EventStoreDBStandIn> {
  if (testEventStore !== 'eventstoredb-standin') throw new Error('the EventStoreDB stand-in is only used in eventstoredb-standin mode');
  let standIn = standIns.get(databaseUrl);
  if (!standIn) {
    standIn = EventStoreDBStandIn.start();
    standIns.set(databaseUrl, standIn);
  }
  return standIn;
}

/** The EVENTSTORE_URL of a service on `databaseUrl` in this mode; undefined on PostgreSQL. */
export async function eventStoreUrlFor(databaseUrl: string): Promise<string | undefined> {
  switch (testEventStore) {
    case 'postgres':
      return undefined;
    case 'eventstoredb-standin':
      return (await standInFor(databaseUrl)).url;
    case 'eventstoredb-server':
      return inject('eventStoreServerUrl');
  }
}

/**
 * A fresh read database for this mode. On a real server, shared by the whole run and possibly
 * holding older data, the database starts projecting at the server's current end of `$all`, so
 * each test file (they run one at a time there) sees only the records it wrote.
 */
export async function prepareReadDatabase(databaseUrl: string): Promise<string> {
  if (testEventStore !== 'eventstoredb-server') return databaseUrl;
  const client = EventStoreDBClient.connectionString(inject('eventStoreServerUrl'));
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
  try {
    let last: { commit: bigint; prepare: bigint } | undefined;
    for await (const resolved of client.readAll({ fromPosition: END, direction: BACKWARDS, maxCount: 1 })) last = resolved.event?.position;
    await migrate(pool, { eventStore: false });
    if (last) await advanceCheckpoint(pool, startOfLog, last);
    return databaseUrl;
  } finally {
    await pool.end();
    await client.dispose();
  }
}

/** Registered by every test file (vitest setupFiles): its stand-ins stop after its last hook. */
export function stopStandInsAfterAll(): void {
  afterAll(async () => {
    const started = [...standIns.values()];
    standIns.clear();
    await Promise.all(started.map(async (standIn) => (await standIn).stop()));
  });
}
