import type { Migration } from './migration.js';

/**
 * The change feed's read table (contract §14, src/changes): one row per event, keyed by its
 * organization and log position, so a page reads the caller's organizations' rows, never the
 * others'. The projector writes it with the other read rows; the rebuild creates it from
 * src/projections/schema.ts, which test/int/migrations.int.test.ts keeps equal to this. A
 * database upgraded with events already in its log gets them into the feed with one
 * `npm run projections:rebuild`.
 */
export const changeFeed: Migration = {
  version: 11,
  name: 'change feed',
  when: 'always',
  sql: `
CREATE TABLE IF NOT EXISTS changes (
  organization_id text NOT NULL,
  commit_position numeric(20) NOT NULL,
  prepare_position numeric(20) NOT NULL,
  workspace_id text NOT NULL,
  stream_name text NOT NULL,
  version bigint NOT NULL,
  type text NOT NULL,
  record_id text NOT NULL,
  occurred_at text NOT NULL,
  actor text NOT NULL,
  data jsonb NOT NULL,
  PRIMARY KEY (organization_id, commit_position, prepare_position)
);
CREATE UNIQUE INDEX IF NOT EXISTS changes_by_stream ON changes (stream_name, version);
CREATE INDEX IF NOT EXISTS changes_by_workspace ON changes (workspace_id, commit_position, prepare_position);
`,
};
