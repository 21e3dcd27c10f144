import type { Migration } from './migration.js';

/**
 * The PostgreSQL event store (only where events are kept in PostgreSQL): streams with their
 * version, events in global order by (transaction id, position), and one append function.
 * `ES409` is the SQLSTATE the adapter reads as a version conflict (src/eventstore/postgres.ts).
 */
export const eventStore: Migration = {
  version: 1,
  name: 'event store',
  when: 'events in PostgreSQL',
  sql: `
CREATE TABLE IF NOT EXISTS es_streams (
  stream_name text PRIMARY KEY,
  version bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS es_events (
  position bigint GENERATED ALWAYS AS IDENTITY,
  transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id(),
  stream_name text NOT NULL,
  version bigint NOT NULL,
  event_id uuid NOT NULL UNIQUE,
  type text NOT NULL,
  data jsonb NOT NULL,
  metadata jsonb NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (stream_name, version)
);
CREATE UNIQUE INDEX IF NOT EXISTS es_events_global_order ON es_events (transaction_id, position);

CREATE OR REPLACE FUNCTION es_append(
  p_stream text, p_expected bigint, p_ids uuid[], p_types text[], p_data jsonb[], p_metadata jsonb[]
) RETURNS TABLE (transaction_id text, last_position bigint) LANGUAGE plpgsql AS $$
DECLARE
  added int := cardinality(p_ids);
BEGIN
  IF p_expected = 0 THEN
    INSERT INTO es_streams (stream_name, version) VALUES (p_stream, added) ON CONFLICT DO NOTHING;
  ELSE
    UPDATE es_streams SET version = version + added WHERE stream_name = p_stream AND version = p_expected;
  END IF;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'stream % is not at version %', p_stream, p_expected USING ERRCODE = 'ES409';
  END IF;
  INSERT INTO es_events (stream_name, version, event_id, type, data, metadata)
    SELECT p_stream, p_expected + i, p_ids[i], p_types[i], p_data[i], p_metadata[i]
    FROM generate_subscripts(p_ids, 1) AS i;
  RETURN QUERY SELECT pg_current_xact_id()::text, currval(pg_get_serial_sequence('es_events', 'position'));
END $$;
`,
};
