import { readRecord, walkLog, type SkippedEvents } from '../eventstore/event-log.js';
import { streamPrefixes } from '../eventstore/stream-names.js';
import { readSnapshotRow, snapshotColumns, type SnapshotRow } from '../write/snapshots.js';
import { commandEntries, indexedEvents, type CommandSpan } from '../write/command-index.js';
import { canonicalJson, sha256Hex, storedHashes } from '../integrity/hashes.js';
import { comparePositions, startOfLog, type EventStore, type GlobalPosition } from '../eventstore/port.js';
import type { Pool } from '../infra/postgres.js';
import { isSolutionEvent, isWorkspaceEvent, type Envelope, type SolutionEvent, type WorkspaceEvent } from '../domain/events.js';
import { evolveSolution, initialSolutionState, type Solution, type SolutionState } from '../domain/solution.js';
import { evolveWorkspace, initialWorkspaceState, type Workspace, type WorkspaceState } from '../domain/workspace.js';
import { solutionColumns, workspaceColumns } from './tables.js';
import { initialProvenance, provenanceEvolve, provenanceSnapshotStream, solutionFold, workspaceFold } from '../audit/provenance.js';

export type ReadModelSnapshot = {
  workspaces: Map<string, Workspace>;
  solutions: Map<string, Solution>;
  organizationCounts: Map<string, { workspaces: number; solutions: number }>;
  workspaceSolutionCounts: Map<string, number>;
  /** The change feed's rows by `stream@version`, each as a digest of what it shows (a long log's rows need not all be held). */
  changes: Map<string, string>;
};

/** A change feed row's content, as one comparable digest. */
const changeDigest = (row: {
  organization_id: string;
  workspace_id: string;
  commit_position: string;
  prepare_position: string;
  type: string;
  record_id: string;
  occurred_at: string;
  actor: string;
  data: unknown;
}) =>
  sha256Hex(
    canonicalJson([
      row.organization_id,
      row.workspace_id,
      row.commit_position,
      row.prepare_position,
      row.type,
      row.record_id,
      row.occurred_at,
      row.actor,
      row.data,
    ]),
  );

/**
 * What the read tables must hold, folded from every stream with the write side's own `evolve`,
 * independently of the projector's batch code: active records, a solution only while its
 * workspace is active, and counts derived from those. Events operators `skipped` (dead letters)
 * are left out, as the projector left them out.
 */
export async function expectedReadModel(store: EventStore, until?: GlobalPosition, skipped?: SkippedEvents): Promise<ReadModelSnapshot> {
  const workspaceStates = new Map<string, WorkspaceState>();
  const solutionStates = new Map<string, SolutionState>();
  // The feed: every event of a record whose creation carries its keys (the first event of its stream).
  const changes = new Map<string, string>();
  const keysOfStream = new Map<string, { organization_id: string; workspace_id: string }>();
  const snapshot = () => ({ ...snapshotOf(workspaceStates, solutionStates), changes });
  for await (const page of walkLog(store, startOfLog, 2000, skipped)) {
    for (const { event, streamName, position, version } of page) {
      if (until && comparePositions(position, until) > 0) return snapshot();
      if (version === 1n && 'organization_id' in event.data) {
        const workspaceId = 'workspace_id' in event.data ? event.data.workspace_id : event.data.id;
        keysOfStream.set(streamName, { organization_id: event.data.organization_id, workspace_id: workspaceId });
      }
      const keys = keysOfStream.get(streamName);
      if (keys) {
        changes.set(
          `${streamName}@${version}`,
          changeDigest({
            ...keys,
            commit_position: position.commit.toString(),
            prepare_position: position.prepare.toString(),
            type: event.type,
            record_id: event.data.id,
            occurred_at: event.metadata.occurred_at,
            actor: event.metadata.actor,
            data: event.data,
          }),
        );
      }
      if (isWorkspaceEvent(event)) {
        workspaceStates.set(streamName, evolveWorkspace(workspaceStates.get(streamName) ?? initialWorkspaceState, event));
      } else if (isSolutionEvent(event)) {
        solutionStates.set(streamName, evolveSolution(solutionStates.get(streamName) ?? initialSolutionState, event));
      }
    }
  }
  return snapshot();
}

