import { createHash } from 'node:crypto';
import { ServiceError, unavailable } from '../errors.js';
import { readRecordRange, type LoggedEvent } from '../eventstore/event-log.js';
import {
  emptyStreamHead,
  EventStoreNotReached,
  EventStoreRefused,
  StreamVersionConflict,
  type EventStore,
  type GlobalPosition,
  type NewEvent,
  type StreamHead,
} from '../eventstore/port.js';
import type { Decider } from '../domain/deciders.js';
import type { DomainEvent, Envelope } from '../domain/events.js';
import { chainHead, hashAppended, storedHashes } from '../integrity/hashes.js';
import { commandEntries, indexedEvents, type CommandIndex, type CommandIndexMark, type CommandSpan } from './command-index.js';
import type { RecentStates } from './recent-states.js';
import { headAfter, loadRecord, type Loaded } from './load-record.js';
import { snapshotInterval, type SnapshotStore } from './snapshots.js';
import type { Timestamp } from '../domain/timestamp.js';

/**
 * A command's outcome: the record's state after it, and where its events (or its group's) lie in
 * the log; `appendedNow` false when they were appended before, by the run a keyed retry answers.
 */
export type Outcome<State> = { state: State; position: GlobalPosition | undefined; appendedNow: boolean };

/** Who asks: the request, and with an Idempotency-Key the keyed request's id (EventMetadata.command_id). */
export type CommandRequest = { requestId: string; commandId?: string | undefined };

/**
 * How long a group keeps trying after its first version conflict before it answers 503. Conflicts
 * come only from other instances (this one queues its commands per record), and each retry reads
 * only what they appended: an instance whose queue of a record never empties wins most races, and
 * the other one gets in when it does. A count of attempts gave up after about a second of that.
 */
const conflictBudgetMs = 10_000;

/** The steps of a command whose durations are observed (metrics; `npm run bench` shows where time goes). */
export type CommandStep = 'wait_turn' | 'read' | 'decide' | 'append' | 'wait_earlier_creations' | 'wait_projection';

/** Told of each version conflict (and whether the command tries again) and of each step's duration. */
export type CommandObserver = {
  onConflict?: (retrying: boolean) => void;
  onStep?: (step: CommandStep, seconds: number) => void;
};

/** Runs `work` and tells `observer` how long it took, whether it succeeded or not. */
export async function timed<T>(observer: CommandObserver | undefined, step: CommandStep, work: () => Promise<T>): Promise<T> {
  if (!observer?.onStep) return work();
  const started = performance.now();
  try {
    return await work();
  } finally {
    observer.onStep(step, (performance.now() - started) / 1000);
  }
}

export type ExecuteOptions = {
  observer?: CommandObserver | undefined;
  /**
   * Where a command may find the stream's state instead of reading it. Kept up to date by every
   * append here; only a guess, which the append's expected version checks.
   */
  recent?: RecentStates | undefined;
  /** Where snapshots are kept: read when the state is not in memory, and one taken whenever an append passes a multiple of the interval. */
  snapshots?: SnapshotStore | undefined;
  /** Where keyed commands' events are indexed: a keyed command looks itself up there instead of reading the whole stream. */
  commandIndex?: CommandIndex | undefined;
  /**
   * Events appended without their hashes, as before hashes existed (BENCH_WITHOUT_INTEGRITY): only
   * the baseline `npm run bench:audit` compares the service with.
   */
  withoutHashes?: boolean | undefined;
};

/** One command of a group: decided in its turn, settled once the group's append has answered. */
export type CommandJob<Command, State, Event extends DomainEvent> = {
  decider: Decider<Command, State, Event>;
  request: CommandRequest;
  /** Builds the command from the state it is decided on (access checks go there); called again if the group is decided again. */
  commandFor: (state: State) => Command | Promise<Command>;
  /**
   * For a keyed command found executed already: the check its answer must pass, on the state its
   * events left: whether the caller may see the record, not whether the command could run again
   * now (its workspace deleted since, say): a retry answers what was done (contract §2). Without
   * it, `commandFor` on the state the command was decided on.
   */
  mayAnswerExecuted?: (state: State) => void;
  /**
   * The stream is named by an id generated for this command, so it cannot exist yet: nothing to
   * read. Were it ever taken, the append (expecting no stream) would conflict and the group would
   * read it.
   */
  newStream: boolean;
  resolve: (outcome: Outcome<State>) => void;
  fail: (error: unknown) => void;
};

