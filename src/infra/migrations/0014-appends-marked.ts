import type { Migration } from './migration.js';

/** How an append's transaction names itself in pg_stat_activity while it runs (see `visibleLogBound` in src/eventstore/postgres.ts). */
export const appendingMark = 'appending events: ';

/**
 * Appends say that they are appends, so that readers of the log wait only for them (`visibleLogBound`
 * in src/eventstore/postgres.ts). A transaction is marked by its first write to es_streams or
 * es_events, before that write takes a transaction id, whoever writes (es_append_batch, a program
 * writing past the service, a bulk seed); one that has written something else first may not write
 * them, since its transaction id would have been unmarked for a while. Statement triggers: a few
 * microseconds per statement, and an append's statements are its own.
 */
export const appendsMarked: Migration = {
  version: 14,
  name: 'appends marked',
  when: 'events in PostgreSQL',
  sql: `
CREATE FUNCTION es_mark_appending() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('application_name') LIKE '${appendingMark}%' THEN
    RETURN NULL;
  END IF;
  IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
    RAISE EXCEPTION 'events must be appended before anything else is written in the same transaction'
      USING ERRCODE = 'ES428';
  END IF;
  PERFORM set_config('application_name', left('${appendingMark}' || current_setting('application_name'), 63), true);
  RETURN NULL;
END $$;

CREATE TRIGGER es_streams_appends_marked BEFORE INSERT OR UPDATE ON es_streams
  FOR EACH STATEMENT EXECUTE FUNCTION es_mark_appending();
CREATE TRIGGER es_events_appends_marked BEFORE INSERT ON es_events
  FOR EACH STATEMENT EXECUTE FUNCTION es_mark_appending();
`,
};