function snapshotOf(
  workspaceStates: Map<string, WorkspaceState>,
  solutionStates: Map<string, SolutionState>,
): Omit<ReadModelSnapshot, 'changes'> {
  const snapshot = emptySnapshot();
  for (const state of workspaceStates.values()) {
    if (state.status !== 'active') continue;
    snapshot.workspaces.set(state.workspace.id, state.workspace);
    count(snapshot, state.workspace.organization_id).workspaces += 1;
  }
  for (const state of solutionStates.values()) {
    if (state.status !== 'active' || !snapshot.workspaces.has(state.solution.workspace_id)) continue;
    const { solution } = state;
    snapshot.solutions.set(solution.id, solution);
    count(snapshot, solution.organization_id).solutions += 1;
    snapshot.workspaceSolutionCounts.set(solution.workspace_id, (snapshot.workspaceSolutionCounts.get(solution.workspace_id) ?? 0) + 1);
  }
  return snapshot;
}

const emptySnapshot = (): ReadModelSnapshot => ({
  workspaces: new Map(),
  solutions: new Map(),
  organizationCounts: new Map(),
  workspaceSolutionCounts: new Map(),
  changes: new Map(),
});

function count(snapshot: Pick<ReadModelSnapshot, 'organizationCounts'>, organizationId: string) {
  let counts = snapshot.organizationCounts.get(organizationId);
  if (!counts) {
    counts = { workspaces: 0, solutions: 0 };
    snapshot.organizationCounts.set(organizationId, counts);
  }
  return counts;
}

/** The read tables as they are (zero counts are the same as no count). */
export async function actualReadModel(pool: Pool, schema = 'public'): Promise<ReadModelSnapshot> {
  const snapshot = emptySnapshot();
  const table = (name: string) => `${schema === 'public' ? '' : `${schema}.`}${name}`;
  const [workspaces, solutions, organizations, workspaceCounts, changes] = await Promise.all([
    pool.query<Workspace>(`SELECT ${workspaceColumns} FROM ${table('workspaces')}`),
    pool.query<Solution>(`SELECT ${solutionColumns} FROM ${table('solutions')}`),
    pool.query<{ organization_id: string; workspaces: string; solutions: string }>(
      `SELECT organization_id, workspaces, solutions FROM ${table('organization_counts')}`,
    ),
    pool.query<{ workspace_id: string; solutions: string }>(`SELECT workspace_id, solutions FROM ${table('workspace_solution_counts')}`),
    pool.query<Parameters<typeof changeDigest>[0] & { stream_name: string; version: string }>(
      `SELECT organization_id, workspace_id, commit_position::text, prepare_position::text, type, record_id, occurred_at, actor, data,
         stream_name, version::text FROM ${table('changes')}`,
    ),
  ]);
  for (const row of changes.rows) snapshot.changes.set(`${row.stream_name}@${row.version}`, changeDigest(row));
  for (const row of workspaces.rows) snapshot.workspaces.set(row.id, row);
  for (const row of solutions.rows) snapshot.solutions.set(row.id, row);
  for (const row of organizations.rows) {
    if (Number(row.workspaces) !== 0 || Number(row.solutions) !== 0) {
      snapshot.organizationCounts.set(row.organization_id, { workspaces: Number(row.workspaces), solutions: Number(row.solutions) });
    }
  }
  for (const row of workspaceCounts.rows) {
    if (Number(row.solutions) !== 0) snapshot.workspaceSolutionCounts.set(row.workspace_id, Number(row.solutions));
  }
  return snapshot;
}

/**
 * Every record snapshot (src/write/snapshots.ts) compared with a fold of its stream up to its
 * version, one line per difference: a state or event that is not the log's, or a row whose
 * checksum fails (the service ignores it and reads more events; a difference all the same).
 * Snapshots of another format are ignored by the service and here.
 */
