import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createChangeFeed, type FeedProgress } from '../../../src/changes/adapters/feed.js';
import { decodeCursor } from '../../../src/changes/cursor.js';
import { changeTypes } from '../../../src/changes/feed.js';
import type { Pool } from '../../../src/infra/postgres.js';
import { RecordWriter, seededRandom } from '../../support/generate.js';
import { startStack, type Stack } from '../../support/stack.js';

/**
 * The open streams of one organization are all woken by the same batch at the same cursor
 * (src/changes/adapters/feed.ts): they share one read of the changes table, not one each.
 */
describe('long polls at one cursor', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.close());

  let statements = 0;
  /** The service's pool, counting the statements the feed sends through it. */
  const counted = () =>
    new Proxy(stack.pool, {
      get: (pool, name) =>
        name === 'query'
          ? (...args: Parameters<Pool['query']>) => {
              statements += 1;
              return (pool.query as (...a: unknown[]) => unknown)(...args);
            }
          : (Reflect.get(pool, name) as unknown),
    });

  it('read the changes once per position, and each gets every change, shown once for them all', async () => {
    statements = 0;
    const feed = createChangeFeed(counted(), stack.progress);
    stack.runner().start();
    const query = { organizations: ['org_shared'], workspaceId: undefined, types: [...changeTypes], limit: 100 };
    const after = stack.progress.current;
    const polls = Array.from({ length: 10 }, () => feed({ ...query, after }, 10_000));
    const writer = new RecordWriter('shared', 'org_shared', seededRandom(7));
    const next = writer.next();
    await stack.store.append(next.streamName, next.expectedVersion, next.events);
    const pages = await Promise.all(polls);
    expect(pages.map((page) => page.items.map((change) => change.type))).toEqual(Array(10).fill(['WorkspaceCreated']));
    // One read before the append and one after it; a poll of the checkpoint in between may add one.
    expect(statements).toBeLessThanOrEqual(3);
    // And the same Change, shown once for them all (each stream then writes the same event text).
    expect(new Set(pages.map((page) => page.items[0]))).toHaveProperty('size', 1);
  });

  it('following next from a page read to the end, wait for the projection to move before reading, not read the nothing there is first', async () => {
    const feed = createChangeFeed(counted(), stack.progress);
    stack.runner().start();
    const query = { organizations: ['org_following'], workspaceId: undefined, types: [...changeTypes], limit: 100 };
    let page = await feed({ ...query, after: stack.progress.current }, 0);
    statements = 0;
    const writer = new RecordWriter('following', 'org_following', seededRandom(11));
    for (let change = 0; change < 5; change++) {
      const poll = feed({ ...query, after: decodeCursor(page.next)! }, 10_000);
      const next = writer.next();
      await stack.store.append(next.streamName, next.expectedVersion, next.events);
      page = await poll;
      expect(page.items).toHaveLength(1);
    }
    // One read per change (a batch the projector splits, or a checkpoint's poll, may add one); reading first made it two.
    expect(statements).toBeLessThanOrEqual(7);
  });

  it('still reads before answering when the projection it knows of has not moved: a change another instance projected is in the page (contract §14)', async () => {
    stack.runner().start();
    // This instance has heard of no batch since its last page: its progress stays where it was.
    const frozen = stack.progress.current;
    const unmoved: FeedProgress = { current: frozen, waitPast: async (_, timeoutMs) => (await sleep(timeoutMs), false) };
    const feed = createChangeFeed(stack.pool, unmoved);
    const query = { organizations: ['org_elsewhere'], workspaceId: undefined, types: [...changeTypes], limit: 100 };
    const empty = await feed({ ...query, after: frozen }, 0);
    expect(empty.items).toEqual([]);
    const writer = new RecordWriter('elsewhere', 'org_elsewhere', seededRandom(13));
    const next = writer.next();
    const appended = await stack.store.append(next.streamName, next.expectedVersion, next.events);
    expect(await stack.progress.waitFor(appended.position, 10_000)).toBe(true);
    // Continuing from a page read to the end, it waits for a move it never hears of, then reads.
    const page = await feed({ ...query, after: decodeCursor(empty.next)! }, 200);
    expect(page.items.map((change) => change.type)).toEqual(['WorkspaceCreated']);
  });

  it('with types left out, continue past the changes of the other types read to the end, but never past the last of the caller’s organizations (contract §14)', async () => {
    stack.runner().start();
    const feed = createChangeFeed(stack.pool, stack.progress);
    const start = stack.progress.current;
    let lastType = '';
    const append = async (writer: RecordWriter) => {
      const next = writer.next();
      const { position } = await stack.store.append(next.streamName, next.expectedVersion, next.events);
      next.applied();
      lastType = next.events.at(-1)!.type;
      return position;
    };
    const mine = new RecordWriter('filtered', 'org_filtered', seededRandom(17));
    const positions = [];
    // Ending with a change of another type than the one asked for.
    while (positions.length < 8 || lastType === 'WorkspaceCreated') positions.push(await append(mine));
    // Another organization's later changes: the caller's cursor must show nothing of them.
    const others = new RecordWriter('unseen', 'org_unseen', seededRandom(19));
    let last = positions.at(-1)!;
    for (let change = 0; change < 3; change++) last = await append(others);
    expect(await stack.progress.waitFor(last, 10_000)).toBe(true);

    const query = { organizations: ['org_filtered'], workspaceId: undefined, types: ['WorkspaceCreated' as const], limit: 100 };
    const page = await feed({ ...query, after: start }, 0);
    expect(page.items.length).toBeGreaterThan(0);
    expect(new Set(page.items.map((change) => change.type))).toEqual(new Set(['WorkspaceCreated']));
    expect(page.items.at(-1)!.id).not.toBe(page.next);
    // Past the organization's last change, of another type, so that the next call does not read them again; not past it.
    expect(decodeCursor(page.next)).toEqual(positions.at(-1));
    const following = await feed({ ...query, after: decodeCursor(page.next)! }, 0);
    expect(following).toEqual({ items: [], next: page.next, has_more: false });
  });
});
