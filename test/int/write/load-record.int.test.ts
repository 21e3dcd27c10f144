import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { workspaceDecider } from '../../../src/domain/deciders.js';
import { workspaceStream } from '../../../src/eventstore/stream-names.js';
import { execute } from '../../../src/write/execute.js';
import { loadRecord } from '../../../src/write/load-record.js';
import { PostgresSnapshots } from '../../../src/write/snapshots.js';
import { eventually, silentLogger, startStack, type Stack } from '../../support/stack.js';

/** Loading a record as it was at a version (src/write/load-record.ts, `through`): what a keyed retry answers from. */
describe('a record loaded through a version', () => {
  let stack: Stack;
  let snapshots: PostgresSnapshots;
  const id = 'ws_through';
  const stream = workspaceStream(id);

  beforeAll(async () => {
    stack = await startStack();
    snapshots = new PostgresSnapshots(stack.pool, silentLogger);
    const context = (n: number) => ({
      actor: 'user-1',
      requestId: `request-${n}`,
      now: `2026-03-01T00:00:00.${String(n).padStart(6, '0')}Z`,
    });
    await execute(stack.store, stream, workspaceDecider, { requestId: 'request-0' }, () => ({
      type: 'CreateWorkspace' as const,
      id,
      organizationId: 'org_through',
      name: 'v1',
      context: context(0),
    }));
    for (let version = 2; version <= 250; version++) {
      await execute(
        stack.store,
        stream,
        workspaceDecider,
        { requestId: `request-${version}` },
        () => ({
          type: 'UpdateWorkspace' as const,
          id,
          name: `v${version}`,
          attributes: { [`at${version % 7}`]: version },
          context: context(version),
        }),
        { snapshots },
      );
    }
    await eventually(async () => (await snapshots.latest(stream))?.head.version === 200n);
  });
  afterAll(() => stack?.close());

  it('is the fold of its first events, whether it starts from a snapshot at or before that version or from the first event', async () => {
    for (const through of [1, 99, 100, 101, 199, 200, 201, 250, 400]) {
      const fromSnapshot = await loadRecord(stack.store, stream, workspaceDecider, { snapshots, through: BigInt(through) });
      const folded = await loadRecord(stack.store, stream, workspaceDecider, { through: BigInt(through) });
      expect(fromSnapshot).toEqual(folded);
      expect(fromSnapshot.head.version).toBe(BigInt(Math.min(through, 250)));
      expect(fromSnapshot.state.status === 'active' && fromSnapshot.state.workspace.name).toBe(`v${Math.min(through, 250)}`);
    }
  });
});
