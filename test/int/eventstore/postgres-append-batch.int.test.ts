import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StreamVersionConflict } from '../../../src/eventstore/port.js';
import { startStack, type Stack } from '../../support/stack.js';

const event = (n: number) => ({ id: randomUUID(), type: 'Noted', data: { n }, metadata: {} });

describe('PostgreSQL event store under concurrent appends', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.close());

  it('sends appends that queue up as one call, and a refused one refuses only itself', async () => {
    await stack.store.append('batch-taken', 0n, [event(0)]);
    const outcomes = await Promise.allSettled(
      Array.from({ length: 40 }, (_, i) =>
        i === 17 ? stack.store.append('batch-taken', 0n, [event(i)]) : stack.store.append(`batch-${i}`, 0n, [event(i), event(i)]),
      ),
    );
    const refused = outcomes.flatMap((outcome, i) => (outcome.status === 'rejected' ? [[i, outcome.reason] as const] : []));
    expect(refused.map(([i]) => i)).toEqual([17]);
    expect(refused[0]![1]).toBeInstanceOf(StreamVersionConflict);

    const results = outcomes.flatMap((outcome) => (outcome.status === 'fulfilled' ? [outcome.value] : []));
    expect(results.every((result) => result.version === 2n)).toBe(true);
    // Appends that shared a call share its transaction: fewer transactions than appends.
    expect(new Set(results.map((result) => result.position.commit)).size).toBeLessThan(results.length);
    for (let i = 0; i < 40; i++) {
      if (i === 17) continue;
      const stream = await stack.store.readStream(`batch-${i}`);
      expect(stream.map((e) => [e.version, e.data])).toEqual([
        [1n, { n: i }],
        [2n, { n: i }],
      ]);
    }
  });
});
