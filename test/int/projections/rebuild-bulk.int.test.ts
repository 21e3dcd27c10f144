import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { comparePositions, type EventStore, type GlobalPosition } from '../../../src/eventstore/port.js';
import { solutionStream, workspaceStream } from '../../../src/eventstore/stream-names.js';
import { recordDeadLetter, resolveDeadLetter, skippedPositions } from '../../../src/projections/dead-letters.js';
import { rebuildReadModel } from '../../../src/projections/rebuild/index.js';
import { readCheckpoint } from '../../../src/projections/tables.js';
import { actualReadModel, compareReadModels, expectedReadModel } from '../../../src/projections/verify.js';
import { writeRawEvent } from '../../support/foreign-writes.js';
import { RecordWriter, seededRandom } from '../../support/generate.js';
import { silentLogger, startStack, type Stack } from '../../support/stack.js';
import { at, metadata, solutionCreated, workspaceCreated, workspaceDeleted } from '../../unit/fixtures.js';
import { rebuildSchemasLeft } from './rebuild-support.js';

/**
 * The rebuild's bulk load (src/projections/rebuild/bulk.ts), which the PostgreSQL store's
 * stream-ordered read enables: its result must be the projector's fold, whatever crosses records.
 */

async function appendMany(stack: Stack, writer: RecordWriter, count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    const append = writer.next();
    await stack.store.append(append.streamName, append.expectedVersion, append.events);
    append.applied();
  }
}

/** How many events the log holds and where its last one is, as the table says. */
async function logHead(stack: Stack): Promise<{ events: number; position: GlobalPosition }> {
  const { rows } = await stack.pool.query<{ events: string; commit: string; prepare: string }>(
    `SELECT (SELECT count(*) FROM es_events) AS events, transaction_id::text AS commit, position AS prepare
     FROM es_events ORDER BY transaction_id DESC, position DESC LIMIT 1`,
  );
  const head = rows[0]!;
  return { events: Number(head.events), position: { commit: BigInt(head.commit), prepare: BigInt(head.prepare) } };
}

/** The rebuild read every event once and got to the end of the log. */
async function expectWholeLog(stack: Stack, result: { events: number; position: GlobalPosition }): Promise<void> {
  const head = await logHead(stack);
  expect(result.events).toBe(head.events);
  expect(comparePositions(result.position, head.position)).toBe(0);
}

async function cascadePending(stack: Stack): Promise<Map<string, string>> {
  const { rows } = await stack.pool.query<{ solution_id: string; workspace_id: string }>(
    'SELECT solution_id, workspace_id FROM cascade_pending WHERE done_at IS NULL',
  );
  return new Map(rows.map((row) => [row.solution_id, row.workspace_id]));
}

/**
 * The read tables' indexes and key constraints, as definitions: the bulk load drops them, keys
 * included, and makes them again after it.
 */
async function keysAndIndexes(stack: Stack): Promise<string[]> {
  const { rows } = await stack.pool.query<{ definition: string }>(
    `SELECT indexdef AS definition FROM pg_indexes WHERE schemaname = 'public' AND tablename IN ('workspaces', 'solutions', 'changes')
     UNION ALL
     SELECT conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
     WHERE connamespace = 'public'::regnamespace AND conrelid::regclass::text IN ('workspaces', 'solutions', 'changes')
     ORDER BY 1`,
  );
  return rows.map((row) => row.definition);
}

const newEvent = (event: { type: string; data: unknown; metadata: unknown }) => ({ id: randomUUID(), ...event });

