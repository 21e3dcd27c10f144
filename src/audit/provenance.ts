import { createPatch, type Operation, type Pointer } from 'rfc6902';
import { solutionDecider, workspaceDecider } from '../domain/deciders.js';
import type { Envelope, SolutionEvent, WorkspaceEvent } from '../domain/events.js';
import type { Solution, SolutionState } from '../domain/solution.js';
import type { Timestamp } from '../domain/timestamp.js';
import type { Workspace, WorkspaceState } from '../domain/workspace.js';

/**
 * Provenance and differences (contract §17) as pure functions of a record's events: no I/O, no
 * clock. Every fold takes a starting state and the events after it, so a caller may start from a
 * snapshot instead of the record's first event and gets the same answer.
 */

/** How a record kind folds, and which of its fields provenance reports. */
export type RecordFold<State, Event extends WorkspaceEvent | SolutionEvent, RecordValue> = {
  initialState: State;
  evolve: (state: State, event: Envelope<Event>) => State;
  /** The record while it exists; undefined before creation and after deletion. */
  present: (state: State) => RecordValue | undefined;
  /** The record's fields as RFC 6901 pointers and values: the Response's order, attribute keys sorted. */
  fields: (record: RecordValue) => Iterable<[string, unknown]>;
};

/** One reference token of an RFC 6901 pointer: `~` and `/` escaped as `~0` and `~1`, in that order. */
export const pointerToken = (key: string) => key.replaceAll('~', '~0').replaceAll('/', '~1');

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

const byKey = ([a]: [string, unknown], [b]: [string, unknown]) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * The leaves of an attributes object: objects recurse, arrays and scalars are leaves. An empty
 * object nested inside is a leaf too (it was set, and holds nothing to recurse into). Keys are
 * taken in sorted order at each level: the stores give an object's keys back in different orders
 * (PostgreSQL's jsonb sorts them its own way), and an audit should read the same from both.
 */
function* leaves(value: Record<string, unknown>, prefix: string): Generator<[string, unknown]> {
  for (const [key, item] of Object.entries(value).sort(byKey)) {
    const path = `${prefix}/${pointerToken(key)}`;
    if (isObject(item) && Object.keys(item).length > 0) yield* leaves(item, path);
    else yield [path, item];
  }
}

export const workspaceFold: RecordFold<WorkspaceState, WorkspaceEvent, Workspace> = {
  initialState: workspaceDecider.initialState,
  evolve: workspaceDecider.evolve,
  present: (state) => (state.status === 'active' ? state.workspace : undefined),
  *fields(workspace) {
    yield ['/name', workspace.name];
    yield ['/description', workspace.description];
    yield* leaves(workspace.attributes, '/attributes');
  },
};

export const solutionFold: RecordFold<SolutionState, SolutionEvent, Solution> = {
  initialState: solutionDecider.initialState,
  evolve: solutionDecider.evolve,
  present: (state) => (state.status === 'active' ? state.solution : undefined),
  *fields(solution) {
    yield ['/name', solution.name];
    yield ['/description', solution.description];
    yield* leaves(solution.attributes, '/attributes');
    yield ['/documentation', solution.documentation];
  },
};

/**
 * Folds `events` (one record's, oldest first) onto `state` up to the last one that occurred at or
 * before `until` (all of them when `until` is undefined), and says how many it took. A record's
 * events occur in strictly increasing order (contract §8), so it stops at the first one after.
 */
export function foldUntil<State, Event extends { metadata: { occurred_at: Timestamp } }>(
  evolve: (state: State, event: Event) => State,
  state: State,
  events: readonly Event[],
  until: Timestamp | undefined,
): { state: State; taken: number } {
  let current = state;
  let taken = 0;
  for (const event of events) {
    if (until !== undefined && event.metadata.occurred_at > until) break;
    current = evolve(current, event);
    taken++;
  }
  return { state: current, taken };
}

/** Who gave a field its present value: the event's 1-based version in the record's stream, when and by whom. */
export type FieldProvenance = { path: string; value: unknown; version: number; set_at: Timestamp; set_by: string };

/** A record's state with, for each of its fields, the event after which it has held its present value. */
export type ProvenanceState<State> = {
  state: State;
  /** The version in the stream of the last event folded in (0 before any): another program's events between are counted. */
  version: number;
  /**
   * By path, in the order of the record's fields. A plain object, so that the whole state is JSON
   * and can be kept as a snapshot (provenanceSnapshotKey); a path starts with "/", so it is never
   * an array index or `__proto__`, and keeps its place.
   */
  fields: Readonly<Record<string, FieldProvenance>>;
};

export const initialProvenance = <State>(fold: { initialState: State }): ProvenanceState<State> => ({
  state: fold.initialState,
  version: 0,
  fields: {},
});

/** Provenance snapshots sit beside the record's own snapshots, under this prefix to its stream's name. */
const provenanceSnapshotPrefix = 'provenance:';

/** Where a stream's provenance snapshots are kept. */
export const provenanceSnapshotKey = (streamName: string) => `${provenanceSnapshotPrefix}${streamName}`;

/** The stream whose provenance a snapshot key holds; undefined for a record's own snapshot. */
export const provenanceSnapshotStream = (key: string) =>
  key.startsWith(provenanceSnapshotPrefix) ? key.slice(provenanceSnapshotPrefix.length) : undefined;

/** The fields at, under or holding `pointer` (the leaf an inner pointer falls in); all of them when undefined or "". */
export const fieldsAt = (fields: Iterable<FieldProvenance>, pointer: string | undefined): FieldProvenance[] =>
  [...fields].filter(
    ({ path }) => pointer === undefined || path === pointer || path.startsWith(`${pointer}/`) || pointer.startsWith(`${path}/`),
  );

/** Structural JSON equality, key order aside (stores may give an object's keys back in another order). */
export function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((item, index) => sameJson(item, b[index]));
  if (!isObject(a) || !isObject(b) || Array.isArray(b)) return false;
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((key) => Object.hasOwn(b, key) && sameJson(a[key], b[key]));
}

