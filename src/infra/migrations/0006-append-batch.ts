import type { Migration } from './migration.js';

/**
 * Several appends, each to its own stream with its own expected version, in one statement and one
 * transaction: the PostgreSQL event store sends the appends that queue up while one is on its way
 * as one call (src/eventstore/postgres.ts). Each append succeeds or is refused on its own: a wrong
 * expected version refuses that append only, before any of its events is written.
 * `p_appends`: `[{"stream": ..., "expected": n, "events": [{"id", "type", "data", "metadata"}]}]`.
 */
export const appendBatch: Migration = {
  version: 6,
  name: 'append batch',
  when: 'events in PostgreSQL',
  sql: `
CREATE OR REPLACE FUNCTION es_append_batch(p_appends jsonb)
RETURNS TABLE (index int, appended boolean, transaction_id text, last_position bigint) LANGUAGE plpgsql AS $$
DECLARE
  item jsonb;
  stream text;
  expected bigint;
  added int;
  position_sequence text := pg_get_serial_sequence('es_events', 'position');
BEGIN
  FOR i IN 0 .. jsonb_array_length(p_appends) - 1 LOOP
    item := p_appends -> i;
    stream := item ->> 'stream';
    expected := (item ->> 'expected')::bigint;
    added := jsonb_array_length(item -> 'events');
    IF expected = 0 THEN
      INSERT INTO es_streams (stream_name, version) VALUES (stream, added) ON CONFLICT DO NOTHING;
    ELSE
      UPDATE es_streams SET version = version + added WHERE stream_name = stream AND version = expected;
    END IF;
    IF NOT FOUND THEN
      RETURN QUERY SELECT i, false, NULL::text, NULL::bigint;
      CONTINUE;
    END IF;
    INSERT INTO es_events (stream_name, version, event_id, type, data, metadata)
      SELECT stream, expected + e.ordinality, (e.value ->> 'id')::uuid, e.value ->> 'type', e.value -> 'data', e.value -> 'metadata'
      FROM jsonb_array_elements(item -> 'events') WITH ORDINALITY AS e
      ORDER BY e.ordinality;
    RETURN QUERY SELECT i, true, pg_current_xact_id()::text, currval(position_sequence);
  END LOOP;
END $$;
`,
};
