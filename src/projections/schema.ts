/**
 * Read tables (with the page room of migration 8, src/infra/migrations/0008-room-for-updates.ts). Lists page by (created_at, id) within an organization or a workspace, index-backed;
 * totals come from counts kept by the projector, never from COUNT(*) per call.
 */
export const readModelSchema = `
CREATE TABLE IF NOT EXISTS workspaces (
  id text PRIMARY KEY,
  organization_id text NOT NULL,
  name text NOT NULL,
  description text NOT NULL,
  attributes jsonb NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL
) WITH (fillfactor = 80);
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
) WITH (fillfactor = 80);
CREATE INDEX IF NOT EXISTS solutions_by_organization ON solutions (organization_id, created_at, id);
CREATE INDEX IF NOT EXISTS solutions_by_workspace ON solutions (workspace_id, created_at, id);

CREATE TABLE IF NOT EXISTS organization_counts (
  organization_id text PRIMARY KEY,
  workspaces bigint NOT NULL DEFAULT 0,
  solutions bigint NOT NULL DEFAULT 0
) WITH (fillfactor = 50);
CREATE TABLE IF NOT EXISTS workspace_solution_counts (
  workspace_id text PRIMARY KEY,
  solutions bigint NOT NULL DEFAULT 0
) WITH (fillfactor = 50);

-- Solutions whose workspace was deleted and whose own SolutionDeleted is still to be written
-- (done_at NULL), or was written lately, at deleted_* in the log (src/write/cascade.ts).
CREATE TABLE IF NOT EXISTS cascade_pending (
  solution_id text PRIMARY KEY,
  workspace_id text NOT NULL,
  deleted_commit numeric(20),
  deleted_prepare numeric(20),
  done_at timestamptz
);
CREATE INDEX IF NOT EXISTS cascade_pending_by_workspace ON cascade_pending (workspace_id);
CREATE INDEX IF NOT EXISTS cascade_pending_to_do ON cascade_pending (workspace_id, solution_id) WHERE done_at IS NULL;
CREATE INDEX IF NOT EXISTS cascade_pending_done ON cascade_pending (done_at) WHERE done_at IS NOT NULL;

-- The change feed (src/changes): one row per event, by organization and log position.
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
-- Unique, so the rebuild keeps it while loading: an update's keys are read through it.
CREATE UNIQUE INDEX IF NOT EXISTS changes_by_stream ON changes (stream_name, version);
CREATE INDEX IF NOT EXISTS changes_by_workspace ON changes (workspace_id, commit_position, prepare_position);

CREATE TABLE IF NOT EXISTS projection_checkpoints (
  name text PRIMARY KEY,
  commit_position numeric(20) NOT NULL,
  prepare_position numeric(20) NOT NULL
);
`;
