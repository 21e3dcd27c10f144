import { randomUUID } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import { pino } from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { EventStoreDBEventStore, type EventStoreDBOptions } from '../../../src/eventstore/eventstoredb.js';
import {
  EventStoreNotReached,
  EventStoreRefused,
  EventStoreUnavailable,
  StreamVersionConflict,
  startOfLog,
  type NewEvent,
} from '../../../src/eventstore/port.js';
import { freePort } from '../../../src/infra/embedded-postgres.js';
import { EventStoreDBStandIn } from '../../support/eventstoredb-standin/index.js';
import { RecordWriter, seededRandom } from '../../support/generate.js';
import { eventually, startStack, type Stack } from '../../support/stack.js';

/**
 * The adapter's failure behaviour (docs/production.md, "Failure behaviour"), each case produced by
 * the wire-level stand-in or a socket, with the real client library in between.
 */
const logger = pino({ level: 'silent' });
const bound = { commandTimeoutMs: 1000, readTimeoutMs: 1000 } satisfies EventStoreDBOptions;
/** The adapter's bound plus its own timer's grace and room for a busy machine. */
const withinBound = 1000 + 250 + 1500;

const newEvent = (type = 'WorkspaceCreated'): NewEvent => ({ id: randomUUID(), type, data: { n: 1 }, metadata: { actor: 'user-1' } });

async function expectUnavailableWithinBound(call: () => Promise<unknown>): Promise<void> {
  const started = Date.now();
  await expect(call()).rejects.toBeInstanceOf(EventStoreUnavailable);
  expect(Date.now() - started).toBeLessThan(withinBound);
}

