import { createHash } from 'node:crypto';
import { unavailable } from '../errors.js';
import { StreamVersionConflict, type EventStore, type GlobalPosition } from '../eventstore/port.js';
import type { DomainEvent, Envelope } from './events.js';
import { upcast } from './upcast.js';

export type Decider<Command, State, Event extends DomainEvent> = {
  initialState: State;
  decide: (command: Command, state: State) => Envelope<Event>[];
  evolve: (state: State, event: Envelope<Event>) => State;
};

export type Outcome<State> = { state: State; position: GlobalPosition | undefined };

const maxAttempts = 30;

export async function loadState<State, Event extends DomainEvent>(
  store: EventStore,
  streamName: string,
  decider: Pick<Decider<unknown, State, Event>, 'initialState' | 'evolve'>,
): Promise<{ state: State; version: bigint }> {
  const events = await store.readStream(streamName);
  const state = events.reduce((current, event) => decider.evolve(current, upcast(event) as Envelope<Event>), decider.initialState);
  return { state, version: BigInt(events.length) };
}

/**
 * Loads the stream, decides, and appends with the expected version; on a conflict it reloads and
 * decides again, so concurrent commands on one record never lose each other's changes.
 * `commandFor` builds the command from the current state (access checks go there) on every attempt.
 */
export async function execute<Command, State, Event extends DomainEvent>(
  store: EventStore,
  streamName: string,
  decider: Decider<Command, State, Event>,
  request: { requestId: string; onAppendAttempt?: (() => void) | undefined },
  commandFor: (state: State) => Command | Promise<Command>,
): Promise<Outcome<State>> {
  for (let attempt = 1; attempt <= maxAttempts; attempt++) {
    const { state, version } = await loadState(store, streamName, decider);
    const events = decider.decide(await commandFor(state), state);
    if (events.length === 0) return { state, position: undefined };
    const newEvents = events.map((event, index) => ({
      id: eventId(request.requestId, streamName, version, index, event),
      type: event.type,
      data: event.data,
      metadata: event.metadata,
    }));
    request.onAppendAttempt?.();
    try {
      const { position } = await store.append(streamName, version, newEvents);
      return { state: events.reduce(decider.evolve, state), position };
    } catch (error) {
      if (!(error instanceof StreamVersionConflict)) throw error;
      await new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(2 ** attempt, 50)));
    }
  }
  throw unavailable('the record is being changed by too many requests at once; try again');
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
