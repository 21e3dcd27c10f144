import { notFound } from '../errors.js';
import { readRecord } from '../eventstore/event-log.js';
import type { EventStore } from '../eventstore/port.js';
import { workspaceStream } from '../eventstore/stream-names.js';
import type { Envelope, SolutionEvent, WorkspaceEvent } from '../domain/events.js';
import type { Solution, SolutionState } from '../domain/solution.js';
import type { Timestamp } from '../domain/timestamp.js';
import type { Workspace, WorkspaceState } from '../domain/workspace.js';
import { chainHashes } from '../integrity/hashes.js';
import { accessibleRecord, historyItem, type EventOf, type HistoryItem, type RecordKind } from './history.js';
import {
  fieldsAt,
  foldUntil,
  initialProvenance,
  provenanceEvolve,
  recordPatch,
  solutionFold,
  workspaceFold,
  type FieldProvenance,
  type RecordFold,
  type RecordPatchOperation,
} from './provenance.js';

/**
 * Provenance and differences (contract §17) read from the log through the port, as history and
 * `as_of` are (history.ts), so they work on either store and on deleted records. Each read folds
 * only the events up to the instants asked about.
 */

export type RecordOf<K extends RecordKind> = K extends 'workspace' ? Workspace : Solution;

export type RecordDiff<K extends RecordKind> = {
  from: RecordOf<K> | null;
  to: RecordOf<K> | null;
  patch: RecordPatchOperation[];
  changes: HistoryItem<EventOf<K>>[];
};

/** A record kind's fold, and for a solution its workspace, without which it does not exist either. */
type Source<State, Event extends WorkspaceEvent | SolutionEvent, RecordValue> = {
  kind: RecordKind;
  fold: RecordFold<State, Event, RecordValue>;
  parentId?: (record: RecordValue) => string;
};

const workspaceSource: Source<WorkspaceState, WorkspaceEvent, Workspace> = { kind: 'workspace', fold: workspaceFold };
const solutionSource: Source<SolutionState, SolutionEvent, Solution> = {
  kind: 'solution',
  fold: solutionFold,
  parentId: (solution) => solution.workspace_id,
};

/**
 * When a solution's workspace existed: a cascade deletion trails the workspace's, and in between
 * the solution is shown as gone, as `get_solution` with `as_of` shows it.
 */
async function parentExisted(store: EventStore, workspaceId: string): Promise<(instant: Timestamp | undefined) => boolean> {
  const events = (await readRecord(store, workspaceStream(workspaceId))).events.map((logged) => logged.event as Envelope<WorkspaceEvent>);
  return (instant) =>
    workspaceFold.present(foldUntil(workspaceFold.evolve, workspaceFold.initialState, events, instant).state) !== undefined;
}

/** The record at each instant (undefined: now), or null where it did not exist then. */
async function recordsAt<State, Event extends WorkspaceEvent | SolutionEvent, RecordValue>(
  store: EventStore,
  source: Source<State, Event, RecordValue>,
  states: State[],
  instants: (Timestamp | undefined)[],
): Promise<(RecordValue | null)[]> {
  const records = states.map((state) => source.fold.present(state) ?? null);
  const parentId = records.map((record) => (record === null ? undefined : source.parentId?.(record))).find((id) => id !== undefined);
  if (parentId === undefined) return records;
  const existed = await parentExisted(store, parentId);
  return records.map((record, index) => (record !== null && existed(instants[index]) ? record : null));
}

async function provenanceOf<State, Event extends WorkspaceEvent | SolutionEvent, RecordValue>(
  store: EventStore,
  source: Source<State, Event, RecordValue>,
  id: string,
  organizations: ReadonlySet<string>,
  asOf: Timestamp | undefined,
  pointer: string | undefined,
): Promise<FieldProvenance[]> {
  const events = (await accessibleRecord(store, source.kind, id, organizations)).map((logged) => logged.event) as Envelope<Event>[];
  const { state } = foldUntil(provenanceEvolve(source.fold), initialProvenance(source.fold), events, asOf);
  const [record = null] = await recordsAt(store, source, [state.state], [asOf]);
  if (record === null) throw notFound(source.kind);
  return fieldsAt(state.fields.values(), pointer);
}

/**
 * For every field of the record at `asOf` (now when undefined), who last set it, narrowed to those
 * at, under or holding `pointer` when given; 404 if the record did not exist then.
 */
export const recordProvenance = (
  store: EventStore,
  kind: RecordKind,
  id: string,
  organizations: ReadonlySet<string>,
  asOf: Timestamp | undefined,
  pointer: string | undefined,
): Promise<FieldProvenance[]> =>
  kind === 'workspace'
    ? provenanceOf(store, workspaceSource, id, organizations, asOf, pointer)
    : provenanceOf(store, solutionSource, id, organizations, asOf, pointer);

async function diffOf<State, Event extends WorkspaceEvent | SolutionEvent, RecordValue extends object>(
  store: EventStore,
  source: Source<State, Event, RecordValue>,
  id: string,
  organizations: ReadonlySet<string>,
  from: Timestamp,
  to: Timestamp | undefined,
) {
  const logged = await accessibleRecord(store, source.kind, id, organizations);
  const events = logged.map((entry) => entry.event) as Envelope<Event>[];
  const atFrom = foldUntil(source.fold.evolve, source.fold.initialState, events, from);
  const atTo = foldUntil(source.fold.evolve, atFrom.state, events.slice(atFrom.taken), to);
  const [before = null, after = null] = await recordsAt(store, source, [atFrom.state, atTo.state], [from, to]);
  if (before === null && after === null) throw notFound(source.kind);
  const hashes = chainHashes(logged.map((entry) => entry.stored));
  const changes = events
    .slice(atFrom.taken, atFrom.taken + atTo.taken)
    .map((event, index) => historyItem(event, atFrom.taken + index + 1, hashes[atFrom.taken + index]!));
  return { from: before, to: after, patch: recordPatch(before, after), changes };
}

/**
 * The record at `from` and at `to` (now when undefined), the patch between them and the events in
 * between (`from` < occurred_at ≤ `to`); 404 if it existed at neither instant. `to` is not before `from`.
 */
export const recordDiff = <K extends RecordKind>(
  store: EventStore,
  kind: K,
  id: string,
  organizations: ReadonlySet<string>,
  from: Timestamp,
  to: Timestamp | undefined,
): Promise<RecordDiff<K>> =>
  (kind === 'workspace'
    ? diffOf(store, workspaceSource, id, organizations, from, to)
    : diffOf(store, solutionSource, id, organizations, from, to)) as Promise<RecordDiff<K>>;
