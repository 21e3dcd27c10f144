import type { Migration } from './migration.js';

/**
 * Snapshots of records' states (src/write/snapshots.ts): derived from the log, so that loading a
 * record reads its latest snapshot and the events after it, and `as_of` starts from the latest
 * snapshot at or before the instant. In the read database whichever store holds the events. The
 * state is kept as the text that was checksummed: jsonb would reorder its keys.
 */
export const recordSnapshots: Migration = {
  version: 9,
  name: 'record snapshots',
  when: 'always',
  sql: `
CREATE TABLE IF NOT EXISTS record_snapshots (
  stream_name text NOT NULL,
  version bigint NOT NULL,
  event_id text NOT NULL,
  occurred_at text COLLATE "C" NOT NULL,
  format int NOT NULL,
  state text NOT NULL,
  checksum text NOT NULL,
  PRIMARY KEY (stream_name, version)
);
CREATE INDEX IF NOT EXISTS record_snapshots_by_time ON record_snapshots (stream_name, occurred_at);
`,
};