/** A record's current state and head, from its latest snapshot and the events after it (src/write/load-record.ts). */
export function loadState<State, Event extends DomainEvent>(
  store: EventStore,
  streamName: string,
  decider: Pick<Decider<unknown, State, Event>, 'initialState' | 'evolve'>,
  snapshots?: SnapshotStore,
): Promise<Loaded<State>> {
  return loadRecord(store, streamName, decider, { snapshots });
}

/** A stream that cannot exist yet: the decider's initial state at version 0. */
const fresh = <State>(decider: { initialState: State }): Loaded<State> => ({ state: decider.initialState, head: emptyStreamHead });

const fold = <State, Event extends DomainEvent>(
  decider: Pick<Decider<unknown, State, Event>, 'initialState' | 'evolve'>,
  events: Envelope[],
  from: State = decider.initialState,
) => events.reduce((current, event) => decider.evolve(current, event as Envelope<Event>), from);

/** Where the keyed request's events sit among `events`, if it already ran: they are appended together. */
function executedAt(events: Envelope[], commandId: string | undefined): { first: number; last: number } | undefined {
  if (commandId === undefined) return undefined;
  const first = events.findIndex((event) => event.metadata.command_id === commandId);
  if (first < 0) return undefined;
  let last = first;
  while (events[last + 1]?.metadata.command_id === commandId) last += 1;
  return { first, last };
}

/**
 * Answers the keyed jobs whose events are among `logged` (read after `before`, the state they
 * follow): their command already ran (its answer was lost, its instance died, or another instance
 * ran it meanwhile), so it is not decided again. Each answers with the record as its events left
 * it, after the same access checks against the state they were decided on. Returns the others.
 */
async function answerExecuted<Command, State, Event extends DomainEvent>(
  jobs: CommandJob<Command, State, Event>[],
  logged: LoggedEvent[],
  before: State,
): Promise<CommandJob<Command, State, Event>[]> {
  const stored = logged.map((entry) => entry.event);
  const remaining: CommandJob<Command, State, Event>[] = [];
  for (const job of jobs) {
    const executed = executedAt(stored, job.request.commandId);
    if (!executed) {
      remaining.push(job);
      continue;
    }
    try {
      const state = fold(job.decider, stored.slice(0, executed.last + 1), before);
      if (job.mayAnswerExecuted) job.mayAnswerExecuted(state);
      else await job.commandFor(fold(job.decider, stored.slice(0, executed.first), before));
      job.resolve({ state, position: logged[executed.last]!.position, appendedNow: false });
    } catch (error) {
      job.fail(error);
    }
  }
  return remaining;
}

type Jobs<Command, State, Event extends DomainEvent> = CommandJob<Command, State, Event>[];

/**
 * Answers the keyed jobs that already ran, and returns the others with the record's state and head
 * when it read them. Looks their ids up in the command index and reads only the events after its
 * mark, which the index then moves over: the cost of what was appended since the last keyed command
 * or snapshot, not of the record's age. The state is had before those events are read, so they
 * cover every event it holds; a conflict later reads those after it. Without a usable index (none,
 * unreadable, a void mark, an entry its events do not bear out) the stream is read whole, and the
 * index is made again from it.
 */