export async function verifySnapshots(store: EventStore, pool: Pool): Promise<{ differences: string[]; checked: number }> {
  const { rows } = await pool.query<SnapshotRow>(`SELECT ${snapshotColumns} FROM record_snapshots s ORDER BY s.stream_name, s.version`);
  const differences: string[] = [];
  let checked = 0;
  const byStream = new Map<string, SnapshotRow[]>();
  for (const row of rows) {
    const streamRows = byStream.get(row.stream_name);
    if (streamRows) streamRows.push(row);
    else byStream.set(row.stream_name, [row]);
  }
  for (const [key, streamRows] of byStream) {
    const { streamName, evolve, initialState } = snapshotFold(key);
    const { events } = await readRecord(store, streamName);
    let state = initialState;
    let folded = 0;
    for (const row of streamRows) {
      const snapshot = readSnapshotRow(row);
      const where = `snapshot ${key}@${row.version}`;
      if (snapshot === 'other format') continue;
      checked += 1;
      if (snapshot === 'corrupt') {
        differences.push(`${where}: corrupt (its checksum fails)`);
        continue;
      }
      for (; folded < events.length && events[folded]!.version <= snapshot.head.version; folded++)
        state = evolve(state, events[folded]!.event, events[folded]!.version);
      const event = events[folded - 1];
      if (event?.version !== snapshot.head.version || event.id !== snapshot.eventId) {
        differences.push(`${where}: the stream has no event ${snapshot.eventId} at that version`);
      } else if (!sameJson(state, snapshot.state)) {
        differences.push(`${where}: expected ${JSON.stringify(state)}, found ${JSON.stringify(snapshot.state)}`);
      }
    }
  }
  return { differences, checked };
}

/**
 * The command index (src/write/command-index.ts) compared with the log, one line per difference:
 * a mark whose event or head hash is not the stream's (void: the service reads the stream whole
 * and makes the index again), an entry missing up to the mark, one the log does not bear out, or
 * one of a stream without a mark. Marks and entries are read in one statement; the streams only
 * grow after it, so what lies up to a mark is what it was read with.
 */
export async function verifyCommandIndex(store: EventStore, pool: Pool): Promise<{ differences: string[]; checked: number }> {
  const { rows } = await pool.query<{
    stream_name: string;
    through: string | null;
    event_id: string | null;
    head_hash: string | null;
    command_id: string | null;
    first_version: string | null;
    last_version: string | null;
  }>(
    `SELECT coalesce(m.stream_name, c.stream_name) AS stream_name, m.indexed_through::text AS through, m.event_id_at_mark AS event_id,
            m.head_hash, c.command_id, c.first_version::text AS first_version, c.last_version::text AS last_version
     FROM record_command_marks m FULL JOIN record_commands c ON c.stream_name = m.stream_name
     ORDER BY 1, c.command_id`,
  );
  const streams = new Map<string, { through: bigint; eventId: string; headHash: string | null } | undefined>();
  const indexed = new Map<string, Map<string, CommandSpan>>();
  for (const row of rows) {
    streams.set(
      row.stream_name,
      row.through === null ? undefined : { through: BigInt(row.through), eventId: row.event_id!, headHash: row.head_hash },
    );
    if (row.command_id === null) continue;
    const entries = indexed.get(row.stream_name) ?? new Map<string, CommandSpan>();
    entries.set(row.command_id, { first: BigInt(row.first_version!), last: BigInt(row.last_version!) });
    indexed.set(row.stream_name, entries);
  }
  const differences: string[] = [];
  for (const [streamName, mark] of streams) {
    const where = `command index ${streamName}`;
    const entries = indexed.get(streamName) ?? new Map<string, CommandSpan>();
    if (!mark) {
      differences.push(`${where}: ${entries.size} entr(ies) without a mark`);
      continue;
    }
    const [atMark] = await store.readStream(streamName, { from: mark.through, limit: 1 });
    if (atMark?.version !== mark.through || atMark.id !== mark.eventId) {
      differences.push(`${where}: void mark, the stream has no event ${mark.eventId} at version ${mark.through}`);
      continue;
    }
    if (mark.headHash !== null && storedHashes(atMark.metadata)?.hash !== mark.headHash) {
      differences.push(`${where}: the mark's head hash is not the hash of the event at version ${mark.through}`);
    }
    const { events: own } = await readRecord(store, streamName);
    const expected = new Map(
      commandEntries(indexedEvents(own.filter((logged) => logged.version <= mark.through))).map((entry) => [entry.commandId, entry.span]),
    );
    const spanText = (span: CommandSpan) => `versions ${span.first}-${span.last}`;
    for (const [commandId, span] of expected) {
      const found = entries.get(commandId);
      if (!found) differences.push(`${where}: command ${commandId} at ${spanText(span)} is missing`);
      else if (found.first !== span.first || found.last !== span.last) {
        differences.push(`${where}: command ${commandId} is at ${spanText(span)}, the index says ${spanText(found)}`);
      }
    }
    for (const [commandId, span] of entries) {
      if (!expected.has(commandId))
        differences.push(`${where}: command ${commandId} at ${spanText(span)} is not in the log up to the mark`);
    }
  }
  return { differences, checked: streams.size };
}