describe('EventStoreDB adapter under faults (wire-level stand-in)', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  async function standInAndStore(options: EventStoreDBOptions = bound) {
    const standIn = await EventStoreDBStandIn.start();
    const store = new EventStoreDBEventStore(standIn.url, { logger, ...options });
    cleanups.push(
      () => standIn.stop(),
      () => store.close(),
    );
    return { standIn, store };
  }

  it('a node that stops (connections refused) fails every call promptly, and the same adapter recovers when it is back', async () => {
    const { standIn, store } = await standInAndStore();
    await store.append('workspace-restart', 0n, [newEvent()]);

    await standIn.stop();
    await expectUnavailableWithinBound(() => store.append('workspace-restart', 1n, [newEvent('WorkspaceUpdated')]));
    // Refused: the append never left, so its outcome is known (contract §11), as the command's 503 then says.
    await expect(store.append('workspace-restart', 1n, [newEvent('WorkspaceUpdated')])).rejects.toBeInstanceOf(EventStoreNotReached);
    // Unless another append was waiting beside it: the client fails every waiting append when one
    // stream fails, so a refusal may be another's, and each is only unavailable.
    const together = await Promise.all(
      ['workspace-restart', 'workspace-beside'].map((stream) =>
        store.append(stream, stream === 'workspace-restart' ? 1n : 0n, [newEvent()]).catch((error: unknown) => error),
      ),
    );
    for (const failure of together) {
      expect(failure).toBeInstanceOf(EventStoreUnavailable);
      expect(failure).not.toBeInstanceOf(EventStoreNotReached);
    }
    await expectUnavailableWithinBound(() => store.readStream('workspace-restart'));
    await expectUnavailableWithinBound(() => store.readAll(startOfLog, 10));
    await expectUnavailableWithinBound(() => store.ping());

    await standIn.restart();
    await eventually(
      async () =>
        store.ping().then(
          () => true,
          () => false,
        ),
      10_000,
    );
    const appended = await store.append('workspace-restart', 1n, [newEvent('WorkspaceUpdated')]);
    expect(appended.version).toBe(2n);
    expect((await store.readStream('workspace-restart')).map((event) => event.version)).toEqual([1n, 2n]);
  });

  it.each([
    ['UNAVAILABLE', { kind: 'unavailable' }],
    ['a batch the node is not ready for', { kind: 'not-ready' }],
  ] as const)('an append answered with %s is unavailable, stores nothing, and the next one succeeds', async (_, fault) => {
    const { standIn, store } = await standInAndStore();
    standIn.faults.inject('append', fault, 1);
    await expectUnavailableWithinBound(() => store.append('workspace-unavailable', 0n, [newEvent()]));
    expect(standIn.log.stream('workspace-unavailable')).toBeUndefined();
    expect((await store.append('workspace-unavailable', 0n, [newEvent()])).version).toBe(1n);
  });

  it('reads answered UNAVAILABLE are unavailable, and the next ones succeed', async () => {
    const { standIn, store } = await standInAndStore();
    await store.append('workspace-reads', 0n, [newEvent()]);
    standIn.faults.inject(['read-stream', 'read-all'], { kind: 'unavailable' }, 2);
    await expectUnavailableWithinBound(() => store.readStream('workspace-reads'));
    await expectUnavailableWithinBound(() => store.readAll(startOfLog, 10));
    expect(await store.readStream('workspace-reads')).toHaveLength(1);
    expect(await store.readAll(startOfLog, 10)).toHaveLength(1);
  });

  it('a follower answers NotLeader with the leader hint: that call is unavailable, the client reconnects to the leader, and the next calls land there', async () => {
    const leader = await EventStoreDBStandIn.start();
    const follower = await EventStoreDBStandIn.start();
    cleanups.push(
      () => leader.stop(),
      () => follower.stop(),
    );
    follower.faults.inject(['append', 'read-stream'], { kind: 'not-leader', leader: { host: '127.0.0.1', port: leader.port } });
    const store = new EventStoreDBEventStore(follower.url, { logger, ...bound });
    cleanups.push(() => store.close());

    await expectUnavailableWithinBound(() => store.append('workspace-election', 0n, [newEvent()]));
    const appended = await store.append('workspace-election', 0n, [newEvent()]);
    expect(appended.version).toBe(1n);
    expect(leader.log.stream('workspace-election')).toHaveLength(1);
    expect(follower.log.stream('workspace-election')).toBeUndefined();
    // Stream reads require the leader: a command never decides on a follower's older copy.
    expect(await store.readStream('workspace-election')).toHaveLength(1);
  });

  it.each([
    ['append', (store: EventStoreDBEventStore) => store.append('workspace-silent', 1n, [newEvent('WorkspaceUpdated')])],
    ['read-stream', (store: EventStoreDBEventStore) => store.readStream('workspace-silent')],
    ['read-all', (store: EventStoreDBEventStore) => store.readAll(startOfLog, 10)],
  ] as const)('a %s call that is never answered, past any deadline, fails within the adapter’s bound', async (kind, call) => {
    const { standIn, store } = await standInAndStore();
    await store.append('workspace-silent', 0n, [newEvent()]);
    standIn.faults.inject(kind, { kind: 'no-answer' }, 1);
    await expectUnavailableWithinBound(() => call(store));
    // The fault was used up: the store answers again on the same adapter.
    await expect(call(store)).resolves.toBeDefined();
  });

  it('an append whose answer is lost after it was stored is unavailable; the same append again answers as the first did, and nothing is doubled', async () => {
    const { standIn, store } = await standInAndStore();
    await store.append('workspace-lost', 0n, [newEvent()]);
    const events = [newEvent('WorkspaceUpdated'), newEvent('WorkspaceUpdated')];
    standIn.faults.inject('append', { kind: 'lose-answer' }, 1);

    // Sent and stored, the answer lost: unavailable, and not "not reached", whose outcome would be known.
    const lost = await store.append('workspace-lost', 1n, events).catch((error: unknown) => error);
    expect(lost).toBeInstanceOf(EventStoreUnavailable);
    expect(lost).not.toBeInstanceOf(EventStoreNotReached);
    expect(standIn.log.stream('workspace-lost')).toHaveLength(3);

    const retried = await store.append('workspace-lost', 1n, events);
    const stored = await store.readStream('workspace-lost');
    expect(stored.map((event) => event.id)).toEqual([expect.any(String), events[0]!.id, events[1]!.id]);
    expect(retried).toEqual({ version: 3n, position: stored[2]!.position });
    expect((await store.readAll(startOfLog, 100)).filter((event) => event.streamName === 'workspace-lost')).toHaveLength(3);
  });

  it('makes one round trip per append: a first write, a recognised repeat and a conflict each cost one call and no read', async () => {
    const { standIn, store } = await standInAndStore();
    const calls = () => ({ ...standIn.calls });
    const costOf = async (append: () => Promise<unknown>) => {
      const before = calls();
      await append().catch(() => undefined);
      const after = calls();
      return {
        append: after.append - before.append,
        reads: after['read-stream'] - before['read-stream'] + after['read-all'] - before['read-all'],
      };
    };
    const events = [newEvent(), newEvent('WorkspaceUpdated')];
    expect(await costOf(() => store.append('workspace-trips', 0n, events))).toEqual({ append: 1, reads: 0 });
    expect(await costOf(() => store.append('workspace-trips', 0n, events))).toEqual({ append: 1, reads: 0 });
    expect(await costOf(() => store.append('workspace-trips', 0n, [newEvent()]))).toEqual({ append: 1, reads: 0 });
    await expect(store.append('workspace-trips', 0n, [newEvent()])).rejects.toBeInstanceOf(StreamVersionConflict);
  });

  it('reads UNKNOWN as an outage only for an election without a leader; any other UNKNOWN is a refused request', async () => {
    const { standIn, store } = await standInAndStore();
    standIn.faults.inject('append', { kind: 'unknown', details: 'No leader info available in response' }, 1);
    await expectUnavailableWithinBound(() => store.append('workspace-unknown', 0n, [newEvent()]));
    standIn.faults.inject('append', { kind: 'unknown', details: 'Unexpected OperationResult: InvalidTransaction' }, 1);
    await expect(store.append('workspace-unknown', 0n, [newEvent()])).rejects.toBeInstanceOf(EventStoreRefused);
    // A read of $all from a position that is no record's, as KurrentDB answers it.
    await expect(store.readAll({ commit: 5n, prepare: 5n }, 10)).rejects.toBeInstanceOf(EventStoreRefused);
    expect((await store.append('workspace-unknown', 0n, [newEvent()])).version).toBe(1n);
  });

  describe('the projector while its subscription keeps being dropped', () => {
    let stack: Stack | undefined;
    afterAll(() => stack?.close());

    it('loses and doubles nothing: the subscription only wakes it, and it reads from its own checkpoint', async () => {
      const standIn = await EventStoreDBStandIn.start();
      cleanups.push(() => standIn.stop());
      stack = await startStack(undefined, { eventStoreUrl: standIn.url });
      stack.runner({ batchSize: 7 }).start();
      const writer = new RecordWriter('dropped', 'org_drop', seededRandom(5));
      let drops = 0;
      for (let round = 0; round < 6; round++) {
        for (let i = 0; i < 20; i++) {
          const append = writer.next();
          await stack.store.append(append.streamName, append.expectedVersion, append.events);
          append.applied();
        }
        // Once the projector has caught up and waits on a subscription, the node drops it mid-stream.
        await eventually(() => standIn.subscriptions > 0, 20_000);
        standIn.dropSubscriptions();
        drops += 1;
      }
      const last = (await stack.store.readAll(startOfLog, 10_000)).at(-1)!.position;
      await eventually(() => stack!.progress.waitFor(last, 100), 30_000);
      expect(drops).toBe(6);
      expect(standIn.calls.subscribe).toBeGreaterThanOrEqual(6);
      expect(await stack.differences()).toEqual([]);
    });
  });
});

