import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresSnapshots, type RecordSnapshot } from '../../../src/write/snapshots.js';
import { silentLogger, startStack, type Stack } from '../../support/stack.js';

/** The snapshot table (src/write/snapshots.ts): which snapshot a load starts from. */
describe('record snapshots in PostgreSQL', () => {
  let stack: Stack;
  let snapshots: PostgresSnapshots;

  beforeAll(async () => {
    stack = await startStack();
    snapshots = new PostgresSnapshots(stack.pool, silentLogger);
  });
  afterAll(() => stack?.close());

  const at = (version: number): RecordSnapshot => ({
    streamName: 'workspace-ws_snapshots',
    head: { version: BigInt(version) },
    eventId: `event-${version}`,
    occurredAt: `2026-01-01T00:00:${String(version / 100).padStart(2, '0')}.000000Z`,
    state: { version },
  });

  it('gives the latest by version (1000 after 900, not as text), at or before an instant, and passes over a corrupt one', async () => {
    await snapshots.save([at(100), at(900), at(1000), at(1100)]);
    expect((await snapshots.latest('workspace-ws_snapshots'))?.head.version).toBe(1100n);
    expect((await snapshots.latest('workspace-ws_snapshots', at(1000).occurredAt))?.state).toEqual({ version: 1000 });
    expect(await snapshots.latest('workspace-ws_snapshots', '2025-12-31T23:59:59.000000Z')).toBeUndefined();

    await stack.pool.query(`UPDATE record_snapshots SET state = '{"version": 7}' WHERE version = 1100`);
    expect((await snapshots.latest('workspace-ws_snapshots'))?.head.version).toBe(1000n);
    // Saved again as it should be, it is repaired.
    await snapshots.save([at(1100)]);
    expect((await snapshots.latest('workspace-ws_snapshots'))?.state).toEqual({ version: 1100 });
  });
});
