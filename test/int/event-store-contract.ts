import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  comparePositions,
  startOfLog,
  StreamVersionConflict,
  type EventStore,
  type GlobalPosition,
  type NewEvent,
  type RecordedEvent,
} from '../../src/eventstore/port.js';
import { solutionStream, workspaceStream } from '../../src/eventstore/stream-names.js';
import { eventually } from '../support/stack.js';

export type StoreUnderTest = { store: EventStore; close: () => Promise<void> };

const newEvent = (type: string, data: Record<string, unknown> = {}): NewEvent => ({
  id: randomUUID(),
  type,
  data,
  metadata: { request_id: 'req-1', actor: 'user-1' },
});

/** Reads `$all` after `after` page by page to its end, keeping only the events of `streams`. */
/**
 * The events of `streams` after `after`, page by page to the end of the log. With `expected`, an
 * empty page before that many were found is read again a little later: on PostgreSQL the log's
 * readable end stops short of transactions still running anywhere on the server (another test
 * file's), until they end.
 */
async function readAllOf(
  store: EventStore,
  after: GlobalPosition,
  streams: Set<string>,
  { pageSize = 100, expected = 0 }: { pageSize?: number; expected?: number } = {},
): Promise<RecordedEvent[]> {
  const found: RecordedEvent[] = [];
  let position = after;
  const deadline = Date.now() + 20_000;
  for (let page = 0; page < 10_000; page++) {
    const events = await store.readAll(position, pageSize);
    if (events.length === 0 && found.length < expected && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 25));
      continue;
    }
    if (events.length === 0) return found;
    found.push(...events.filter((event) => streams.has(event.streamName)));
    position = events[events.length - 1]!.position;
  }
  throw new Error('readAll did not reach the end of the log');
}

function expectStrictlyIncreasing(events: RecordedEvent[]): void {
  for (let index = 1; index < events.length; index++) {
    expect(comparePositions(events[index - 1]!.position, events[index]!.position)).toBe(-1);
  }
}

/**
 * The event store port's contract, run against every adapter. Streams are named per run, so the
 * suite also runs against a shared EventStoreDB (EVENTSTORE_URL) that holds other data.
 */