describe('EventStoreDB adapter when EventStoreDB cannot be reached at all', () => {
  /** A TCP server that accepts connections and never says anything: the case a deadline alone does not cover. */
  const silent: { server?: Server; sockets: Set<Socket> } = { sockets: new Set() };
  async function silentNode(): Promise<string> {
    const server = createServer((socket) => {
      silent.sockets.add(socket);
      socket.on('error', () => undefined);
    });
    silent.server = server;
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return `esdb://127.0.0.1:${(server.address() as { port: number }).port}?tls=false`;
  }
  afterAll(async () => {
    for (const socket of silent.sockets) socket.destroy();
    await new Promise((resolve) => (silent.server ? silent.server.close(resolve) : resolve(undefined)));
  });

  it.each([
    ['a single node that refuses connections', async () => `esdb://127.0.0.1:${await freePort()}?tls=false`],
    [
      'a cluster whose nodes all refuse connections',
      async () => `esdb://127.0.0.1:${await freePort()},127.0.0.1:${await freePort()}?tls=false`,
    ],
    ['a node that accepts connections and never answers', silentNode],
  ])('%s: every call fails promptly with EventStoreUnavailable, and waiting falls back to polling', async (_, url) => {
    // Constructing connects to nothing: the service starts without EventStoreDB.
    const store = new EventStoreDBEventStore(await url(), { logger, commandTimeoutMs: 2000, readTimeoutMs: 2000 });
    try {
      for (const call of [
        () => store.ping(),
        () => store.append('workspace-unreachable', 0n, [newEvent()]),
        () => store.readStream('workspace-unreachable'),
        () => store.readAll(startOfLog, 10),
      ]) {
        const started = Date.now();
        await expect(call()).rejects.toBeInstanceOf(EventStoreUnavailable);
        // The 2 s bound plus the timer's grace and room for a busy machine: a hang would take far longer.
        expect(Date.now() - started).toBeLessThan(2000 + 250 + 1500);
      }
      const started = Date.now();
      await store.waitForEvents(startOfLog, 300, new AbortController().signal);
      await store.waitForEvents(startOfLog, 300, new AbortController().signal);
      expect(Date.now() - started).toBeLessThan(3000);
    } finally {
      await store.close();
    }
  });
});