describe('the bulk load of a rebuild on the PostgreSQL store', () => {
  let stack: Stack;
  afterEach(() => stack?.close());
  /** A fresh stack with `appends` generated appends of a writer named `name`, which goes on writing. */
  const startWith = async (name: string, seed: number, appends: number) => {
    stack = await startStack();
    const writer = new RecordWriter(name, `org_${name}`, seededRandom(seed));
    await appendMany(stack, writer, appends);
    return writer;
  };

  it('equals the fold of a generated history, with solutions created after their workspace was deleted and cascades still to do', async () => {
    // RecordWriter deletes workspaces without their solutions' own deletions: cascades still to do.
    await startWith('bulk_a', 31, 300);
    await appendMany(stack, new RecordWriter('bulk_b', 'org_bulk_b', seededRandom(32)), 300);

    // A creation that lands after its workspace's deletion (a race the deciders allow): never shown, a cascade to do.
    const late = { id: 'sol_late', workspace_id: 'ws_gone', organization_id: 'org_bulk_a' };
    await stack.store.append(workspaceStream('ws_gone'), 0n, [
      newEvent(workspaceCreated(at('09:00:00.000000'), { id: 'ws_gone', organization_id: 'org_bulk_a' })),
    ]);
    await stack.store.append(workspaceStream('ws_gone'), 1n, [
      newEvent(workspaceDeleted(at('09:00:01.000000'), { id: 'ws_gone', organization_id: 'org_bulk_a' })),
    ]);
    await stack.store.append(solutionStream(late.id), 0n, [newEvent(solutionCreated(at('09:00:02.000000'), late))]);

    const expectedCascades = await stillToCascade(stack);
    expect(expectedCascades.get(late.id)).toBe('ws_gone');
    expect(expectedCascades.size).toBeGreaterThan(3);
    const keysAndIndexesBefore = await keysAndIndexes(stack);
    expect(keysAndIndexesBefore.filter((definition) => definition.includes('PRIMARY KEY'))).toHaveLength(3);

    const result = await rebuildReadModel({ connectionString: stack.url, store: stack.store, logger: silentLogger, batchSize: 64 });

    expect(result.bulk).toBe(true);
    expect(await keysAndIndexes(stack)).toEqual(keysAndIndexesBefore);
    expect(await stack.differences()).toEqual([]);
    await expectWholeLog(stack, result);
    expect(comparePositions(await readCheckpoint(stack.pool), result.position)).toBe(0);
    expect(await cascadePending(stack)).toEqual(expectedCascades);
    expect(result.pendingCascades).toBe(expectedCascades.size);
    expect((await stack.pool.query(`SELECT 1 FROM solutions WHERE id = 'sol_late'`)).rowCount).toBe(0);
    expect(await rebuildSchemasLeft(stack.pool)).toEqual([]);
  });

  it('leaves out foreign events and the events operators skipped, and stops at an unreadable one nobody skipped', async () => {
    const writer = await startWith('bulk_dl', 41, 60);
    // Another program's event in a service stream: left out.
    await writeRawEvent(stack.url, workspaceStream('ws_foreign'), { type: 'WorkspaceCreated', data: { id: 'ws_foreign' } });
    // One of the service's own this version cannot read, which an operator skipped.
    await writeRawEvent(stack.url, workspaceStream('ws_broken'), {
      type: 'WorkspaceCreated',
      data: { id: 'ws_broken', name: 7 },
      metadata: metadata(at('10:00:00.000000')),
    });
    const [broken] = await stack.store.readStream(workspaceStream('ws_broken'));
    const deadLetter = await recordDeadLetter(stack.pool, { ...broken!, type: broken!.type }, 'data.organization_id is missing');
    await resolveDeadLetter(stack.pool, deadLetter.deadLetterId, { action: 'skip', by: 'ops', note: undefined });
    await appendMany(stack, writer, 60);

    const result = await rebuildReadModel({ connectionString: stack.url, store: stack.store, logger: silentLogger });
    expect(result.bulk).toBe(true);
    await expectWholeLog(stack, result);
    const skipped = await skippedPositions(stack.pool);
    expect(compareReadModels(await expectedReadModel(stack.store, undefined, skipped), await actualReadModel(stack.pool))).toEqual([]);
    expect((await stack.pool.query(`SELECT 1 FROM workspaces WHERE id IN ('ws_foreign', 'ws_broken')`)).rowCount).toBe(0);

    // Another unreadable event, not skipped: the rebuild stops and the live tables stay as they are.
    await writeRawEvent(stack.url, workspaceStream('ws_unreadable'), {
      type: 'WorkspaceArchived',
      data: { id: 'ws_unreadable' },
      metadata: metadata(at('10:00:01.000000')),
    });
    await stack.pool.query(`UPDATE workspaces SET name = 'marker' WHERE id = (SELECT min(id) FROM workspaces)`);
    await expect(rebuildReadModel({ connectionString: stack.url, store: stack.store, logger: silentLogger })).rejects.toThrow(
      /^the rebuild stopped at an event it cannot apply: workspace-ws_unreadable version 1 \(WorkspaceArchived\) cannot be read: type WorkspaceArchived is unknown/,
    );
    expect((await stack.pool.query(`SELECT 1 FROM workspaces WHERE name = 'marker'`)).rowCount).toBe(1);
    expect(await rebuildSchemasLeft(stack.pool)).toEqual([]);
  });

  it('loses nothing and applies nothing twice that other connections append while it reads', async () => {
    const writer = await startWith('bulk_race', 51, 150);

    // A transaction that has written an event but not committed when the bulk read takes its
    // snapshot: its event is below no boundary the read may use, and commits while the read runs.
    const open = new pg.Client({ connectionString: stack.url });
    await open.connect();
    const held = writer.next();
    await open.query('BEGIN');
    await open.query('SELECT * FROM es_append_batch($1::jsonb)', [
      JSON.stringify([{ stream: held.streamName, expected: held.expectedVersion.toString(), events: held.events }]),
    ]);
    held.applied();
    // Committed after it, before the snapshot: visible to the read, yet above its boundary.
    await appendMany(stack, writer, 5);

    let appendedDuringRead = 0;
    const racing: EventStore = {
      append: (...args) => stack.store.append(...args),
      readAll: (...args) => stack.store.readAll(...args),
      readStream: (...args) => stack.store.readStream(...args),
      readLastPosition: () => stack.store.readLastPosition(),
      estimateEventsBetween: (...args) => stack.store.estimateEventsBetween(...args),
      waitForEvents: (...args) => stack.store.waitForEvents(...args),
      ping: () => stack.store.ping(),
      close: async () => undefined,
      readLogByStream: (consume) =>
        stack.store.readLogByStream!(async (log) => {
          // The snapshot is taken: commit the held transaction and append more, all after it.
          await open.query('COMMIT');
          for (let i = 0; i < 40; i++) {
            await appendMany(stack, writer, 1);
            appendedDuringRead += 1;
          }
          return consume(log);
        }),
    };
    try {
      const result = await rebuildReadModel({ connectionString: stack.url, store: racing, logger: silentLogger, batchSize: 25 });
      expect(appendedDuringRead).toBe(40);
      expect(result.bulk).toBe(true);
      await expectWholeLog(stack, result);
      expect(await stack.differences()).toEqual([]);
    } finally {
      await open.end();
    }
  });
});

/** Solutions still active in their own stream that do not show: created under, or hidden by, an inactive workspace. */
async function stillToCascade(stack: Stack): Promise<Map<string, string>> {
  const expected = await expectedReadModel(stack.store);
  const { rows } = await stack.pool.query<{ id: string; workspace_id: string }>(
    `SELECT DISTINCT ON (stream_name) data->>'id' AS id, data->>'workspace_id' AS workspace_id
     FROM es_events e
     WHERE stream_name LIKE 'solution-%' AND type = 'SolutionCreated'
       AND NOT EXISTS (SELECT FROM es_events d WHERE d.stream_name = e.stream_name AND d.type = 'SolutionDeleted')
     ORDER BY stream_name, version DESC`,
  );
  return new Map(rows.filter((row) => !expected.solutions.has(row.id)).map((row) => [row.id, row.workspace_id]));
}
