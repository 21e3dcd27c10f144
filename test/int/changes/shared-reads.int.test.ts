import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createChangeFeed } from '../../../src/changes/adapters/feed.js';
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

  it('read the changes once per position, and each gets every change, shown once for them all', async () => {
    let statements = 0;
    // The service's pool, counting the statements the feed sends through it.
    const counted = new Proxy(stack.pool, {
      get: (pool, name) =>
        name === 'query'
          ? (...args: Parameters<Pool['query']>) => {
              statements += 1;
              return (pool.query as (...a: unknown[]) => unknown)(...args);
            }
          : (Reflect.get(pool, name) as unknown),
    });
    const feed = createChangeFeed(counted, stack.progress);
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
});
