import { insertChanges } from '../changes/adapters/table.js';
import { isoMicros, named, type PoolClient } from '../infra/postgres.js';
import { comparePositions, startOfLog, type GlobalPosition } from '../eventstore/port.js';
import type { BatchChanges, LoadedRows, RowsNeeded } from './batch.js';
import type { SolutionRow } from './solutions-table.js';
import type { WorkspaceRow } from './workspaces-table.js';

/** The projector's SQL: loading the rows a batch touches and writing its changes set-based. */

type Queryable = Pick<PoolClient, 'query'>;

export const projectorName = 'read_model';

export const workspaceColumns = `id, organization_id, name, description, attributes,
  ${isoMicros('created_at')} AS created_at, ${isoMicros('updated_at')} AS updated_at`;
export const solutionColumns = `id, organization_id, workspace_id, name, description, attributes, documentation,
  ${isoMicros('created_at')} AS created_at, ${isoMicros('updated_at')} AS updated_at`;

/** The rows a batch touches. One query after another: they share the batch's connection and transaction. */
export async function loadRows(db: Queryable, needed: RowsNeeded): Promise<LoadedRows> {
  const workspaces =
    needed.workspaceIds.length === 0
      ? []
      : (await db.query<WorkspaceRow>(named(`SELECT ${workspaceColumns} FROM workspaces WHERE id = ANY($1)`, [needed.workspaceIds]))).rows;
  const solutions =
    needed.solutionIds.length === 0
      ? []
      : (await db.query<SolutionRow>(named(`SELECT ${solutionColumns} FROM solutions WHERE id = ANY($1)`, [needed.solutionIds]))).rows;
  // Solutions of deleted workspaces are only removed: their keys suffice, not their (large) documents.
  const hidden =
    needed.workspacesDeleted.length === 0
      ? []
      : (
          await db.query<Pick<SolutionRow, 'id' | 'organization_id' | 'workspace_id'>>(
            'SELECT id, organization_id, workspace_id FROM solutions WHERE workspace_id = ANY($1) AND NOT (id = ANY($2))',
            [needed.workspacesDeleted, needed.solutionIds],
          )
        ).rows;
  const loadedSolutions = new Map(solutions.map((row) => [row.id, row]));
  for (const key of hidden) loadedSolutions.set(key.id, toBeRemoved(key));
  return { workspaces: new Map(workspaces.map((row) => [row.id, row])), solutions: loadedSolutions };
}

/** A row known only by its keys: the batch removes it and never writes it back. */
const toBeRemoved = (key: Pick<SolutionRow, 'id' | 'organization_id' | 'workspace_id'>): SolutionRow => ({
  ...key,
  name: '',
  description: '',
  attributes: {},
  documentation: { blocks: [] },
  created_at: '',
  updated_at: '',
});

/**
 * Which tables hold the rows (their OIDs): a rebuild's switch-over replaces them
 * (src/projections/rebuild/switch-over.ts), possibly at the very position the live projector's
 * checkpoint is at, and rows read from the old ones must not be written into the new.
 */
export type RowTables = { workspaces: string; solutions: string };

export async function readRowTables(db: Queryable): Promise<RowTables> {
  const { rows } = await db.query<RowTables>(
    `SELECT 'public.workspaces'::regclass::oid::text AS workspaces, 'public.solutions'::regclass::oid::text AS solutions`,
  );
  return rows[0]!;
}

/**
 * Where a batch moves the projector's checkpoint, and whom it tells (NOTIFY, sent at commit).
 * With `rowTables`, the move also requires that the tables its rows were read from are still the live ones.
 */
export type CheckpointMove = {
  from: GlobalPosition;
  to: GlobalPosition;
  notify?: { channel: string; payload: string };
  rowTables?: RowTables;
};

/**
 * Writes a batch's changes in one statement (one round trip): each kind of change is a
 * data-modifying CTE. With `move`, the checkpoint moves in the same statement and every write is
 * conditional on it: when another projector moved it first, nothing is written and the answer is
 * false. The CTEs share one snapshot and must not touch a row twice: a batch's deletions and
 * upserts are disjoint by construction (applyBatch), and counts of workspaces deleted in the batch
 * are deleted, not adjusted.
 */
