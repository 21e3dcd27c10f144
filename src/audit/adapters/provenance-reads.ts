import { notFound } from '../../errors.js';
import { readRecord, readRecordRange, type LoggedEvent } from '../../eventstore/event-log.js';
import type { EventStore } from '../../eventstore/port.js';
import { solutionStream, workspaceStream } from '../../eventstore/stream-names.js';
import { workspaceDecider } from '../../domain/deciders.js';
import type { Envelope, SolutionEvent, WorkspaceEvent } from '../../domain/events.js';
import type { Solution, SolutionState } from '../../domain/solution.js';
import type { Timestamp } from '../../domain/timestamp.js';
import type { Workspace, WorkspaceState } from '../../domain/workspace.js';
import { chainHashes, storedHashes, type EventHashes } from '../../integrity/hashes.js';
import { foldRecord } from '../../write/load-record.js';
import type { SnapshotStore } from '../../write/snapshots.js';
import { historyItem, type EventOf, type HistoryItem, type RecordKind } from '../history.js';
import {
  fieldsAt,
  foldUntil,
  initialProvenance,
  provenanceEvolve,
  provenanceSnapshotKey,
  recordPatch,
  solutionFold,
  workspaceFold,
  type FieldProvenance,
  type ProvenanceState,
  type RecordFold,
  type RecordPatchOperation,
} from '../provenance.js';

/**
 * Provenance and differences (contract §17) read from the log through the port, as history and
 * `as_of` are (history-reads.ts), so they work on either store and on deleted records. Each costs what
 * the instants asked about cost, not the record's age: the state at an instant is folded from the
 * latest snapshot at or before it, and a diff then reads on only up to its second instant.
 * Provenance needs, for every field, the event that last changed it, which may be the record's
 * first: so the provenance state itself (the record's state, each field's origin and how many
 * events made it) is kept as a snapshot every `snapshotInterval` versions, as a record's own state
 * is. The first read of an old record's provenance folds it whole once, and keeps them.
 */

export type RecordOf<K extends RecordKind> = K extends 'workspace' ? Workspace : Solution;

export type RecordDiff<K extends RecordKind> = {
  from: RecordOf<K> | null;
  to: RecordOf<K> | null;
  patch: RecordPatchOperation[];
  changes: HistoryItem<EventOf<K>>[];
};

/** A record kind's stream and fold, and for a solution its workspace, without which it does not exist either. */
type Source<State, Event extends WorkspaceEvent | SolutionEvent, RecordValue> = {
  kind: RecordKind;
  streamName: (id: string) => string;
  fold: RecordFold<State, Event, RecordValue>;
  parentId?: (record: RecordValue) => string;
};

const workspaceSource: Source<WorkspaceState, WorkspaceEvent, Workspace> = {
  kind: 'workspace',
  streamName: workspaceStream,
  fold: workspaceFold,
};
const solutionSource: Source<SolutionState, SolutionEvent, Solution> = {
  kind: 'solution',
  streamName: solutionStream,
  fold: solutionFold,
  parentId: (solution) => solution.workspace_id,
};

/** Provenance states kept beside the records' own snapshots (provenanceSnapshotKey), in the same store. */
const provenanceSnapshots = (snapshots: SnapshotStore | undefined): SnapshotStore | undefined =>
  snapshots && {
    latest: (streamName, until) => snapshots.latest(provenanceSnapshotKey(streamName), until),
    save: (made) => snapshots.save(made.map((snapshot) => ({ ...snapshot, streamName: provenanceSnapshotKey(snapshot.streamName) }))),
  };

/** The record's provenance state at `until` (now when undefined), from the latest provenance snapshot at or before it. */
const provenanceAt = <State, Event extends WorkspaceEvent | SolutionEvent, RecordValue>(
  store: EventStore,
  snapshots: SnapshotStore | undefined,
  source: Source<State, Event, RecordValue>,
  id: string,
  until: Timestamp | undefined,
) =>
  foldRecord<ProvenanceState<State>, Event>(
    store,
    source.streamName(id),
    { initialState: initialProvenance(source.fold), evolve: provenanceEvolve(source.fold) },
    { snapshots: provenanceSnapshots(snapshots), until },
  );

/** Whether the workspace existed at `instant` (now when undefined). */
async function workspaceExisted(store: EventStore, snapshots: SnapshotStore | undefined, id: string, instant: Timestamp | undefined) {
  const { state } = await foldRecord(store, workspaceStream(id), workspaceDecider, { snapshots, until: instant });
  return workspaceFold.present(state) !== undefined;
}

/**
 * The record at each instant (undefined: now), or null where it did not exist then, or not in one
 * of `organizations`. A solution exists only while its workspace does: a cascade deletion trails
 * the workspace's, and in between the solution is shown as gone, as `get_solution` with `as_of` shows it.
 */
async function recordsAt<State, Event extends WorkspaceEvent | SolutionEvent, RecordValue extends { organization_id: string }>(
  store: EventStore,
  snapshots: SnapshotStore | undefined,
  source: Source<State, Event, RecordValue>,
  organizations: ReadonlySet<string>,
  states: State[],
  instants: (Timestamp | undefined)[],
): Promise<(RecordValue | null)[]> {
  return Promise.all(
    states.map(async (state, index) => {
      const record = source.fold.present(state);
      if (record === undefined || !organizations.has(record.organization_id)) return null;
      const parentId = source.parentId?.(record);
      return parentId === undefined || (await workspaceExisted(store, snapshots, parentId, instants[index])) ? record : null;
    }),
  );
}

