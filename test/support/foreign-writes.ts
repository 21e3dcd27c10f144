import { ANY, EventStoreDBClient, jsonEvent } from '@eventstore/db-client';
import pg from 'pg';
import { inject } from 'vitest';
import { standInFor, testEventStore } from './event-store.js';

/** An event as another program (or a hand-made repair) stores it: any type, any data, metadata or none. */
export type RawEvent = { type: string; data: unknown; metadata?: unknown };

/**
 * Appends `event` to `streamName` straight into the event store of the test's mode, past the
 * service: a plain INSERT into `es_events` (with its stream's version) on PostgreSQL, an append
 * with `@eventstore/db-client` on EventStoreDB. Such a write is what a shared store sees from
 * other programs, or what an older or newer version of the service left behind.
 */
export async function writeRawEvent(databaseUrl: string, streamName: string, event: RawEvent): Promise<void> {
  if (testEventStore === 'postgres') {
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    try {
      await client.query(
        `WITH stream AS (
           INSERT INTO es_streams (stream_name, version) VALUES ($1, 1)
           ON CONFLICT (stream_name) DO UPDATE SET version = es_streams.version + 1 RETURNING version)
         INSERT INTO es_events (stream_name, version, event_id, type, data, metadata)
         SELECT $1, version, gen_random_uuid(), $2, $3::jsonb, $4::jsonb FROM stream`,
        [streamName, event.type, JSON.stringify(event.data), JSON.stringify(event.metadata ?? null)],
      );
    } finally {
      await client.end();
    }
    return;
  }
  const url = testEventStore === 'eventstoredb-standin' ? (await standInFor(databaseUrl)).url : inject('eventStoreServerUrl');
  const client = EventStoreDBClient.connectionString(url);
  try {
    const metadata = event.metadata === undefined ? {} : { metadata: event.metadata as Record<string, unknown> };
    await client.appendToStream(streamName, jsonEvent({ type: event.type, data: event.data as Record<string, unknown>, ...metadata }), {
      expectedRevision: ANY,
    });
  } finally {
    await client.dispose();
  }
}