export async function writeChanges(db: Queryable, changes: BatchChanges, move?: CheckpointMove): Promise<boolean> {
  const parameters: unknown[] = [];
  const parameter = (value: unknown) => `$${parameters.push(value)}`;
  const json = (rows: unknown[]) => `${parameter(JSON.stringify(rows))}::jsonb`;
  const steps: string[] = [];
  const step = (sql: string) => steps.push(`w${steps.length} AS (${sql})`);
  const moved = 'EXISTS (SELECT FROM moved)';

  if (move) steps.push(`moved AS (${checkpointMove(parameter, move)} RETURNING 1)`);
  else steps.push('moved AS (SELECT 1)');
  if (changes.deleteSolutions.length > 0) {
    step(`DELETE FROM solutions WHERE id = ANY(${parameter(changes.deleteSolutions)}) AND ${moved}`);
  }
  if (changes.deleteWorkspaces.length > 0) {
    step(`DELETE FROM workspaces WHERE id = ANY(${parameter(changes.deleteWorkspaces)}) AND ${moved}`);
  }
  if (changes.upsertWorkspaces.length > 0) {
    step(`INSERT INTO workspaces (id, organization_id, name, description, attributes, created_at, updated_at)
       SELECT id, organization_id, name, description, attributes, created_at, updated_at
       FROM jsonb_to_recordset(${json(changes.upsertWorkspaces)}) AS r(id text, organization_id text, name text, description text,
         attributes jsonb, created_at timestamptz, updated_at timestamptz)
       WHERE ${moved}
       ON CONFLICT (id) DO UPDATE SET name = excluded.name, description = excluded.description,
         attributes = excluded.attributes, updated_at = excluded.updated_at`);
  }
  if (changes.upsertSolutions.length > 0) {
    step(`INSERT INTO solutions (id, organization_id, workspace_id, name, description, attributes, documentation, created_at, updated_at)
       SELECT id, organization_id, workspace_id, name, description, attributes, documentation, created_at, updated_at
       FROM jsonb_to_recordset(${json(changes.upsertSolutions)}) AS r(id text, organization_id text, workspace_id text, name text,
         description text, attributes jsonb, documentation jsonb, created_at timestamptz, updated_at timestamptz)
       WHERE ${moved}
       ON CONFLICT (id) DO UPDATE SET name = excluded.name, description = excluded.description,
         attributes = excluded.attributes, documentation = excluded.documentation, updated_at = excluded.updated_at`);
  }
  if (changes.organizationDeltas.size > 0) {
    const deltas = [...changes.organizationDeltas].map(([organization_id, d]) => ({ organization_id, ...d }));
    step(`INSERT INTO organization_counts AS c (organization_id, workspaces, solutions)
       SELECT organization_id, workspaces, solutions
       FROM jsonb_to_recordset(${json(deltas)}) AS r(organization_id text, workspaces bigint, solutions bigint)
       WHERE ${moved}
       ON CONFLICT (organization_id) DO UPDATE
       SET workspaces = c.workspaces + excluded.workspaces, solutions = c.solutions + excluded.solutions`);
  }
  const deletedWorkspaces = new Set(changes.workspacesDeleted);
  const solutionDeltas = [...changes.workspaceSolutionDeltas]
    .filter(([workspace_id]) => !deletedWorkspaces.has(workspace_id))
    .map(([workspace_id, solutions]) => ({ workspace_id, solutions }));
  if (solutionDeltas.length > 0) {
    step(`INSERT INTO workspace_solution_counts AS c (workspace_id, solutions)
       SELECT workspace_id, solutions FROM jsonb_to_recordset(${json(solutionDeltas)}) AS r(workspace_id text, solutions bigint)
       WHERE ${moved}
       ON CONFLICT (workspace_id) DO UPDATE SET solutions = c.solutions + excluded.solutions`);
  }
  if (changes.workspacesDeleted.length > 0) {
    step(`DELETE FROM workspace_solution_counts WHERE workspace_id = ANY(${parameter(changes.workspacesDeleted)}) AND ${moved}`);
  }
  if (changes.pendingCascades.length > 0) {
    step(`INSERT INTO cascade_pending (solution_id, workspace_id)
       SELECT solution_id, workspace_id FROM jsonb_to_recordset(${json(changes.pendingCascades)}) AS r(solution_id text, workspace_id text)
       WHERE ${moved}
       ON CONFLICT DO NOTHING`);
  }
  if (changes.feed && changes.feed.length > 0) step(insertChanges(parameter, changes.feed, moved));
  if (!move && steps.length === 1) return true;
  const answer = move?.notify
    ? `SELECT pg_notify(${parameter(move.notify.channel)}, ${parameter(move.notify.payload)}) FROM moved`
    : 'SELECT FROM moved';
  const { rowCount } = await db.query(named(`WITH ${steps.join(',\n')} ${answer}`, parameters));
  return rowCount === 1;
}

/**
 * The checkpoint's move from `move.from` to `move.to`, matching only if it is still at `from`:
 * another projector that moved it first makes the batch write nothing.
 */
function checkpointMove(parameter: (value: unknown) => string, move: Omit<CheckpointMove, 'notify'>, name = projectorName): string {
  const [key, to, toPrepare] = [parameter(name), parameter(move.to.commit.toString()), parameter(move.to.prepare.toString())];
  const sameTables = move.rowTables
    ? `'public.workspaces'::regclass = ${parameter(move.rowTables.workspaces)}::oid
       AND 'public.solutions'::regclass = ${parameter(move.rowTables.solutions)}::oid`
    : 'true';
  if (comparePositions(move.from, startOfLog) === 0) {
    return `INSERT INTO projection_checkpoints (name, commit_position, prepare_position)
       SELECT ${key}, ${to}::numeric, ${toPrepare}::numeric WHERE ${sameTables}
       ON CONFLICT (name) DO UPDATE SET commit_position = excluded.commit_position, prepare_position = excluded.prepare_position
       WHERE projection_checkpoints.commit_position = 0 AND projection_checkpoints.prepare_position = 0`;
  }
  return `UPDATE projection_checkpoints SET commit_position = ${to}, prepare_position = ${toPrepare}
     WHERE name = ${key} AND commit_position = ${parameter(move.from.commit.toString())}
       AND prepare_position = ${parameter(move.from.prepare.toString())} AND ${sameTables}`;
}

export async function readCheckpoint(db: Queryable, name = projectorName): Promise<GlobalPosition> {
  const { rows } = await db.query<{ commit_position: string; prepare_position: string }>(
    'SELECT commit_position, prepare_position FROM projection_checkpoints WHERE name = $1',
    [name],
  );
  const row = rows[0];
  return row ? { commit: BigInt(row.commit_position), prepare: BigInt(row.prepare_position) } : startOfLog;
}

/**
 * Moves the checkpoint from `from` to `to`; false if it was not at `from` (another projector moved
 * it), in which case the caller rolls back its batch rather than apply it twice.
 */
export async function advanceCheckpoint(db: Queryable, from: GlobalPosition, to: GlobalPosition, name = projectorName): Promise<boolean> {
  const parameters: unknown[] = [];
  const { rowCount } = await db.query(
    checkpointMove((value) => `$${parameters.push(value)}`, { from, to }, name),
    parameters,
  );
  return rowCount === 1;
}