async function settleExecuted<Command, State, Event extends DomainEvent>(
  store: EventStore,
  streamName: string,
  jobs: Jobs<Command, State, Event>,
  options: ExecuteOptions,
): Promise<{ pending: Jobs<Command, State, Event>; known: Loaded<State> | undefined }> {
  const { commandIndex, observer, recent, snapshots } = options;
  const { decider } = jobs[0]!;
  const commandIds = jobs.flatMap((job) => (job.request.commandId === undefined ? [] : [job.request.commandId]));
  const lookup = await commandIndex?.lookup(streamName, commandIds);
  if (!commandIndex || !lookup) return settleFromWholeStream(store, streamName, jobs, options, undefined);
  const known = recent?.get<State>(streamName) ?? (await timed(observer, 'read', () => loadState(store, streamName, decider, snapshots)));
  const tail = await timed(observer, 'read', () => readAfterMark(store, streamName, lookup.mark));
  if (!tail || (tail.read.at(-1)?.version ?? 0n) < known.head.version) {
    return settleFromWholeStream(store, streamName, jobs, options, lookup.mark ?? 'none');
  }
  const inTail = new Map(commandEntries(indexedEvents(tail.events)).map((entry) => [entry.commandId, entry.span]));
  moveMarkOver(commandIndex, streamName, lookup.mark, tail);
  const pending: Jobs<Command, State, Event> = [];
  for (const [index, job] of jobs.entries()) {
    const commandId = job.request.commandId;
    const span = commandId === undefined ? undefined : (lookup.found.get(commandId) ?? inTail.get(commandId));
    if (!span) pending.push(job);
    else if (!(await answerFromSpan(store, streamName, job, commandId!, span, snapshots))) {
      // An entry its events do not bear out: the index is not to be believed for this stream.
      return settleFromWholeStream(store, streamName, [...pending, ...jobs.slice(index)], options, lookup.mark ?? 'none');
    }
  }
  return { pending, known };
}

/** The stream's events from the mark's own (to see it is still there) to its end; undefined when the mark is void. */
async function readAfterMark(store: EventStore, streamName: string, mark: CommandIndexMark | undefined) {
  const tail = await readRecordRange(store, streamName, { from: mark?.through ?? 1n });
  return mark && tail.read[0]?.id !== mark.eventId ? undefined : tail;
}

/** Moves the stream's index over `read` (oldest first), from the mark it was read from. */
function moveMarkOver(
  commandIndex: CommandIndex,
  streamName: string,
  expected: CommandIndexMark | undefined,
  { read, events }: { read: { id: string; version: bigint }[]; events: LoggedEvent[] },
  replace = false,
): void {
  const last = read.at(-1);
  if (!last || (expected && last.version === expected.through && !replace)) return;
  const lastOwn = events.at(-1);
  const headHash = lastOwn?.version === last.version ? storedHashes(lastOwn.stored.metadata)?.hash : undefined;
  // Not awaited and never rejecting (CommandIndex.advance): the answer does not wait on derived data.
  void commandIndex.advance(streamName, {
    expected,
    entries: commandEntries(indexedEvents(events)),
    mark: { through: last.version, eventId: last.id, headHash },
    replace,
  });
}

/**
 * Answers `job` from the events `span` names, once they bear it out: each of them carries the
 * command's id, and the events either side do not. The state before them is the latest snapshot
 * at or before and the events after it. False when the events do not bear the span out.
 */
async function answerFromSpan<Command, State, Event extends DomainEvent>(
  store: EventStore,
  streamName: string,
  job: CommandJob<Command, State, Event>,
  commandId: string,
  span: CommandSpan,
  snapshots: SnapshotStore | undefined,
): Promise<boolean> {
  if (span.first < 1n || span.last < span.first) return false;
  const from = span.first > 1n ? span.first - 1n : 1n;
  const { events } = await readRecordRange(store, streamName, { from, limit: Number(span.last - from) + 2 });
  const carries = (logged: LoggedEvent) => logged.event.metadata.command_id === commandId;
  const spanned = events.filter((logged) => logged.version >= span.first && logged.version <= span.last);
  const beside = events.filter((logged) => logged.version === span.first - 1n || logged.version === span.last + 1n);
  if (BigInt(spanned.length) !== span.last - span.first + 1n || !spanned.every(carries) || beside.some(carries)) return false;
  const before =
    span.first === 1n
      ? job.decider.initialState
      : (await loadRecord(store, streamName, job.decider, { snapshots, through: span.first - 1n })).state;
  await answerExecuted([job], spanned, before);
  return true;
}

/**
 * Answers the keyed jobs that already ran from the whole stream, read from its first event, and
 * makes the command index again from it (moving it from `mark` as looked up, 'none' for none;
 * undefined: the index could not be read, and is left alone).
 */
