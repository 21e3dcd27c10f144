import { setImmediate as nextTurn } from 'node:timers/promises';
import type pg from 'pg';
import { changeEntriesOf, type FeedEvent } from '../../changes/feed.js';
import { readLoggedEvent, UnreadableEvent, type LoggedEvent, type SkippedEvents } from '../../eventstore/event-log.js';
import { startOfLog, type EventStore, type GlobalPosition, type StreamOrderedLog } from '../../eventstore/port.js';
import { isSolutionEvent, isWorkspaceEvent } from '../../domain/events.js';
import { evolveSolutionRow, type SolutionRow } from '../solutions-table.js';
import { evolveWorkspaceRow, type WorkspaceRow } from '../workspaces-table.js';
import { copyJson, copyText, TableLoad } from './table-load.js';
import { moveCheckpoint, stoppedAt } from './copy.js';

/**
 * The bulk load: the rebuild's first pass over the log, where the store can read it stream by
 * stream (EventStore.readLogByStream, the PostgreSQL store). Each record is folded on its own with
 * the projector's row folds (evolveWorkspaceRow, evolveSolutionRow), keeping only the current
 * stream's row, and its final row is written with COPY. What crosses records is then set-based:
 *
 * - A solution shows only if its workspace was active when it was created and has stayed active
 *   since (applyBatch in src/projections/batch.ts: a creation under an inactive workspace never
 *   shows; WorkspaceDeleted hides the workspace's solutions). So each solution's own fold is loaded
 *   with the position of its last SolutionCreated (a later one starts it afresh), each active
 *   workspace with the position its current activity began at (the first WorkspaceCreated after its
 *   last WorkspaceDeleted), and a solution stays only if its workspace is active and became so
 *   before the solution's creation. As the projector's fold, on every log, also a hand-made one
 *   where a workspace is created again after its deletion, with two assumptions the deciders
 *   guarantee: a stream's events all carry its record's id, and no update changes a solution's
 *   workspace_id.
 * - The solutions left out that are still active in their own stream are the cascades still to do
 *   (the cascade worker's to-do list as the log stands): the projector lists a solution as such
 *   when it hides it, and takes it off at the solution's next SolutionDeleted.
 * - The counts are counted from the rows.
 *
 * Memory: one record's rows and the buffers of the reads and writes (a few megabytes), whatever the
 * log's length; the cascades still to do come back as a map, as the copy keeps them.
 */

export type BulkLoad = {
  /** Where the load got: the catch-up continues in global order from here. */
  position: GlobalPosition | undefined;
  /** Log entries read, foreign and skipped ones included. */
  events: number;
  /** Cascades still to do: solution id to workspace id. */
  cascades: Map<string, string>;
};

/** One connection per table loaded side by side (a connection runs one COPY at a time), on the rebuild's schema. */
export type BulkConnections = {
  workspaces: pg.Client;
  activity: pg.Client;
  solutions: pg.Client;
  creations: pg.Client;
  changes: pg.Client;
};

const workspaceColumns = ['id', 'organization_id', 'name', 'description', 'attributes', 'created_at', 'updated_at'];
const solutionColumns = [
  'id',
  'organization_id',
  'workspace_id',
  'name',
  'description',
  'attributes',
  'documentation',
  'created_at',
  'updated_at',
];
const changeColumns = [
  'organization_id',
  'commit_position',
  'prepare_position',
  'workspace_id',
  'stream_name',
  'version',
  'type',
  'record_id',
  'occurred_at',
  'actor',
  'data',
];

