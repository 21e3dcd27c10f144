import { createHash } from 'node:crypto';
import { ServiceError, unavailable } from '../errors.js';
import { readRecord, readRecordRange, type LoggedEvent } from '../eventstore/event-log.js';
import {
  emptyStreamHead,
  EventStoreRefused,
  StreamVersionConflict,
  type EventStore,
  type GlobalPosition,
  type NewEvent,
} from '../eventstore/port.js';
import type { Decider } from '../domain/deciders.js';
import type { DomainEvent, Envelope } from '../domain/events.js';
import { chainHead, hashAppended } from '../integrity/hashes.js';
import type { RecentStates } from './recent-states.js';
import { headAfter, loadRecord, type Loaded } from './load-record.js';
import { snapshotInterval, type SnapshotStore } from './snapshots.js';
import type { Timestamp } from '../domain/timestamp.js';

export type Outcome<State> = { state: State; position: GlobalPosition | undefined };

/** Who asks: the request, and with an Idempotency-Key the keyed request's id (EventMetadata.command_id). */
export type CommandRequest = { requestId: string; commandId?: string | undefined };

const maxAttempts = 30;

/** The steps of a command whose durations are observed (metrics; `npm run bench` shows where time goes). */
export type CommandStep = 'read' | 'decide' | 'append' | 'wait_earlier_creations' | 'wait_projection';

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
      await job.commandFor(fold(job.decider, stored.slice(0, executed.first), before));
      job.resolve({ state: fold(job.decider, stored.slice(0, executed.last + 1), before), position: logged[executed.last]!.position });
    } catch (error) {
      job.fail(error);
    }
  }
  return remaining;
}

type Decision<State> = { state: State } | { error: unknown };

/**
 * How much event data one group's append carries at most (JSON characters): beyond it, the next
 * commands wait for the next append. Keeps an append well below EventStoreDB's default largest
 * write (1 MiB); one command alone may still carry more, as it could without groups.
 */
const groupAppendBudget = 256 * 1024;

/**
 * Decides jobs in their turn, each on the state the ones before it left, while their events fit
 * the budget: their events follow each other in one append. `decided` says how many were. A job the
 * decider (or its access checks) refuses adds nothing and stops no other.
 */
async function decideInTurn<Command, State, Event extends DomainEvent>(
  jobs: CommandJob<Command, State, Event>[],
  known: Loaded<State>,
  streamName: string,
  { observer, withoutHashes }: ExecuteOptions,
): Promise<{ decisions: Decision<State>[]; events: NewEvent[]; state: State; hash: string; occurredAt: Timestamp | undefined }> {
  let state = known.state;
  // Each event's hash covers the one before it (contract §16), from the stream's last.
  let hash = known.head.hash;
  let occurredAt: Timestamp | undefined;
  let size = 0;
  const events: NewEvent[] = [];
  const decisions: Decision<State>[] = [];
  for (const job of jobs) {
    if (size > groupAppendBudget) break;
    try {
      const command = await job.commandFor(state);
      const decided = performance.now();
      const decidedEvents = job.decider.decide(command, state);
      observer?.onStep?.('decide', (performance.now() - decided) / 1000);
      const version = known.head.version + BigInt(events.length);
      const hashes = hashAppended(
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
        occurredAt = event.metadata.occurred_at;
      }
      hash = hashes.at(-1)?.hash ?? hash;
      state = decidedEvents.reduce(job.decider.evolve, state);
      decisions.push({ state });
    } catch (error) {
      decisions.push({ error });
    }
  }
  return { decisions, events, state, hash, occurredAt };
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
 * the command's events carry the keyed request's id, so a keyed job looks for them in the stream
 * first, which reads it whole.
 * An append is atomic, so a crash leaves each command done once or not at all.
 */
export async function runGroup<Command, State, Event extends DomainEvent>(
  store: EventStore,
  streamName: string,
  jobs: CommandJob<Command, State, Event>[],
  options: ExecuteOptions = {},
): Promise<void> {
  const { observer, recent, snapshots } = options;
  const { decider } = jobs[0]!;
  let pending = jobs;
  let known: Loaded<State> | undefined;
  if (pending.some((job) => job.request.commandId !== undefined)) {
    const record = await timed(observer, 'read', () => readRecord(store, streamName));
    pending = await answerExecuted(pending, record.events, decider.initialState);
    // The stream's own count: events another program wrote into it are not among the record's.
    known = {
      state: fold(
        decider,
        record.events.map((logged) => logged.event),
      ),
      head: { version: record.version, hash: chainHead(record.events.map((logged) => logged.stored)) },
    };
  } else if (pending.every((job) => job.newStream)) known = fresh(decider);
  else known = recent?.get<State>(streamName);

  let attempt = 1;
  while (pending.length > 0) {
    const current = known ?? (await timed(observer, 'read', () => loadState(store, streamName, decider, snapshots)));
    const { decisions, events, state, hash, occurredAt } = await decideInTurn(pending, current, streamName, options);
    const settle = (position: GlobalPosition | undefined) => {
      decisions.forEach((decision, index) =>
        'error' in decision ? pending[index]!.fail(decision.error) : pending[index]!.resolve({ state: decision.state, position }),
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
      if (snapshots && known.head.version / snapshotInterval > current.head.version / snapshotInterval) {
        void snapshots.save([{ streamName, head: known.head, eventId: events.at(-1)!.id, occurredAt: occurredAt!, state }]);
      }
      // A job that changed nothing still answers after the group's events: its state shows them.
      settle(position);
      attempt = 1;
      continue;
    } catch (error) {
      recent?.forget(streamName);
      // A refused append wrote nothing: its outcome is known, and it is a 500, not a 503 to retry.
      if (error instanceof EventStoreRefused) throw error;
      if (!(error instanceof StreamVersionConflict)) throw outcomeUnknown(error);
      observer?.onConflict?.(attempt < maxAttempts);
      if (attempt >= maxAttempts) throw unavailable('the record is being changed by too many requests at once; try again');
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
    await new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(2 ** attempt, 50)));
  }
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
 * The event's data is part of it: two different changes never share an id, even under one request id.
 */
function eventId(requestId: string, streamName: string, version: bigint, index: number, event: DomainEvent): string {
  const hash = createHash('sha256')
    .update(JSON.stringify([requestId, streamName, version.toString(), index, event.type, event.data]))
    .digest('hex');
  const variant = ((parseInt(hash[16]!, 16) & 0x3) | 0x8).toString(16);
  return `${hash.slice(0, 8)}-${hash.slice(8, 12)}-8${hash.slice(13, 16)}-${variant}${hash.slice(17, 20)}-${hash.slice(20, 32)}`;
}
