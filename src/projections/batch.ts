import { assertNever } from '../domain/command.js';
import type { Envelope } from '../domain/events.js';
import type { ChangeEntry } from '../changes/feed.js';
import type { LoggedEvent } from '../eventstore/event-log.js';
import { solutionStream, workspaceStream } from '../eventstore/stream-names.js';
import { evolveSolutionRow, type SolutionRow } from './solutions-table.js';
import { evolveWorkspaceRow, type WorkspaceRow } from './workspaces-table.js';

/** The rows a batch of events reads: load these, then fold the batch over them in memory. */
export type RowsNeeded = { workspaceIds: string[]; solutionIds: string[]; workspacesDeleted: string[] };

export type LoadedRows = { workspaces: Map<string, WorkspaceRow>; solutions: Map<string, SolutionRow> };

export type CountDelta = { workspaces: number; solutions: number };

/** What a batch changes in the read tables, as set-based writes. */
export type BatchChanges = {
  upsertWorkspaces: WorkspaceRow[];
  deleteWorkspaces: string[];
  upsertSolutions: SolutionRow[];
  deleteSolutions: string[];
  organizationDeltas: Map<string, CountDelta>;
  workspaceSolutionDeltas: Map<string, number>;
  /** Workspaces deleted in this batch: their solution counts go away with them. */
  workspacesDeleted: string[];
  /** Solutions hidden with their deleted workspace that still need their own SolutionDeleted event. */
  pendingCascades: { solution_id: string; workspace_id: string }[];
  /** The batch's rows of the change feed (src/changes), when its events are known with their positions. */
  feed?: ChangeEntry[];
};

/** A batch that changes nothing: the start of changes made by hand (a slice of a batch, a test's). */
export const noChanges = (): BatchChanges => ({
  upsertWorkspaces: [],
  deleteWorkspaces: [],
  upsertSolutions: [],
  deleteSolutions: [],
  organizationDeltas: new Map(),
  workspaceSolutionDeltas: new Map(),
  workspacesDeleted: [],
  pendingCascades: [],
});

export function rowsNeeded(events: Envelope[]): RowsNeeded {
  const workspaceIds = new Set<string>();
  const solutionIds = new Set<string>();
  const workspacesDeleted = new Set<string>();
  for (const event of events) {
    switch (event.type) {
      case 'WorkspaceDeleted':
        workspacesDeleted.add(event.data.id);
        workspaceIds.add(event.data.id);
        break;
      case 'WorkspaceCreated':
      case 'WorkspaceUpdated':
        workspaceIds.add(event.data.id);
        break;
      case 'SolutionCreated':
        workspaceIds.add(event.data.workspace_id);
        solutionIds.add(event.data.id);
        break;
      case 'SolutionUpdated':
      case 'SolutionDeleted':
        solutionIds.add(event.data.id);
        break;
      default:
        assertNever(event);
    }
  }
  return { workspaceIds: [...workspaceIds], solutionIds: [...solutionIds], workspacesDeleted: [...workspacesDeleted] };
}

/**
 * The rows a batch reads that may be in the tables: a record whose stream begins in the batch
 * (version 1) has no row yet, nor has a workspace begun there any solution stored (a solution is
 * shown only when created after its workspace). Under a load of creations most batches load nothing.
 */
export function rowsToLoad(events: LoggedEvent[]): RowsNeeded {
  const needed = rowsNeeded(events.map((logged) => logged.event));
  const begun = new Set(events.flatMap((logged) => (logged.version === 1n ? [logged.streamName] : [])));
  if (begun.size === 0) return needed;
  const stored = (streamOf: (id: string) => string) => (id: string) => !begun.has(streamOf(id));
  return {
    workspaceIds: needed.workspaceIds.filter(stored(workspaceStream)),
    solutionIds: needed.solutionIds.filter(stored(solutionStream)),
    workspacesDeleted: needed.workspacesDeleted.filter(stored(workspaceStream)),
  };
}