export function eventStoreContract(open: () => Promise<StoreUnderTest>): void {
  let subject: StoreUnderTest | undefined;
  const run = randomUUID().slice(0, 8);
  const stream = (name: string) => workspaceStream(`${run}-${name}`);
  const store = () => subject!.store;

  /** A position at the end of the log as it is now: an event appended to a stream of its own. */
  async function head(): Promise<GlobalPosition> {
    return (await store().append(solutionStream(`${run}-mark-${randomUUID()}`), 0n, [newEvent('Marker')])).position;
  }

  beforeAll(async () => {
    subject = await open();
  }, 300_000);
  afterAll(async () => {
    await subject?.close();
  });

  it('appends with expected version 0 to a new stream and n to a stream of n events', async () => {
    const name = stream('versions');
    const created = newEvent('WorkspaceCreated', { name: 'Ünïcode ✓', attributes: { nested: [1, 'two', null] } });
    const first = await store().append(name, 0n, [created]);
    expect(first.version).toBe(1n);
    const second = await store().append(name, 1n, [newEvent('WorkspaceUpdated', { n: 1 }), newEvent('WorkspaceUpdated', { n: 2 })]);
    expect(second.version).toBe(3n);
    expect(comparePositions(first.position, second.position)).toBe(-1);

    const events = await store().readStream(name);
    expect(events.map((event) => event.version)).toEqual([1n, 2n, 3n]);
    expect(events.map((event) => event.type)).toEqual(['WorkspaceCreated', 'WorkspaceUpdated', 'WorkspaceUpdated']);
    expect(events[0]).toMatchObject({ id: created.id, streamName: name, data: created.data, metadata: created.metadata });
    expect(events.map((event) => (event.data as { n?: number }).n)).toEqual([undefined, 1, 2]);
  });

  it('refuses a wrong expected version with StreamVersionConflict and leaves the stream as it was', async () => {
    const name = stream('conflicts');
    await store().append(name, 0n, [newEvent('WorkspaceCreated'), newEvent('WorkspaceUpdated')]);

    await expect(store().append(name, 0n, [newEvent('WorkspaceCreated')])).rejects.toBeInstanceOf(StreamVersionConflict);
    await expect(store().append(name, 1n, [newEvent('WorkspaceUpdated')])).rejects.toBeInstanceOf(StreamVersionConflict);
    await expect(store().append(name, 3n, [newEvent('WorkspaceUpdated')])).rejects.toBeInstanceOf(StreamVersionConflict);
    await expect(store().append(stream('never-created'), 1n, [newEvent('WorkspaceUpdated')])).rejects.toBeInstanceOf(StreamVersionConflict);

    const conflict = await store()
      .append(name, 5n, [newEvent('WorkspaceUpdated')])
      .catch((error: unknown) => error);
    expect(conflict).toMatchObject({ streamName: name, expectedVersion: 5n });
    expect((await store().readStream(name)).map((event) => event.version)).toEqual([1n, 2n]);
    expect(await store().readStream(stream('never-created'))).toEqual([]);
  });

  it('answers a retried append with the same event ids as the first time, without doubling it', async () => {
    const name = stream('retry');
    const batch = [newEvent('WorkspaceCreated'), newEvent('WorkspaceUpdated')];
    const first = await store().append(name, 0n, batch);
    expect(await store().append(name, 0n, batch)).toEqual(first);

    const next = [newEvent('WorkspaceUpdated')];
    const second = await store().append(name, 2n, next);
    // Also once the stream has moved on.
    expect(await store().append(name, 0n, batch)).toEqual(first);
    expect(await store().append(name, 2n, next)).toEqual(second);

    await expect(store().append(name, 0n, [batch[0]!, newEvent('WorkspaceUpdated')])).rejects.toBeInstanceOf(StreamVersionConflict);
    await expect(store().append(name, 0n, [newEvent('WorkspaceCreated'), newEvent('WorkspaceUpdated')])).rejects.toBeInstanceOf(
      StreamVersionConflict,
    );
    const events = await store().readStream(name);
    expect(events.map((event) => event.id)).toEqual([...batch, ...next].map((event) => event.id));
    expect(events.map((event) => event.version)).toEqual([1n, 2n, 3n]);
  });

  it('reads an unknown stream as empty', async () => {
    expect(await store().readStream(stream(`unknown-${randomUUID()}`))).toEqual([]);
    expect(await store().readStream(stream(`unknown-${randomUUID()}`), { direction: 'backwards', limit: 1 })).toEqual([]);
  });

  it('reads a range of a stream: from a version on, at most n events, or backwards from the last or a version', async () => {
    const name = stream('ranges');
    const appended = Array.from({ length: 7 }, (_, index) =>
      newEvent(index === 0 ? 'WorkspaceCreated' : 'WorkspaceUpdated', { n: index + 1 }),
    );
    await store().append(name, 0n, appended.slice(0, 4));
    await store().append(name, 4n, appended.slice(4));
    const versions = async (range: Parameters<EventStore['readStream']>[1]) =>
      (await store().readStream(name, range)).map((event) => Number(event.version));

    expect(await versions({ from: 3n })).toEqual([3, 4, 5, 6, 7]);
    expect(await versions({ from: 3n, limit: 2 })).toEqual([3, 4]);
    expect(await versions({ limit: 3 })).toEqual([1, 2, 3]);
    expect(await versions({ from: 7n })).toEqual([7]);
    expect(await versions({ from: 8n })).toEqual([]);
    expect(await versions({ from: 6n, limit: 10 })).toEqual([6, 7]);
    expect(await versions({ direction: 'backwards', limit: 1 })).toEqual([7]);
    expect(await versions({ direction: 'backwards', limit: 3 })).toEqual([7, 6, 5]);
    expect(await versions({ direction: 'backwards', from: 4n, limit: 2 })).toEqual([4, 3]);
    expect(await versions({ direction: 'backwards', from: 2n })).toEqual([2, 1]);
    expect(await versions({ from: 2n, limit: 0 })).toEqual([]);
    // A range holds the same events as the whole read: ids, data and positions alike.
    const whole = await store().readStream(name);
    expect(await store().readStream(name, { from: 5n, limit: 2 })).toEqual(whole.slice(4, 6));
    expect(await store().readStream(name, { direction: 'backwards', limit: 2 })).toEqual(whole.slice(5).reverse());
  });

  it('reports the global position of the last appended event, as readAll and readStream give it', async () => {
    // Commands wait until the projector, reading with readAll, has passed exactly this position.
    const after = await head();
    const name = stream('positions');
    const single = await store().append(name, 0n, [newEvent('WorkspaceCreated')]);
    const multiple = await store().append(name, 1n, [
      newEvent('WorkspaceUpdated'),
      newEvent('WorkspaceUpdated'),
      newEvent('WorkspaceUpdated'),
    ]);

    const all = await readAllOf(store(), after, new Set([name]), { expected: 4 });
    expect(all.map((event) => event.version)).toEqual([1n, 2n, 3n, 4n]);
    expect(all[0]!.position).toEqual(single.position);
    expect(all[3]!.position).toEqual(multiple.position);
    expect((await store().readStream(name)).map((event) => event.position)).toEqual(all.map((event) => event.position));
  });

  it("reads the log's last position and estimates how many events lie between two positions", async () => {
    const after = await head();
    const name = stream('backlog');
    let last: GlobalPosition = after;
    for (let version = 0n; version < 40n; version += 4n) {
      last = (
        await store().append(name, version, [
          newEvent('WorkspaceUpdated'),
          newEvent('WorkspaceUpdated'),
          newEvent('WorkspaceUpdated'),
          newEvent('WorkspaceUpdated'),
        ])
      ).position;
    }
    // At or past the last append: on a shared store, others may have appended since. On PostgreSQL
    // only once no transaction older than it still runs anywhere on the server (another test file's).
    await eventually(async () => {
      const end = await store().readLastPosition();
      return end !== undefined && comparePositions(end, last) >= 0;
    });
    // The estimate needs no read of the events, but may learn from reads made before it.
    await readAllOf(store(), after, new Set([name]), { expected: 40 });
    expect(store().estimateEventsBetween(last, last)).toBe(0);
    expect(store().estimateEventsBetween(last, after)).toBe(0);
    const estimate = store().estimateEventsBetween(after, last);
    expect(estimate).toBeGreaterThanOrEqual(20);
    expect(estimate).toBeLessThanOrEqual(80);

    // Reading again a stretch of the log already read (as a readiness probe reads the event at the
    // projection's checkpoint, over and over) teaches nothing new, however large its event.
    const large = await store().append(name, 40n, [newEvent('WorkspaceUpdated', { note: 'x'.repeat(64 * 1024) })]);
    const tail = await store().append(name, 41n, [newEvent('WorkspaceUpdated'), newEvent('WorkspaceUpdated')]);
    await readAllOf(store(), last, new Set([name]), { expected: 3 });
    const learnt = store().estimateEventsBetween(startOfLog, tail.position);
    for (let probe = 0; probe < 5; probe++) expect(await store().readAll(large.position, 1)).toHaveLength(1);
    expect(store().estimateEventsBetween(startOfLog, tail.position)).toBe(learnt);
  });

  it('reads all events after a stored position in global order, positions strictly increasing', async () => {
    const after = await head();
    const names = [stream('all-a'), stream('all-b'), solutionStream(`${run}-all-c`)];
    const appended: string[] = [];
    const versions = new Map<string, bigint>();
    for (let round = 0; round < 4; round++) {
      for (const name of names) {
        const events = [newEvent('Appended', { round, name })];
        await store().append(name, versions.get(name) ?? 0n, events);
        versions.set(name, (versions.get(name) ?? 0n) + 1n);
        appended.push(events[0]!.id);
      }
    }

    const streams = new Set(names);
    for (const pageSize of [1, 5, 1000]) {
      const all = await readAllOf(store(), after, streams, { pageSize, expected: appended.length });
      expect(all.map((event) => event.id)).toEqual(appended);
      expectStrictlyIncreasing(all);
      expect(all.every((event) => comparePositions(event.position, after) > 0)).toBe(true);
    }

    // From a position in the middle: exactly the events after it.
    const all = await readAllOf(store(), after, streams, { expected: appended.length });
    const middle = all[5]!.position;
    expect((await readAllOf(store(), middle, streams, { expected: appended.length - 6 })).map((event) => event.id)).toEqual(
      appended.slice(6),
    );
  });

  it('wakes a waiter when an event is appended after its position, and otherwise on timeout or abort', async () => {
    const after = await head();

    // Nothing appended: it resolves by the timeout (an early wake-up is allowed: "may be readable").
    const started = Date.now();
    await store().waitForEvents(after, 300, new AbortController().signal);
    expect(Date.now() - started).toBeLessThan(5000);

    const aborted = new AbortController();
    const waitingForAbort = store().waitForEvents(after, 30_000, aborted.signal);
    setTimeout(() => aborted.abort(), 50);
    await waitingForAbort;

    // As the projector does: wait, then read; an append must end this long before the 20 s timeout.
    const readable = (async () => {
      for (;;) {
        await store().waitForEvents(after, 20_000, new AbortController().signal);
        if ((await store().readAll(after, 1)).length > 0) return;
      }
    })();
    const appendedAt = Date.now();
    setTimeout(() => void store().append(stream(`wake-${randomUUID()}`), 0n, [newEvent('WorkspaceCreated')]), 100);
    await readable;
    expect(Date.now() - appendedAt).toBeLessThan(10_000);
  });

  // Each attempt reads its stream whole: about a thousand reads of up to 100 events, which through
  // the real EventStoreDB client (each event a gRPC message) take 30–40 s on the stand-in, more on a busy machine.
  it('keeps every stream gap-free and yields each event once under many concurrent writers', { timeout: 180_000 }, async () => {
    const after = await head();
    const names = Array.from({ length: 5 }, (_, index) => stream(`contended-${index}`));
    const writers = 20;
    const appendsPerWriter = 25;

    await Promise.all(
      Array.from({ length: writers }, async (_, writer) => {
        for (let index = 0; index < appendsPerWriter; index++) {
          const name = names[(writer + index) % names.length]!;
          const event = newEvent('Appended', { writer, index });
          for (let attempt = 1; ; attempt++) {
            const version = BigInt((await store().readStream(name)).length);
            try {
              await store().append(name, version, [event]);
              break;
            } catch (error) {
              if (!(error instanceof StreamVersionConflict) || attempt > 200) throw error;
              await new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(2 ** attempt, 50)));
            }
          }
        }
      }),
    );

    const seen = new Set<string>();
    let total = 0;
    for (const name of names) {
      const events = await store().readStream(name);
      total += events.length;
      expect(events.map((event) => event.version)).toEqual(events.map((_, index) => BigInt(index + 1)));
      for (const event of events) {
        const { writer, index } = event.data as { writer: number; index: number };
        seen.add(`${writer}:${index}`);
      }
    }
    expect(seen.size).toBe(writers * appendsPerWriter);
    expect(total).toBe(writers * appendsPerWriter);

    const all = await readAllOf(store(), after, new Set(names), { pageSize: 50, expected: writers * appendsPerWriter });
    expect(all).toHaveLength(writers * appendsPerWriter);
    expect(new Set(all.map((event) => event.id)).size).toBe(writers * appendsPerWriter);
    expectStrictlyIncreasing(all);
    // Per stream, global order agrees with stream order.
    for (const name of names) {
      const versions = all.filter((event) => event.streamName === name).map((event) => event.version);
      expect(versions).toEqual(versions.map((_, index) => BigInt(index + 1)));
    }
  });
}