async function settleFromWholeStream<Command, State, Event extends DomainEvent>(
  store: EventStore,
  streamName: string,
  jobs: Jobs<Command, State, Event>,
  { commandIndex, observer }: ExecuteOptions,
  mark: CommandIndexMark | 'none' | undefined,
): Promise<{ pending: Jobs<Command, State, Event>; known: Loaded<State> }> {
  const { decider } = jobs[0]!;
  const record = await timed(observer, 'read', () => readRecordRange(store, streamName, {}));
  const pending = await answerExecuted(jobs, record.events, decider.initialState);
  if (commandIndex && mark !== undefined) moveMarkOver(commandIndex, streamName, mark === 'none' ? undefined : mark, record, true);
  const own = record.events;
  return {
    pending,
    known: {
      state: fold(
        decider,
        own.map((logged) => logged.event),
      ),
      // The stream's own count: events another program wrote into it are not among the record's.
      head: { version: record.read.at(-1)?.version ?? 0n, hash: chainHead(own.map((logged) => logged.stored)) },
    },
  };
}

/**
 * After an append: a group with keyed commands moves the index over its own events unread, from the
 * head the append expected; an append that passes a snapshot interval brings the index up to the
 * stream's end by reading what came after its mark, so that the events a keyed command reads stay
 * few however few commands are keyed.
 */
function indexAppended(
  store: EventStore,
  streamName: string,
  commandIndex: CommandIndex,
  appended: { before: StreamHead; after: StreamHead; events: NewEvent[]; commandIds: (string | undefined)[]; passedSnapshot: boolean },
): void {
  const { before, after, events, commandIds, passedSnapshot } = appended;
  if (commandIds.some((commandId) => commandId !== undefined)) {
    // Not awaited and never rejecting (CommandIndex.advance, indexTail): the answer does not wait on derived data.
    void commandIndex.advance(streamName, {
      expected: before.version === 0n ? undefined : { through: before.version, headHash: before.hash },
      entries: commandEntries(commandIds.map((commandId, index) => ({ version: before.version + BigInt(index + 1), commandId }))),
      mark: { through: after.version, eventId: events.at(-1)!.id, headHash: after.hash },
    });
  } else if (passedSnapshot) void indexTail(store, streamName, commandIndex);
}

/**
 * Brings the stream's index up to its end from its mark; a void mark is left to the next keyed
 * command, which reads the stream whole. Never throws, like the index's own calls: it is derived data.
 */
async function indexTail(store: EventStore, streamName: string, commandIndex: CommandIndex): Promise<void> {
  const lookup = await commandIndex.lookup(streamName, []);
  if (!lookup) return;
  try {
    const tail = await readAfterMark(store, streamName, lookup.mark);
    if (tail) moveMarkOver(commandIndex, streamName, lookup.mark, tail);
  } catch {
    // Only derived data waits on this read: the next keyed command reads what it did not.
  }
}

/** One command of a group as decided: the state it leaves and how many events it appends, or why it was refused. */
type Decision<State> = { state: State; appends: number } | { error: unknown };

/**
 * How much event data one group's append carries at most (JSON characters): beyond it, the next
 * commands wait for the next append. Keeps an append well below EventStoreDB's default largest
 * write (1 MiB); one command alone may still carry more, as it could without groups.
 */
const groupAppendBudget = 256 * 1024;

/**
 * Decides jobs in their turn, each on the state the ones before it left, while their events fit
 * the budget: their events follow each other in one append; `decisions` holds one per job taken. A job the
 * decider (or its access checks) refuses adds nothing and stops no other.
 */
