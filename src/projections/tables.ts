import { isoMicros, type PoolClient } from '../infra/postgres.js';
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
      : (await db.query<WorkspaceRow>(`SELECT ${workspaceColumns} FROM workspaces WHERE id = ANY($1)`, [needed.workspaceIds])).rows;
  const solutions =
    needed.solutionIds.length === 0
      ? []
      : (await db.query<SolutionRow>(`SELECT ${solutionColumns} FROM solutions WHERE id = ANY($1)`, [needed.solutionIds])).rows;
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

export async function writeChanges(db: Queryable, changes: BatchChanges): Promise<void> {
  if (changes.deleteSolutions.length > 0) {
    await db.query('DELETE FROM solutions WHERE id = ANY($1)', [changes.deleteSolutions]);
  }
  if (changes.deleteWorkspaces.length > 0) {
    await db.query('DELETE FROM workspaces WHERE id = ANY($1)', [changes.deleteWorkspaces]);
  }
  if (changes.upsertWorkspaces.length > 0) {
    await db.query(
      `INSERT INTO workspaces (id, organization_id, name, description, attributes, created_at, updated_at)
       SELECT id, organization_id, name, description, attributes, created_at, updated_at
       FROM jsonb_to_recordset($1::jsonb) AS r(id text, organization_id text, name text, description text,
         attributes jsonb, created_at timestamptz, updated_at timestamptz)
       ON CONFLICT (id) DO UPDATE SET name = excluded.name, description = excluded.description,
         attributes = excluded.attributes, updated_at = excluded.updated_at`,
      [JSON.stringify(changes.upsertWorkspaces)],
    );
  }
  if (changes.upsertSolutions.length > 0) {
    await db.query(
      `INSERT INTO solutions (id, organization_id, workspace_id, name, description, attributes, documentation, created_at, updated_at)
       SELECT id, organization_id, workspace_id, name, description, attributes, documentation, created_at, updated_at
       FROM jsonb_to_recordset($1::jsonb) AS r(id text, organization_id text, workspace_id text, name text,
         description text, attributes jsonb, documentation jsonb, created_at timestamptz, updated_at timestamptz)
       ON CONFLICT (id) DO UPDATE SET name = excluded.name, description = excluded.description,
         attributes = excluded.attributes, documentation = excluded.documentation, updated_at = excluded.updated_at`,
      [JSON.stringify(changes.upsertSolutions)],
    );
  }
  if (changes.organizationDeltas.size > 0) {
    const deltas = [...changes.organizationDeltas].map(([organization_id, d]) => ({ organization_id, ...d }));
    await db.query(
      `INSERT INTO organization_counts AS c (organization_id, workspaces, solutions)
       SELECT organization_id, workspaces, solutions
       FROM jsonb_to_recordset($1::jsonb) AS r(organization_id text, workspaces bigint, solutions bigint)
       ON CONFLICT (organization_id) DO UPDATE
       SET workspaces = c.workspaces + excluded.workspaces, solutions = c.solutions + excluded.solutions`,
      [JSON.stringify(deltas)],
    );
  }
  if (changes.workspaceSolutionDeltas.size > 0) {
    const deltas = [...changes.workspaceSolutionDeltas].map(([workspace_id, solutions]) => ({ workspace_id, solutions }));
    await db.query(
      `INSERT INTO workspace_solution_counts AS c (workspace_id, solutions)
       SELECT workspace_id, solutions FROM jsonb_to_recordset($1::jsonb) AS r(workspace_id text, solutions bigint)
       ON CONFLICT (workspace_id) DO UPDATE SET solutions = c.solutions + excluded.solutions`,
      [JSON.stringify(deltas)],
    );
  }
  if (changes.workspacesDeleted.length > 0) {
    await db.query('DELETE FROM workspace_solution_counts WHERE workspace_id = ANY($1)', [changes.workspacesDeleted]);
  }
  if (changes.pendingCascades.length > 0) {
    await db.query(
      `INSERT INTO cascade_pending (solution_id, workspace_id)
       SELECT solution_id, workspace_id FROM jsonb_to_recordset($1::jsonb) AS r(solution_id text, workspace_id text)
       ON CONFLICT DO NOTHING`,
      [JSON.stringify(changes.pendingCascades)],
    );
  }
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
  if (comparePositions(from, startOfLog) === 0) {
    const inserted = await db.query(
      `INSERT INTO projection_checkpoints (name, commit_position, prepare_position) VALUES ($1, $2, $3)
       ON CONFLICT (name) DO UPDATE SET commit_position = excluded.commit_position, prepare_position = excluded.prepare_position
       WHERE projection_checkpoints.commit_position = 0 AND projection_checkpoints.prepare_position = 0`,
      [name, to.commit.toString(), to.prepare.toString()],
    );
    return inserted.rowCount === 1;
  }
  const updated = await db.query(
    `UPDATE projection_checkpoints SET commit_position = $2, prepare_position = $3
     WHERE name = $1 AND commit_position = $4 AND prepare_position = $5`,
    [name, to.commit.toString(), to.prepare.toString(), from.commit.toString(), from.prepare.toString()],
  );
  return updated.rowCount === 1;
}
