import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { latestSnapshotQuery, PostgresSnapshots, type RecordSnapshot, type SnapshotBound } from '../../../src/write/snapshots.js';
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

  it("reads only the latest few of a long record's snapshots, whatever the bound (a record's age costs nothing)", async () => {
    // A record of 200,000 events: 2,000 snapshots, one every 100 versions, 1 ms apart.
    const streamName = 'workspace-ws_snapshots_long';
    const snapshot = (index: number): RecordSnapshot => ({
      streamName,
      head: { version: BigInt(index * 100) },
      eventId: `event-${index}`,
      occurredAt: new Date(Date.UTC(2026, 0, 1) + index).toISOString().replace('Z', '000Z'),
      state: { index },
    });
    await snapshots.save(Array.from({ length: 2000 }, (_, index) => snapshot(index + 1)));
    const near = snapshot(1990);
    const bounds: [string, SnapshotBound][] = [
      ['none', {}],
      ['an instant', { until: near.occurredAt }],
      ['a version', { through: near.head.version }],
      ['both', { until: near.occurredAt, through: near.head.version }],
      ['below an unusable one', { until: near.occurredAt, below: near.head.version }],
    ];
    type PlanNode = { 'Actual Rows': number; 'Node Type': string; Plans?: PlanNode[] };
    const nodes = (node: PlanNode): PlanNode[] => [node, ...(node.Plans ?? []).flatMap(nodes)];
    // Before the table's statistics know of the rows (as right after a long record's first read), and after.
    for (const analyzed of [false, true]) {
      if (analyzed) await stack.pool.query('ANALYZE record_snapshots');
      for (const [name, bound] of bounds) {
        const query = latestSnapshotQuery(streamName, bound);
        const { rows } = await stack.pool.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
          `EXPLAIN (ANALYZE, FORMAT JSON) ${query.text}`,
          query.values,
        );
        const readMoreThanOne = nodes(rows[0]!['QUERY PLAN'][0].Plan)
          .filter((node) => node['Actual Rows'] > 1)
          .map((node) => `${node['Node Type']}: ${node['Actual Rows']} rows`);
        expect({ name, analyzed, readMoreThanOne }).toEqual({ name, analyzed, readMoreThanOne: [] });
      }
    }
    expect((await snapshots.latest(streamName))?.state).toEqual({ index: 2000 });
    expect((await snapshots.latest(streamName, near.occurredAt))?.state).toEqual({ index: 1990 });
    expect((await snapshots.latest(streamName, undefined, near.head.version + 50n))?.state).toEqual({ index: 1990 });
    expect((await snapshots.latest(streamName, snapshot(1500).occurredAt, near.head.version))?.state).toEqual({ index: 1500 });
  });

  it('never gives a snapshot after the instant, even when a corrupt one with a changed time leads the search', async () => {
    const streamName = 'workspace-ws_snapshots_moved';
    const snapshot = (version: number, occurredAt: string): RecordSnapshot => ({
      streamName,
      head: { version: BigInt(version) },
      eventId: `event-${version}`,
      occurredAt,
      state: { version },
    });
    await snapshots.save([
      snapshot(100, '2024-01-01T00:00:00.000000Z'),
      snapshot(200, '2024-02-01T00:00:00.000000Z'),
      snapshot(300, '2024-03-01T00:00:00.000000Z'),
    ]);
    // Its time moved back before the instant asked about: its checksum no longer holds.
    await stack.pool.query(
      `UPDATE record_snapshots SET occurred_at = '2024-01-15T00:00:00.000000Z' WHERE stream_name = $1 AND version = 300`,
      [streamName],
    );
    expect((await snapshots.latest(streamName, '2024-01-20T00:00:00.000000Z'))?.state).toEqual({ version: 100 });
  });
});