async function decideInTurn<Command, State, Event extends DomainEvent>(
  jobs: CommandJob<Command, State, Event>[],
  known: Loaded<State>,
  streamName: string,
  { observer, withoutHashes }: ExecuteOptions,
): Promise<{
  decisions: Decision<State>[];
  events: NewEvent[];
  commandIds: (string | undefined)[];
  state: State;
  hash: string;
  occurredAt: Timestamp | undefined;
}> {
  let state = known.state;
  // Each event's hash covers the one before it (contract §16), from the stream's last.
  let hash = known.head.hash;
  let occurredAt: Timestamp | undefined;
  let size = 0;
  const events: NewEvent[] = [];
  const commandIds: (string | undefined)[] = [];
  const decisions: Decision<State>[] = [];
  for (const job of jobs) {
    if (size > groupAppendBudget) break;
    try {
      const command = await job.commandFor(state);
      const decideStarted = performance.now();
      const decidedEvents = job.decider.decide(command, state);
      observer?.onStep?.('decide', (performance.now() - decideStarted) / 1000);
      const version = known.head.version + BigInt(events.length);
      const hashes = withoutHashes
        ? []
        : hashAppended(
            decidedEvents.map((event, index) => ({
              type: event.type,
              data: event.data,
              metadata: event.metadata,
              streamName,
              version: version + BigInt(index + 1),
            })),
            hash,
          );
      for (const [index, event] of decidedEvents.entries()) {
        size += JSON.stringify(event.data).length;
        const id = eventId(job.request.commandId ?? job.request.requestId, streamName, version, index, event);
        events.push({
          id,
          type: event.type,
          data: event.data,
          metadata: withoutHashes ? event.metadata : { ...event.metadata, ...hashes[index] },
        });
        commandIds.push(event.metadata.command_id);
        occurredAt = event.metadata.occurred_at;
      }
      hash = hashes.at(-1)?.hash ?? hash;
      state = decidedEvents.reduce(job.decider.evolve, state);
      decisions.push({ state, appends: decidedEvents.length });
    } catch (error) {
      decisions.push({ error });
    }
  }
  return { decisions, events, commandIds, state, hash, occurredAt };
}

/**
 * Decides a group of commands on one stream one after another and appends their events in one
 * append with one expected version (group commit); each command is still answered with its own
 * result or error. The state comes from memory (`recent`) where it can, else from the store. A
 * conflict (another instance appended meanwhile) reads only the events after the version the
 * group expected, and the group is decided again on top of them, so concurrent commands on one
 * record never lose each other's changes.
 *
 * Keyed jobs may already have run (the answer lost, the instance killed, the kept answer gone):
 * the command's events carry the keyed request's id, so a keyed job looks for them first, in the
 * command index and the events after its mark (settleExecuted).
 * An append is atomic, so a crash leaves each command done once or not at all.
 */
export async function runGroup<Command, State, Event extends DomainEvent>(
  store: EventStore,
  streamName: string,
  jobs: CommandJob<Command, State, Event>[],
  options: ExecuteOptions = {},
): Promise<void> {
  const { observer, recent, snapshots, commandIndex } = options;
  const { decider } = jobs[0]!;
  let pending = jobs;
  let known: Loaded<State> | undefined;
  if (pending.some((job) => job.request.commandId !== undefined)) {
    ({ pending, known } = await settleExecuted(store, streamName, pending, options));
  } else if (pending.every((job) => job.newStream)) known = fresh(decider);
  else known = recent?.get<State>(streamName);

  let attempt = 1;
  let conflictedSince: number | undefined;
  while (pending.length > 0) {
    const current = known ?? (await timed(observer, 'read', () => loadState(store, streamName, decider, snapshots)));
    const { decisions, events, commandIds, state, hash, occurredAt } = await decideInTurn(pending, current, streamName, options);
    const settle = (position: GlobalPosition | undefined) => {
      decisions.forEach((decision, index) =>
        'error' in decision
          ? pending[index]!.fail(decision.error)
          : pending[index]!.resolve({ state: decision.state, position, appendedNow: position !== undefined }),
      );
      pending = pending.slice(decisions.length);
    };
    if (events.length === 0) {
      settle(undefined);
      known = current;
      continue;
    }
    try {
      const { position } = await timed(observer, 'append', () => store.append(streamName, current.head.version, events));
      known = { state, head: { version: current.head.version + BigInt(events.length), hash } };
      recent?.set(streamName, known.head, state);
      const passedSnapshot = known.head.version / snapshotInterval > current.head.version / snapshotInterval;
      if (snapshots && passedSnapshot) {
        // Not awaited and never rejecting (SnapshotStore.save): a snapshot not kept costs time later, nothing else.
        void snapshots.save([{ streamName, head: known.head, eventId: events.at(-1)!.id, occurredAt: occurredAt!, state }]);
      }
      if (commandIndex)
        indexAppended(store, streamName, commandIndex, { before: current.head, after: known.head, events, commandIds, passedSnapshot });
      // A job that changed nothing still answers after the group's events: its state shows them.
      settle(position);
      attempt = 1;
      conflictedSince = undefined;
      continue;
    } catch (error) {
      recent?.forget(streamName);
      let failure: unknown;
      if (error instanceof StreamVersionConflict) {
        conflictedSince ??= performance.now();
        const retrying = performance.now() - conflictedSince < conflictBudgetMs;
        observer?.onConflict?.(retrying);
        if (!retrying) failure = unavailable('the record is being changed by too many requests at once; try again');
      } else failure = appendFailure(error);
      if (failure !== undefined) {
        // A command the decider refused on the state as stored answers its refusal, whatever became
        // of the others' append; one decided after the group's first events (there are some: an
        // append was made) was refused on a state that append would have made, and answers its failure.
        const firstWriting = decisions.findIndex((decision) => 'state' in decision && decision.appends > 0);
        decisions.slice(0, firstWriting).forEach((decision, index) => {
          if ('error' in decision) pending[index]!.fail(decision.error);
        });
        throw failure;
      }
      attempt += 1;
    }
    // Another writer appended first: read what it appended, no more, and decide again on top of it.
    const after = await timed(observer, 'read', () => readRecordRange(store, streamName, { from: current.head.version + 1n }));
    const last = after.read.at(-1);
    const head = last && headAfter(current.head, after.events, last.version);
    // Without `head`, the state in memory was not the stream's after all, or what came after has no stored hash: read it whole.
    if (!head) known = undefined;
    else {
      pending = await answerExecuted(pending, after.events, current.state);
      known = {
        state: fold(
          decider,
          after.events.map((logged) => logged.event),
          current.state,
        ),
        head,
      };
    }
    await new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(2 ** attempt, 20)));
  }
}