export async function bulkLoad(options: {
  store: EventStore;
  read: NonNullable<EventStore['readLogByStream']>;
  connections: BulkConnections;
  skipped: SkippedEvents;
  /** Called every `progressEvery` log entries with the number read so far. */
  progress: (events: number) => void;
  progressEvery: number;
}): Promise<BulkLoad> {
  const { store, read, connections, skipped, progress, progressEvery } = options;
  await createStagingTables(connections.workspaces);
  const loaded = await read((log) => foldStreams({ store, log, connections, skipped, progress, progressEvery }));
  // Moved to where the load got: the catch-up, which moves it only from where it is, continues from there.
  if (loaded.position) await moveCheckpoint(connections.workspaces, startOfLog, loaded.position);
  const cascades = await hideSolutionsOfInactiveWorkspaces(connections.workspaces);
  await Promise.all([countPerOrganization(connections.workspaces), countPerWorkspace(connections.solutions)]);
  await dropStagingTables(connections.workspaces);
  return { ...loaded, cascades };
}

/** Rows of one stream as they stand, with the positions the set-based step needs. */
class RecordFold {
  workspace: WorkspaceRow | null = null;
  activeSince: GlobalPosition | undefined;
  solution: SolutionRow | null = null;
  createdAt: GlobalPosition | undefined;
  /** The record's events for the change feed: each is a row of it. */
  readonly changes: FeedEvent[] = [];

  constructor(readonly streamName: string) {}

  apply(logged: LoggedEvent): void {
    const { event, position } = logged;
    this.changes.push(logged);
    if (isWorkspaceEvent(event)) {
      const wasActive = this.workspace !== null;
      this.workspace = evolveWorkspaceRow(this.workspace, event);
      if (!wasActive && this.workspace) this.activeSince = position;
    } else if (isSolutionEvent(event)) {
      // Its own fold: whether its workspace lets it show is decided over all records afterwards.
      this.solution = evolveSolutionRow(this.solution, event, true);
      if (event.type === 'SolutionCreated') this.createdAt = position;
    }
  }
}

async function foldStreams(options: {
  store: EventStore;
  log: StreamOrderedLog;
  connections: BulkConnections;
  skipped: SkippedEvents;
  progress: (events: number) => void;
  progressEvery: number;
}): Promise<Omit<BulkLoad, 'cascades'>> {
  const { store, log, connections, skipped, progress, progressEvery } = options;
  const loads = {
    workspaces: TableLoad.start(connections.workspaces, 'workspaces', workspaceColumns),
    activity: TableLoad.start(connections.activity, 'bulk_workspace_activity', ['workspace_id', 'since_commit', 'since_prepare']),
    solutions: TableLoad.start(connections.solutions, 'solutions', solutionColumns),
    creations: TableLoad.start(connections.creations, 'bulk_solution_creations', [
      'solution_id',
      'workspace_id',
      'created_commit',
      'created_prepare',
    ]),
    changes: TableLoad.start(connections.changes, 'changes', changeColumns),
  };
  const all = Object.values(loads);
  const write = (record: RecordFold) => {
    const { workspace, solution } = record;
    if (workspace) {
      loads.workspaces.add([
        copyText(workspace.id),
        copyText(workspace.organization_id),
        copyText(workspace.name),
        copyText(workspace.description),
        copyJson(workspace.attributes),
        copyText(workspace.created_at),
        copyText(workspace.updated_at),
      ]);
      loads.activity.add([copyText(workspace.id), ...positionFields(record.activeSince!)]);
    }
    if (solution) {
      loads.solutions.add([
        copyText(solution.id),
        copyText(solution.organization_id),
        copyText(solution.workspace_id),
        copyText(solution.name),
        copyText(solution.description),
        copyJson(solution.attributes),
        copyJson(solution.documentation),
        copyText(solution.created_at),
        copyText(solution.updated_at),
      ]);
      loads.creations.add([copyText(solution.id), copyText(solution.workspace_id), ...positionFields(record.createdAt!)]);
    }
    // As the projector's step (src/changes/adapters/table.ts): a record without keys belongs to nobody's feed.
    for (const entry of changeEntriesOf(record.changes)) {
      if (entry.organization_id === null || entry.workspace_id === null) continue;
      loads.changes.add([
        copyText(entry.organization_id),
        entry.commit_position,
        entry.prepare_position,
        copyText(entry.workspace_id),
        copyText(entry.stream_name),
        entry.version,
        entry.type,
        copyText(entry.record_id),
        entry.occurred_at,
        copyText(entry.actor),
        copyJson(entry.data),
      ]);
    }
  };

  let events = 0;
  let record: RecordFold | undefined;
  try {
    for await (const page of log.pages) {
      for (const stored of page) {
        if (record?.streamName !== stored.streamName) {
          if (record) write(record);
          record = new RecordFold(stored.streamName);
        }
        const logged = readLoggedEvent(store, stored, skipped);
        if (logged instanceof UnreadableEvent) throw stoppedAt(logged);
        if (logged) record.apply(logged);
        events += 1;
        if (events % progressEvery === 0) progress(events);
        // The live projector's bulk catch-up runs in the service's process: its requests get a turn.
        if (events % eventsBetweenTurns === 0) await nextTurn();
      }
      await Promise.all(all.map((load) => load.drain()));
    }
    if (record) write(record);
    await Promise.all(all.map((load) => load.end()));
  } catch (error) {
    // The connections are needed again to clean up: none may stay in the middle of a COPY.
    for (const load of all) load.abort(error instanceof Error ? error : new Error(String(error)));
    throw error;
  }
  return { position: log.end, events };
}

