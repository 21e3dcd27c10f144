import { generateKeyPairSync } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startOfLog } from '../../../src/eventstore/port.js';
import { signingKeyFromPem } from '../../../src/integrity/checkpoints.js';
import { readTreeProgress } from '../../../src/integrity/adapters/tables.js';
import { TreeKeeper } from '../../../src/integrity/adapters/tree-keeper.js';
import { RecordWriter, seededRandom } from '../../support/generate.js';
import { eventually, silentLogger, startStack, type Stack } from '../../support/stack.js';

const sleep = (milliseconds: number) => new Promise((resolve) => setTimeout(resolve, milliseconds));

/** The integrity tree's keeper leaves the log alone while told to (the projection catching up a backlog), and follows after. */
describe('integrity tree keeper deferring to the projection', () => {
  let stack: Stack;
  let keeper: TreeKeeper | undefined;

  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(async () => {
    await keeper?.stop();
    await stack?.close();
  });

  /** A keeper on the stack that asks `deferWhile` before each round, and idles 20 ms. */
  const keeperDeferringWhile = (deferWhile: () => Promise<boolean>, onRoundFailed?: () => void) => {
    const { privateKey } = generateKeyPairSync('ed25519');
    return new TreeKeeper({
      pool: stack.pool,
      store: stack.store,
      key: signingKeyFromPem(privateKey.export({ format: 'pem', type: 'pkcs8' }).toString()),
      now: () => new Date().toISOString(),
      before: (timestamp) => timestamp,
      logger: silentLogger,
      checkpointIntervalMs: 0,
      idleMs: 20,
      deferWhile,
      onRoundFailed,
    });
  };

  it('reads nothing while deferring, then the whole log once it may', async () => {
    const writer = new RecordWriter('keeper', 'org_keeper', seededRandom(7));
    for (let index = 0; index < 20; index++) {
      const append = writer.next();
      await stack.store.append(append.streamName, append.expectedVersion, append.events);
      append.applied();
    }
    const end = (await stack.store.readLastPosition())!;

    let deferring = true;
    let asked = 0;
    keeper = keeperDeferringWhile(async () => {
      asked += 1;
      return deferring;
    });
    keeper.start();

    await eventually(() => asked >= 5);
    await sleep(100);
    expect(await readTreeProgress(stack.pool)).toEqual(startOfLog);

    deferring = false;
    await eventually(async () => (await readTreeProgress(stack.pool)).prepare === end.prepare);
    expect(await readTreeProgress(stack.pool)).toEqual(end);
  });

  it('backs off while it cannot advance, and goes on once it can', async () => {
    await keeper?.stop();
    let failing = true;
    let attempts = 0;
    let failedRounds = 0;
    keeper = keeperDeferringWhile(
      async () => {
        attempts += 1;
        if (failing) throw new Error('the event store cannot be reached');
        return false;
      },
      () => (failedRounds += 1),
    );
    keeper.start();
    await sleep(1_500);
    // Every 20 ms that would be 75 tries; doubling from 40 ms, 5 or 6.
    expect(attempts).toBeGreaterThanOrEqual(2);
    expect(attempts).toBeLessThanOrEqual(10);
    // Each failed round is told (the service counts them in wsapi_integrity_tree_failures_total).
    expect(failedRounds).toBe(attempts);
    failing = false;
    const writer = new RecordWriter('keeper-after', 'org_keeper', seededRandom(8));
    const append = writer.next();
    await stack.store.append(append.streamName, append.expectedVersion, append.events);
    const end = (await stack.store.readLastPosition())!;
    await eventually(async () => (await readTreeProgress(stack.pool)).prepare === end.prepare, 15_000);
  });
});
