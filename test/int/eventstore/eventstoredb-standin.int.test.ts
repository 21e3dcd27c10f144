import {
  BACKWARDS,
  END,
  EventStoreDBClient,
  jsonEvent,
  NO_STREAM,
  NotLeaderError,
  START,
  StreamNotFoundError,
  streamNameFilter,
  WrongExpectedVersionError,
  type Position,
} from '@eventstore/db-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventStoreDBStandIn } from '../../support/eventstoredb-standin/index.js';

/**
 * The stand-in as the unmodified client library sees it: each behaviour the adapter relies on,
 * as KurrentDB's source has it (the stand-in's files cite where). A regression here means the
 * stand-in no longer answers as the real server does.
 */
describe('EventStoreDB stand-in, seen through @eventstore/db-client', () => {
  let standIn: EventStoreDBStandIn;
  let client: EventStoreDBClient;
  const event = (type: string, n: number) => jsonEvent({ type, data: { n } });

  beforeAll(async () => {
    standIn = await EventStoreDBStandIn.start();
    client = EventStoreDBClient.connectionString(standIn.url);
  });
  afterAll(async () => {
    await client.dispose();
    await standIn.stop();
  });

  async function readAll(options: Parameters<EventStoreDBClient['readAll']>[0]): Promise<Position[]> {
    const positions: Position[] = [];
    for await (const resolved of client.readAll(options)) positions.push(resolved.event!.position!);
    return positions;
  }

  it('answers an append with the position of its last event as both commit and prepare, as stream reads give it', async () => {
    const result = await client.appendToStream('standin-positions', [event('A', 1), event('A', 2), event('A', 3)], {
      expectedRevision: NO_STREAM,
    });
    const stored = [];
    for await (const resolved of client.readStream('standin-positions')) stored.push(resolved.event!);
    expect(stored.map((recorded) => recorded.revision)).toEqual([0n, 1n, 2n]);
    for (const recorded of stored) expect(recorded.position!.commit).toBe(recorded.position!.prepare);
    expect(result.position).toEqual(stored[2]!.position);
    expect(result.nextExpectedRevision).toBe(2n);
    // Byte offsets in the log, not counters.
    expect(stored[1]!.position!.commit - stored[0]!.position!.commit).toBeGreaterThan(1n);
  });

  it('reads $all forwards from a position inclusively and backwards from it exclusively, without $epoch-information', async () => {
    const all = await readAll({ fromPosition: START });
    expect(all.length).toBeGreaterThanOrEqual(3);
    const [, second] = all;
    expect((await readAll({ fromPosition: second!, maxCount: 1 }))[0]).toEqual(second);
    expect((await readAll({ fromPosition: second!, direction: BACKWARDS, maxCount: 1 }))[0]).toEqual(all[0]);
    expect((await readAll({ fromPosition: END, direction: BACKWARDS, maxCount: 1 }))[0]).toEqual(all.at(-1));
    const streams: string[] = [];
    for await (const resolved of client.readAll()) streams.push(resolved.event!.streamId);
    expect(streams).not.toContain('$epoch-information');
  });

  it('refuses a wrong expected revision as the real server does, on BatchAppend and on Append', async () => {
    for (const batchAppend of [true, false]) {
      const node = await EventStoreDBStandIn.start({ batchAppend });
      const other = EventStoreDBClient.connectionString(node.url);
      try {
        await other.appendToStream('standin-wev', event('A', 1), { expectedRevision: NO_STREAM });
        const refused = await other.appendToStream('standin-wev', event('A', 2), { expectedRevision: NO_STREAM }).catch((error) => error);
        expect(refused).toBeInstanceOf(WrongExpectedVersionError);
        expect(refused).toMatchObject({ streamName: 'standin-wev', expectedVersion: 'no_stream', actualVersion: 0n });
      } finally {
        await other.dispose();
        await node.stop();
      }
    }
  });

  it('answers a repeat of the same event ids at the same expected revision as the first write, without writing again', async () => {
    const events = [event('B', 1), event('B', 2)];
    const first = await client.appendToStream('standin-repeat', events, { expectedRevision: NO_STREAM });
    const again = await client.appendToStream('standin-repeat', events, { expectedRevision: NO_STREAM });
    expect(again).toEqual(first);
    expect(standIn.log.stream('standin-repeat')).toHaveLength(2);
  });

  it('reports an unknown stream as StreamNotFound', async () => {
    const read = async () => {
      for await (const _ of client.readStream('standin-missing')) return;
    };
    await expect(read()).rejects.toBeInstanceOf(StreamNotFoundError);
  });

  it('names the leader in a NotLeader answer', async () => {
    const follower = await EventStoreDBStandIn.start();
    follower.faults.inject('read-stream', { kind: 'not-leader', leader: { host: '127.0.0.1', port: 2113 } }, 1);
    const other = EventStoreDBClient.connectionString(follower.url);
    try {
      const read = async () => {
        for await (const _ of other.readStream('standin-any', { requiresLeader: true })) return;
      };
      const refused = await read().catch((error) => error);
      expect(refused).toBeInstanceOf(NotLeaderError);
      expect(refused.leader).toEqual({ address: '127.0.0.1', port: 2113 });
    } finally {
      await other.dispose();
      await follower.stop();
    }
  });

  it('subscribes to $all exclusively of its start: confirmation, matching events, a checkpoint, caught up, then live events', async () => {
    const start = (await readAll({ fromPosition: END, direction: BACKWARDS, maxCount: 1 }))[0]!;
    await client.appendToStream('other-stream', event('C', 1));
    const subscription = client.subscribeToAll({
      fromPosition: start,
      filter: streamNameFilter({
        prefixes: ['standin-live'],
        checkpointReached: (_, position) => void seen.push(`checkpoint ${position.commit}`),
      }),
    });
    const seen: string[] = [];
    subscription.on('confirmation', () => seen.push('confirmation'));
    subscription.on('caughtUp', () => {
      seen.push('caught up');
      void client.appendToStream('standin-live-1', event('D', 1));
    });
    for await (const resolved of subscription) {
      seen.push(resolved.event!.streamId);
      break;
    }
    await subscription.unsubscribe();
    expect(seen[0]).toBe('confirmation');
    expect(seen[1]).toMatch(/^checkpoint \d+$/);
    expect(seen.slice(2)).toEqual(['caught up', 'standin-live-1']);
  });
});