/** How the state a snapshot key holds is folded: a record's own state, or its provenance (src/audit/provenance.ts). */
function snapshotFold(key: string): {
  streamName: string;
  evolve: (state: unknown, event: Envelope, version: bigint) => unknown;
  initialState: unknown;
} {
  const provenanceOf = provenanceSnapshotStream(key);
  const streamName = provenanceOf ?? key;
  const isWorkspace = streamName.startsWith(streamPrefixes.workspace);
  if (provenanceOf !== undefined) {
    const evolve = isWorkspace ? provenanceEvolve(workspaceFold) : provenanceEvolve(solutionFold);
    return {
      streamName,
      evolve: evolve as (state: unknown, event: Envelope, version: bigint) => unknown,
      initialState: isWorkspace ? initialProvenance(workspaceFold) : initialProvenance(solutionFold),
    };
  }
  const evolve = (state: unknown, event: Envelope): unknown =>
    isWorkspace
      ? evolveWorkspace(state as WorkspaceState, event as Envelope<WorkspaceEvent>)
      : evolveSolution(state as SolutionState, event as Envelope<SolutionEvent>);
  return { streamName, evolve, initialState: isWorkspace ? initialWorkspaceState : initialSolutionState };
}

/** Every difference between two snapshots, one line each; empty when they agree. */
export function compareReadModels(expected: ReadModelSnapshot, actual: ReadModelSnapshot): string[] {
  const differences: string[] = [];
  const compareMaps = <T>(what: string, want: Map<string, T>, have: Map<string, T>) => {
    for (const [key, value] of want) {
      if (!have.has(key)) differences.push(`${what} ${key}: missing from the read tables`);
      else if (!sameJson(value, have.get(key))) {
        differences.push(`${what} ${key}: expected ${JSON.stringify(value)}, found ${JSON.stringify(have.get(key))}`);
      }
    }
    for (const key of have.keys()) if (!want.has(key)) differences.push(`${what} ${key}: in the read tables but not in the log`);
  };
  compareMaps('workspace', expected.workspaces, actual.workspaces);
  compareMaps('solution', expected.solutions, actual.solutions);
  compareMaps('organization count', expected.organizationCounts, actual.organizationCounts);
  compareMaps('workspace solution count', expected.workspaceSolutionCounts, actual.workspaceSolutionCounts);
  compareMaps('change', expected.changes, actual.changes);
  return differences;
}

/** JSON equality regardless of key order (jsonb does not keep it). */
function sameJson(a: unknown, b: unknown): boolean {
  return canonicalJson(a) === canonicalJson(b);
}
