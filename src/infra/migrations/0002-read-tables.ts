import type { Migration } from './migration.js';

/**
 * The read tables as they were first released. The rebuild creates fresh copies from
 * src/projections/schema.ts, which test/int/migrations.int.test.ts keeps equal to what these
 * steps produce.
 */
export const readTables: Migration = {
  version: 2,
  name: 'read tables',
  when: 'always',
  sql: `
CREATE TABLE IF NOT EXISTS workspaces (
  id text PRIMARY KEY,
  organization_id text NOT NULL,
  name text NOT NULL,
  description text NOT NULL,
  attributes jsonb NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS workspaces_by_organization ON workspaces (organization_id, created_at, id);

CREATE TABLE IF NOT EXISTS solutions (
  id text PRIMARY KEY,
  organization_id text NOT NULL,
  workspace_id text NOT NULL,
  name text NOT NULL,
  description text NOT NULL,
  attributes jsonb NOT NULL,
  documentation jsonb NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS solutions_by_organization ON solutions (organization_id, created_at, id);
CREATE INDEX IF NOT EXISTS solutions_by_workspace ON solutions (workspace_id, created_at, id);

CREATE TABLE IF NOT EXISTS organization_counts (
  organization_id text PRIMARY KEY,
  workspaces bigint NOT NULL DEFAULT 0,
  solutions bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS workspace_solution_counts (
  workspace_id text PRIMARY KEY,
  solutions bigint NOT NULL DEFAULT 0
);

-- Solutions whose workspace was deleted and whose own SolutionDeleted is still to be written.
CREATE TABLE IF NOT EXISTS cascade_pending (
  solution_id text PRIMARY KEY,
  workspace_id text NOT NULL
);
CREATE INDEX IF NOT EXISTS cascade_pending_by_workspace ON cascade_pending (workspace_id);

CREATE TABLE IF NOT EXISTS projection_checkpoints (
  name text PRIMARY KEY,
  commit_position numeric(20) NOT NULL,
  prepare_position numeric(20) NOT NULL
);
`,
};