/**
 * One step of provenance: a field keeps its origin while its value stays the same, and any event
 * that changes it (sets, removes and re-adds, replaces an object by a scalar or back) becomes its
 * origin. Events record resulting values, not the patch sent, so setting a field to the value it
 * already held leaves its origin where it was.
 */
export const provenanceEvolve =
  <State, Event extends WorkspaceEvent | SolutionEvent, RecordValue>(fold: RecordFold<State, Event, RecordValue>) =>
  (previous: ProvenanceState<State>, event: Envelope<Event>, streamVersion: bigint): ProvenanceState<State> => {
    const state = fold.evolve(previous.state, event);
    const version = Number(streamVersion);
    const record = fold.present(state);
    const fields: Record<string, FieldProvenance> = {};
    if (record !== undefined) {
      for (const [path, value] of fold.fields(record)) {
        const before = Object.hasOwn(previous.fields, path) ? previous.fields[path] : undefined;
        fields[path] =
          before !== undefined && sameJson(before.value, value)
            ? { ...before, value }
            : { path, value, version, set_at: event.metadata.occurred_at, set_by: event.metadata.actor };
      }
    }
    return { state, version, fields };
  };

/** The RFC 6902 operations a record's patch holds. */
export type RecordPatchOperation = Extract<Operation, { op: 'add' | 'remove' | 'replace' }>;

/** `value` with every object's keys in sorted order, so that a patch lists its operations in one order from either store. */
const withSortedKeys = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(withSortedKeys);
  if (!isObject(value)) return value;
  return Object.fromEntries(
    Object.entries(value)
      .sort(byKey)
      .map(([key, item]) => [key, withSortedKeys(item)]),
  );
};

/**
 * The RFC 6902 operations turning `from` into `to`. A record absent at one end is added or
 * removed whole at the root pointer `""` (contract §17), rather than replaced by or with `null`.
 */
export function recordPatch(from: object | null, to: object | null): RecordPatchOperation[] {
  if (from === null && to === null) return [];
  if (from === null) return [{ op: 'add', path: '', value: to }];
  if (to === null) return [{ op: 'remove', path: '' }];
  // rfc6902's diff emits only add, remove and replace (its diff.js), and so does boundedArrays; the narrowing says so for the API's schema.
  return createPatch(withSortedKeys(from), withSortedKeys(to), boundedArrays) as RecordPatchOperation[];
}

/**
 * Pairs of elements rfc6902's array diff may compare. It finds the fewest operations by an edit
 * distance over every pair, each pair diffed whole, and recursing once per element: an array of a
 * few thousand elements exhausted the stack, and two of a thousand documentation blocks the memory.
 */
const maxComparedPairs = 2500;

/**
 * Whether rfc6902's array diff may compare `input` with `output`: its table has a row and a column
 * more than the arrays, and its recursion goes as deep as both are long together, so one side
 * empty is no cheaper than the other's length.
 */
const cheapToCompare = (input: unknown[], output: unknown[]): boolean => (input.length + 1) * (output.length + 1) <= maxComparedPairs;

/**
 * rfc6902's array diff where it is cheap; beyond `maxComparedPairs`, the elements both arrays
 * begin and end with alike are kept, and what lies between is diffed by the library if that is
 * cheap, else element by element at the same index, then added or removed at the end: a patch as
 * valid, not always as short, in time and memory linear in the arrays.
 */
function boundedArrays(input: unknown, output: unknown, pointer: Pointer): Operation[] | undefined {
  if (!Array.isArray(input) || !Array.isArray(output) || cheapToCompare(input, output)) return undefined;
  let start = 0;
  while (start < input.length && start < output.length && sameJson(input[start], output[start])) start++;
  let end = 0;
  while (
    end < input.length - start &&
    end < output.length - start &&
    sameJson(input[input.length - 1 - end], output[output.length - 1 - end])
  )
    end++;
  const from = input.slice(start, input.length - end);
  const to = output.slice(start, output.length - end);
  // Operations on the middle alone, at its own indices: shifted past the elements kept before it. The
  // library names the middle's end "-" (RFC 6901), which is not the whole array's end: its index then.
  const at = (index: number, rest = '') => `${pointer.add(String(start + index)).toString()}${rest}`;
  const shifted = (operations: Operation[]) => {
    let length = from.length;
    return operations.map((operation) => {
      const [, token, rest] = /^\/(\d+|-)(.*)$/.exec(operation.path)!;
      const index = token === '-' ? length : Number(token);
      if (rest === '' && operation.op === 'add') length++;
      if (rest === '' && operation.op === 'remove') length--;
      return { ...operation, path: at(index, rest) };
    });
  };
  if (from.length > 0 && to.length > 0 && cheapToCompare(from, to)) return shifted(createPatch(from, to, boundedArrays));
  const operations: Operation[] = [];
  const shared = Math.min(from.length, to.length);
  for (let index = 0; index < shared; index++) {
    for (const operation of createPatch(from[index], to[index], boundedArrays))
      operations.push({ ...operation, path: at(index, operation.path) });
  }
  for (let index = shared; index < to.length; index++) operations.push({ op: 'add', path: at(index), value: to[index] });
  for (let index = from.length - 1; index >= shared; index--) operations.push({ op: 'remove', path: at(index) });
  return operations;
}
