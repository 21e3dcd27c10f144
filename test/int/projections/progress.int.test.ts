import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RecordWriter, seededRandom } from '../../support/generate.js';
import { startStack, type Stack } from '../../support/stack.js';

/**
 * The rate the projection moves at, as this instance sees it, decides whether a command may give
 * up its wait at once (src/projections/progress.ts). Caught up, that rate is only the rate events
 * arrive at: it must never make an ordinary lag look out of reach.
 */
describe('a command behind a small lag', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.close());

  it('given a projection that has only seen a trickle of events, is waited for, not given up', async () => {
    stack.runner().start();
    const writer = new RecordWriter('trickle', 'org_trickle', seededRandom(5));
    const append = async () => {
      const next = writer.next();
      const { position } = await stack.store.append(next.streamName, next.expectedVersion, next.events);
      next.applied();
      return position;
    };
    for (let event = 0; event < 4; event++) {
      expect(await stack.progress.waitFor(await append(), 5000)).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
    // A few events a second so far: at that rate, one more event looks a third of a second away.
    const position = await append();
    expect(stack.progress.outOfReach(position, 100)).toBe(false);
    expect(stack.progress.stalled).toBe(false);
    expect(await stack.progress.waitFor(position, 5000)).toBe(true);
  });
});