/**
 * Events folded between two turns of the event loop: about a millisecond's work, so that a request
 * arriving meanwhile waits that long, not a whole page's fold (100 ms and more).
 */
const eventsBetweenTurns = 200;

const positionFields = (position: GlobalPosition) => [position.commit.toString(), position.prepare.toString()];

/** The facts the set-based step joins, unlogged: a rebuild that dies is thrown away with its schema. */
async function createStagingTables(client: pg.Client): Promise<void> {
  await client.query(`
    CREATE UNLOGGED TABLE bulk_workspace_activity (workspace_id text NOT NULL, since_commit xid8 NOT NULL, since_prepare bigint NOT NULL);
    CREATE UNLOGGED TABLE bulk_solution_creations (
      solution_id text NOT NULL, workspace_id text NOT NULL, created_commit xid8 NOT NULL, created_prepare bigint NOT NULL)`);
}

async function dropStagingTables(client: pg.Client): Promise<void> {
  await client.query('DROP TABLE bulk_workspace_activity, bulk_solution_creations');
}

/**
 * Removes the solutions whose workspace is not active, or became active only after the solution
 * was created, and returns them: the cascades still to do.
 */
async function hideSolutionsOfInactiveWorkspaces(client: pg.Client): Promise<Map<string, string>> {
  const { rows } = await client.query<{ solution_id: string; workspace_id: string }>(
    `DELETE FROM solutions s USING bulk_solution_creations c
     WHERE c.solution_id = s.id
       AND NOT EXISTS (SELECT FROM bulk_workspace_activity a
                       WHERE a.workspace_id = c.workspace_id AND (a.since_commit, a.since_prepare) < (c.created_commit, c.created_prepare))
     RETURNING c.solution_id, c.workspace_id`,
  );
  return new Map(rows.map((row) => [row.solution_id, row.workspace_id]));
}

async function countPerOrganization(client: pg.Client): Promise<void> {
  await client.query(
    `INSERT INTO organization_counts (organization_id, workspaces, solutions)
     SELECT organization_id, sum(workspaces), sum(solutions) FROM (
       SELECT organization_id, count(*) AS workspaces, 0 AS solutions FROM workspaces GROUP BY organization_id
       UNION ALL
       SELECT organization_id, 0, count(*) FROM solutions GROUP BY organization_id
     ) AS counted
     GROUP BY organization_id`,
  );
}

async function countPerWorkspace(client: pg.Client): Promise<void> {
  await client.query(
    `INSERT INTO workspace_solution_counts (workspace_id, solutions) SELECT workspace_id, count(*) FROM solutions GROUP BY workspace_id`,
  );
}
