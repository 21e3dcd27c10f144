import pg from 'pg';
import type { Envelope } from '../domain/events.js';
import { rowsNeeded, type BatchChanges, type LoadedRows, type RowsNeeded } from './batch.js';
import type { SolutionRow } from './solutions-table.js';
import { loadRows } from './tables.js';
import type { WorkspaceRow } from './workspaces-table.js';
import { oneAtATime } from '../infra/postgres.js';

/**
 * The rows a batch needs, for the rebuild and for the live projector while it catches up: both
 * are the only writers of their tables. Rows written or read lately are kept in memory (those kept
 * first are forgotten first beyond `capacity`); the others are read from the tables, where
 * the batch being written meanwhile (`pending`, committed or not yet) is overlaid: for the rows it
 * touched, its result is the truth. A record created in the batch itself is not looked for, and
 * the solutions of a workspace deleted in it are always read from the tables (the cache cannot
 * know it holds all of them), with the kept copies preferred.
 */
export class RowCache {
  private readonly workspaces = new Map<string, WorkspaceRow>();
  private readonly solutions = new Map<string, SolutionRow>();

  constructor(private readonly capacity: number) {}

  async load(loader: pg.Client, envelopes: Envelope[], pending: BatchChanges | undefined): Promise<LoadedRows> {
    const needed = rowsNeeded(envelopes);
    const created = createdInBatch(envelopes);
    const loaded: LoadedRows = { workspaces: new Map(), solutions: new Map() };
    const missing: RowsNeeded = { workspaceIds: [], solutionIds: [], workspacesDeleted: needed.workspacesDeleted };
    for (const id of needed.workspaceIds) {
      const row = this.workspaces.get(id);
      if (row) loaded.workspaces.set(id, row);
      else if (!created.has(id)) missing.workspaceIds.push(id);
    }
    for (const id of needed.solutionIds) {
      const row = this.solutions.get(id);
      if (row) loaded.solutions.set(id, row);
      else if (!created.has(id)) missing.solutionIds.push(id);
    }
    if (missing.workspaceIds.length + missing.solutionIds.length + missing.workspacesDeleted.length === 0) return loaded;
    const read = withOverlay(await loadRows(oneAtATime(loader), missing), missing, pending);
    for (const [id, row] of read.workspaces) if (!loaded.workspaces.has(id)) loaded.workspaces.set(id, row);
    for (const [id, row] of read.solutions) {
      if (!loaded.solutions.has(id)) loaded.solutions.set(id, this.solutions.get(id) ?? row);
    }
    return loaded;
  }

  /** Keeps what a batch left (the rows it changed and those it read), forgets what it deleted. */
  remember(changes: BatchChanges, loaded: LoadedRows): void {
    for (const row of loaded.workspaces.values()) this.keep(this.workspaces, row);
    for (const row of loaded.solutions.values()) this.keep(this.solutions, row);
    for (const row of changes.upsertWorkspaces) this.keep(this.workspaces, row);
    for (const row of changes.upsertSolutions) this.keep(this.solutions, row);
    for (const id of changes.deleteWorkspaces) this.workspaces.delete(id);
    for (const id of changes.deleteSolutions) this.solutions.delete(id);
    this.evict(this.workspaces, Math.floor(this.capacity / 3));
    this.evict(this.solutions, this.capacity - Math.floor(this.capacity / 3));
  }

  /** In the order rows were first kept: cheaper than moving a row on every use, and as good here. */
  private keep<Row extends { id: string }>(rows: Map<string, Row>, row: Row): void {
    rows.set(row.id, row);
  }

  private evict<Row>(rows: Map<string, Row>, max: number): void {
    if (rows.size <= max) return;
    for (const id of rows.keys()) {
      rows.delete(id);
      if (rows.size <= max) return;
    }
  }
}

/** Ids whose first event in the batch creates them: they cannot be in the tables before it. */
function createdInBatch(envelopes: Envelope[]): Set<string> {
  const seen = new Set<string>();
  const created = new Set<string>();
  for (const event of envelopes) {
    const id = event.data.id;
    if (seen.has(id)) continue;
    seen.add(id);
    if (event.type === 'WorkspaceCreated' || event.type === 'SolutionCreated') created.add(id);
  }
  return created;
}

/** The rows read from the tables as they are once `pending` (a batch being written) is applied. */
function withOverlay(loaded: LoadedRows, needed: RowsNeeded, pending: BatchChanges | undefined): LoadedRows {
  if (!pending) return loaded;
  const workspaces = new Map(loaded.workspaces);
  const wantedWorkspaces = new Set(needed.workspaceIds);
  for (const id of pending.deleteWorkspaces) workspaces.delete(id);
  for (const row of pending.upsertWorkspaces) if (wantedWorkspaces.has(row.id)) workspaces.set(row.id, row);

  const solutions = new Map(loaded.solutions);
  const wantedSolutions = new Set(needed.solutionIds);
  const wantedParents = new Set(needed.workspacesDeleted);
  for (const id of pending.deleteSolutions) solutions.delete(id);
  for (const row of pending.upsertSolutions) {
    if (wantedSolutions.has(row.id) || wantedParents.has(row.workspace_id)) solutions.set(row.id, row);
  }
  return { workspaces, solutions };
}