/** Folds a batch of events, in global order, over the rows they touch. Pure. */
export function applyBatch(events: Envelope[], loaded: LoadedRows): BatchChanges {
  const workspaces = new Map<string, WorkspaceRow | null>(loaded.workspaces);
  const solutions = new Map<string, SolutionRow | null>(loaded.solutions);
  const pendingCascades: BatchChanges['pendingCascades'] = [];
  const workspacesDeleted: string[] = [];
  // The solutions of each workspace, so that a deletion costs its own solutions, not the batch.
  const solutionsOf = new Map<string, Set<string>>();
  const index = (workspaceId: string, solutionId: string) => {
    let ids = solutionsOf.get(workspaceId);
    if (!ids) solutionsOf.set(workspaceId, (ids = new Set()));
    ids.add(solutionId);
  };
  for (const row of loaded.solutions.values()) index(row.workspace_id, row.id);

  for (const event of events) {
    switch (event.type) {
      case 'WorkspaceCreated':
      case 'WorkspaceUpdated':
        workspaces.set(event.data.id, evolveWorkspaceRow(workspaces.get(event.data.id) ?? null, event));
        break;
      case 'WorkspaceDeleted': {
        const workspaceId = event.data.id;
        workspaces.set(workspaceId, evolveWorkspaceRow(workspaces.get(workspaceId) ?? null, event));
        workspacesDeleted.push(workspaceId);
        for (const id of solutionsOf.get(workspaceId) ?? []) {
          const row = solutions.get(id);
          if (!row) continue;
          solutions.set(id, evolveSolutionRow(row, event, false));
          pendingCascades.push({ solution_id: id, workspace_id: workspaceId });
        }
        break;
      }
      case 'SolutionCreated': {
        const parentActive = Boolean(workspaces.get(event.data.workspace_id));
        solutions.set(event.data.id, evolveSolutionRow(null, event, parentActive));
        index(event.data.workspace_id, event.data.id);
        if (!parentActive) pendingCascades.push({ solution_id: event.data.id, workspace_id: event.data.workspace_id });
        break;
      }
      case 'SolutionUpdated':
      case 'SolutionDeleted':
        solutions.set(event.data.id, evolveSolutionRow(solutions.get(event.data.id) ?? null, event, true));
        break;
      default:
        assertNever(event);
    }
  }

  const organizationDeltas = new Map<string, CountDelta>();
  const workspaceSolutionDeltas = new Map<string, number>();
  const addOrganizationDelta = (organizationId: string, delta: Partial<CountDelta>) => {
    const current = organizationDeltas.get(organizationId) ?? { workspaces: 0, solutions: 0 };
    current.workspaces += delta.workspaces ?? 0;
    current.solutions += delta.solutions ?? 0;
    organizationDeltas.set(organizationId, current);
  };

  const upsertWorkspaces: WorkspaceRow[] = [];
  const deleteWorkspaces: string[] = [];
  for (const [id, after] of workspaces) {
    const before = loaded.workspaces.get(id) ?? null;
    if (after === before) continue;
    if (after) upsertWorkspaces.push(after);
    else deleteWorkspaces.push(id);
    if (!before && after) addOrganizationDelta(after.organization_id, { workspaces: 1 });
    if (before && !after) addOrganizationDelta(before.organization_id, { workspaces: -1 });
  }

  const upsertSolutions: SolutionRow[] = [];
  const deleteSolutions: string[] = [];
  for (const [id, after] of solutions) {
    const before = loaded.solutions.get(id) ?? null;
    if (after === before) continue;
    if (after) upsertSolutions.push(after);
    else deleteSolutions.push(id);
    const changed = !before && after ? { row: after, delta: 1 } : before && !after ? { row: before, delta: -1 } : null;
    if (changed) {
      addOrganizationDelta(changed.row.organization_id, { solutions: changed.delta });
      const workspaceId = changed.row.workspace_id;
      workspaceSolutionDeltas.set(workspaceId, (workspaceSolutionDeltas.get(workspaceId) ?? 0) + changed.delta);
    }
  }

  return {
    upsertWorkspaces,
    deleteWorkspaces,
    upsertSolutions,
    deleteSolutions,
    organizationDeltas,
    workspaceSolutionDeltas,
    workspacesDeleted,
    pendingCascades,
  };
}