async function provenanceOf<State, Event extends WorkspaceEvent | SolutionEvent, RecordValue extends { organization_id: string }>(
  store: EventStore,
  snapshots: SnapshotStore | undefined,
  source: Source<State, Event, RecordValue>,
  id: string,
  organizations: ReadonlySet<string>,
  asOf: Timestamp | undefined,
  pointer: string | undefined,
): Promise<FieldProvenance[]> {
  const { state } = await provenanceAt(store, snapshots, source, id, asOf);
  const [record = null] = await recordsAt(store, snapshots, source, organizations, [state.state], [asOf]);
  if (record === null) throw notFound(source.kind);
  return fieldsAt(Object.values(state.fields), pointer);
}

/**
 * For every field of the record at `asOf` (now when undefined), who last set it, narrowed to those
 * at, under or holding `pointer` when given; 404 if the record did not exist then.
 */
export const recordProvenance = (
  store: EventStore,
  snapshots: SnapshotStore | undefined,
  kind: RecordKind,
  id: string,
  organizations: ReadonlySet<string>,
  asOf: Timestamp | undefined,
  pointer: string | undefined,
): Promise<FieldProvenance[]> =>
  kind === 'workspace'
    ? provenanceOf(store, snapshots, workspaceSource, id, organizations, asOf, pointer)
    : provenanceOf(store, snapshots, solutionSource, id, organizations, asOf, pointer);

/** Events read at once while reading on from a diff's first instant to its second. */
const diffPageSize = 256;

/**
 * The events after stream version `after` that occurred at or before `until` (all when undefined),
 * and the state they fold `state` into: one record's events occur in order, so reading stops at
 * the first one after `until`.
 */
async function foldOn<State, Event extends WorkspaceEvent | SolutionEvent>(
  store: EventStore,
  streamName: string,
  evolve: (state: State, event: Envelope<Event>) => State,
  state: State,
  after: bigint,
  until: Timestamp | undefined,
): Promise<{ state: State; events: LoggedEvent[] }> {
  const events: LoggedEvent[] = [];
  let current = state;
  for (let from = after + 1n; ;) {
    const page = await readRecordRange(store, streamName, { from, limit: diffPageSize });
    const folded = foldUntil(
      evolve,
      current,
      page.events.map((logged) => logged.event as Envelope<Event>),
      until,
    );
    current = folded.state;
    events.push(...page.events.slice(0, folded.taken));
    const last = page.read.at(-1);
    if (folded.taken < page.events.length || !last || page.read.length < diffPageSize) return { state: current, events };
    from = last.version + 1n;
  }
}

/**
 * The hashes of some of a stream's events: those they were stored with. An event stored before
 * hashes existed has them computed along the chain from the stream's first event, which takes
 * reading the stream whole (only records that old).
 */
async function hashesOf(store: EventStore, streamName: string, events: LoggedEvent[]): Promise<EventHashes[]> {
  const stored = events.map((logged) => storedHashes(logged.stored.metadata));
  if (stored.every((hashes) => hashes !== undefined)) return stored;
  const whole = (await readRecord(store, streamName)).events;
  const chained = chainHashes(whole.map((logged) => logged.stored));
  const byId = new Map(whole.map((logged, index) => [logged.id, chained[index]!]));
  return events.map((logged) => byId.get(logged.id)!);
}

async function diffOf<State, Event extends WorkspaceEvent | SolutionEvent, RecordValue extends { organization_id: string }>(
  store: EventStore,
  snapshots: SnapshotStore | undefined,
  source: Source<State, Event, RecordValue>,
  id: string,
  organizations: ReadonlySet<string>,
  from: Timestamp,
  to: Timestamp | undefined,
) {
  const streamName = source.streamName(id);
  // Read forwards from the earlier instant to the later; a `to` before `from` diffs back in time.
  const backwards = to !== undefined && to < from;
  const [earlier, later] = backwards ? [to, from] : [from, to];
  // The record's state at the earlier instant and where in the stream it stands: the provenance state's fields are not needed.
  const atEarlier = await provenanceAt(store, snapshots, source, id, earlier);
  const atLater = await foldOn(store, streamName, source.fold.evolve, atEarlier.state.state, atEarlier.version, later);
  const [atFrom, atTo] = backwards ? [atLater.state, atEarlier.state.state] : [atEarlier.state.state, atLater.state];
  const [before = null, after = null] = await recordsAt(store, snapshots, source, organizations, [atFrom, atTo], [from, to]);
  if (before === null && after === null) throw notFound(source.kind);
  // The changes are those with `from` < occurred_at ≤ `to`: none when `to` is the earlier.
  const between = backwards ? [] : atLater.events;
  const hashes = await hashesOf(store, streamName, between);
  const changes = between.map((logged, index) => historyItem(logged.event, Number(logged.version), hashes[index]!));
  return { from: before, to: after, patch: recordPatch(before, after), changes };
}

/**
 * The record at `from` and at `to` (now when undefined), the patch between them and the events in
 * between (`from` < occurred_at ≤ `to`: none when `to` is before `from`); 404 if it existed at
 * neither instant.
 */
export const recordDiff = <K extends RecordKind>(
  store: EventStore,
  snapshots: SnapshotStore | undefined,
  kind: K,
  id: string,
  organizations: ReadonlySet<string>,
  from: Timestamp,
  to: Timestamp | undefined,
): Promise<RecordDiff<K>> =>
  (kind === 'workspace'
    ? diffOf(store, snapshots, workspaceSource, id, organizations, from, to)
    : diffOf(store, snapshots, solutionSource, id, organizations, from, to)) as Promise<RecordDiff<K>>;
