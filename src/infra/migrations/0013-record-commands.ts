import type { Migration } from './migration.js';

/**
 * Where each keyed command's events sit in its record's stream (src/write/command-index.ts), and
 * per stream how far that index reaches: derived from the log, so that a keyed command looks its
 * id up instead of reading the whole stream. In the read database whichever store holds the events.
 */
export const recordCommands: Migration = {
  version: 13,
  name: 'record commands',
  when: 'always',
  sql: `
CREATE TABLE IF NOT EXISTS record_commands (
  stream_name text NOT NULL,
  command_id text NOT NULL,
  first_version bigint NOT NULL,
  last_version bigint NOT NULL,
  PRIMARY KEY (stream_name, command_id)
);
CREATE TABLE IF NOT EXISTS record_command_marks (
  stream_name text PRIMARY KEY,
  indexed_through bigint NOT NULL,
  event_id_at_mark text NOT NULL,
  head_hash text
);
`,
};
