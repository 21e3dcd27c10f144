import { createHash } from 'node:crypto';
import { ServiceError, unavailable } from '../errors.js';
import { readRecord } from '../eventstore/event-log.js';
import { EventStoreRefused, StreamVersionConflict, type EventStore, type GlobalPosition } from '../eventstore/port.js';
import type { Decider } from '../domain/deciders.js';
import type { DomainEvent, Envelope } from '../domain/events.js';
import { chainHead, hashAppended, zeroHash } from '../integrity/hashes.js';
import type { RecentStates } from './recent-states.js';

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
   * The stream is named by an id generated for this command, so it cannot exist yet: nothing to
   * read. Were it ever taken, the append (expecting no stream) would conflict and the next attempt
   * would read it.
   */
  newStream?: boolean;
  /**
   * Where a command without an Idempotency-Key may find the stream's state instead of reading it
   * (a keyed command reads: it looks for its own earlier events). Kept up to date by every append here.
   */
  recent?: RecentStates | undefined;
};

export async function loadState<State, Event extends DomainEvent>(
  store: EventStore,
  streamName: string,
  decider: Pick<Decider<unknown, State, Event>, 'initialState' | 'evolve'>,
): Promise<{ state: State; version: bigint }> {
  const { events, version } = await readRecord(store, streamName);
  return {
    state: fold(
      decider,
      events.map((logged) => logged.event),
    ),
    version,
  };
}

/** A stream that cannot exist yet: the decider's initial state at version 0. */
const fresh = <State>(decider: { initialState: State }) => ({ state: decider.initialState, version: 0n, head: zeroHash });

const fold = <State, Event extends DomainEvent>(
  decider: Pick<Decider<unknown, State, Event>, 'initialState' | 'evolve'>,
  events: Envelope[],
) => events.reduce((current, event) => decider.evolve(current, event as Envelope<Event>), decider.initialState);

/** Where the keyed request's events sit in the stream, if it already ran: they are appended together. */
function executedAt(events: Envelope[], commandId: string | undefined): { first: number; last: number } | undefined {
  if (commandId === undefined) return undefined;
  const first = events.findIndex((event) => event.metadata.command_id === commandId);
  if (first < 0) return undefined;
  let last = first;
  while (events[last + 1]?.metadata.command_id === commandId) last += 1;
  return { first, last };
}

/**
 * Loads the stream (unless `newStream`), decides, and appends with the expected version; on a conflict it reloads and
 * decides again, so concurrent commands on one record never lose each other's changes.
 * `commandFor` builds the command from the current state (access checks go there) on every attempt.
 *
 * A keyed request whose events are already in the stream (its answer was lost, its instance died,
 * or a retry ran beside it) is not decided again: it answers with the record as those events left
 * it, after the same access checks against the state they were decided on.
 */
export async function execute<Command, State, Event extends DomainEvent>(
  store: EventStore,
  streamName: string,
  decider: Decider<Command, State, Event>,
  request: CommandRequest,
  commandFor: (state: State) => Command | Promise<Command>,
  options: ExecuteOptions = {},
): Promise<Outcome<State>> {
  const { observer, recent } = options;
  for (let attempt = 1; attempt <= maxAttempts; attempt++) {
    const known =
      attempt > 1 || request.commandId !== undefined ? undefined : options.newStream ? fresh(decider) : recent?.get<State>(streamName);
    let state: State;
    let version: bigint;
    // The hash of the stream's last event, known with its version: the expected version makes it the right one.
    let head: string;
    if (known) ({ state, version, head } = known);
    else {
      const record = await timed(observer, 'read', () => readRecord(store, streamName));
      const logged = record.events;
      const stored = logged.map((entry) => entry.event);
      const executed = executedAt(stored, request.commandId);
      if (executed) {
        await commandFor(fold(decider, stored.slice(0, executed.first)));
        return { state: fold(decider, stored.slice(0, executed.last + 1)), position: logged[executed.last]!.position };
      }
      state = fold(decider, stored);
      // The stream's own count: events another program wrote into it are not among `stored`.
      ({ version } = record);
      head = chainHead(logged.map((entry) => entry.stored));
    }
    const command = await commandFor(state);
    const decided = performance.now();
    const events = decider.decide(command, state);
    observer?.onStep?.('decide', (performance.now() - decided) / 1000);
    if (events.length === 0) return { state, position: undefined };
    const hashes = hashAppended(
      events.map((event, index) => ({
        type: event.type,
        data: event.data,
        metadata: event.metadata,
        streamName,
        version: version + BigInt(index + 1),
      })),
      head,
    );
    const newEvents = events.map((event, index) => ({
      id: eventId(request.commandId ?? request.requestId, streamName, version, index, event),
      type: event.type,
      data: event.data,
      metadata: { ...event.metadata, ...hashes[index] },
    }));
    try {
      const { position } = await timed(observer, 'append', () => store.append(streamName, version, newEvents));
      const after = events.reduce(decider.evolve, state);
      recent?.set(streamName, version + BigInt(events.length), after, hashes[hashes.length - 1]!.hash);
      return { state: after, position };
    } catch (error) {
      recent?.forget(streamName);
      // A refused append wrote nothing: its outcome is known, and it is a 500, not a 503 to retry.
      if (error instanceof EventStoreRefused) throw error;
      if (!(error instanceof StreamVersionConflict)) throw outcomeUnknown(error);
      observer?.onConflict?.(attempt < maxAttempts);
      await new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(2 ** attempt, 50)));
    }
  }
  throw unavailable('the record is being changed by too many requests at once; try again');
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