/** What a group's commands answer when its append failed otherwise than by a conflict. */
function appendFailure(error: unknown): unknown {
  // A refused append wrote nothing: its outcome is known, and it is a 500, not a 503 to retry.
  if (error instanceof EventStoreRefused) return error;
  // Nor did one that never left for want of a connection: a plain 503, its outcome known.
  if (error instanceof EventStoreNotReached) return error;
  return outcomeUnknown(error);
}

/**
 * One command on its own (not queued): decided, appended, retried on a conflict, as a group of one.
 * `commandFor` builds the command from the current state (access checks go there) on every attempt.
 */
export function execute<Command, State, Event extends DomainEvent>(
  store: EventStore,
  streamName: string,
  decider: Decider<Command, State, Event>,
  request: CommandRequest,
  commandFor: (state: State) => Command | Promise<Command>,
  options: ExecuteOptions & { newStream?: boolean } = {},
): Promise<Outcome<State>> {
  return new Promise<Outcome<State>>((resolve, reject) => {
    const job = { decider, request, commandFor, newStream: options.newStream ?? false, resolve, fail: reject };
    runGroup(store, streamName, [job], options).catch(reject);
  });
}

/**
 * The store failed while the write was on its way: it may or may not have been stored (contract
 * §11). The 503 says so, so that a client retries with the same Idempotency-Key or checks first.
 */
function outcomeUnknown(cause: unknown): ServiceError {
  const error = new ServiceError('unavailable', 'the event store stopped answering during the write; the change may have been applied', [
    {
      path: 'request',
      message:
        'outcome unknown: retry with the same Idempotency-Key (it answers what was done), or read the record before retrying without one',
    },
  ]);
  error.cause = cause;
  return error;
}

/**
 * Deterministic, so that repeating an append that already succeeded is recognised by the store.
 * The whole event is part of it, its metadata too: two different events never share an id, even
 * under one request id. The same keyed command decided again at another instant (by another
 * instance, its first one gone) is another event; had it the stored one's id, the store would take
 * its append for a repeat of the stored one, and it would answer, and remember, what it decided
 * rather than what is stored (instead, its append conflicts, and it answers the stored event).
 */
function eventId(requestId: string, streamName: string, version: bigint, index: number, event: Envelope): string {
  const hash = createHash('sha256')
    .update(JSON.stringify([requestId, streamName, version.toString(), index, event.type, event.data, event.metadata]))
    .digest('hex');
  const variant = ((parseInt(hash[16]!, 16) & 0x3) | 0x8).toString(16);
  return `${hash.slice(0, 8)}-${hash.slice(8, 12)}-8${hash.slice(13, 16)}-${variant}${hash.slice(17, 20)}-${hash.slice(20, 32)}`;
}
