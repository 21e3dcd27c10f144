import { describe, expect, it } from 'vitest';
import type { GlobalPosition } from '../../../src/eventstore/port.js';
import { CreationOrder } from '../../../src/write/creation-order.js';

const at = (commit: bigint): GlobalPosition => ({ commit, prepare: commit });

describe('CreationOrder', () => {
  it('given earlier creations that appended, answers the furthest of their positions', async () => {
    const order = new CreationOrder();
    order.track('2026-01-01T00:00:00.000001Z', Promise.resolve(at(5n)));
    order.track('2026-01-01T00:00:00.000002Z', Promise.resolve(at(9n)));
    order.track('2026-01-01T00:00:00.000009Z', Promise.resolve(at(20n)));
    expect(await order.earlierAppended('2026-01-01T00:00:00.000003Z', 1000)).toEqual(at(9n));
  });

  it('given an earlier creation whose append never ends, waits no longer than it is allowed and answers the others', async () => {
    const order = new CreationOrder();
    order.track('2026-01-01T00:00:00.000001Z', new Promise<GlobalPosition>(() => undefined));
    order.track('2026-01-01T00:00:00.000002Z', Promise.resolve(at(7n)));
    const started = Date.now();
    expect(await order.earlierAppended('2026-01-01T00:00:00.000003Z', 100)).toEqual(at(7n));
    expect(Date.now() - started).toBeLessThan(1000);
  });
});
