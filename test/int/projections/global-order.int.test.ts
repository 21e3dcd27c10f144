import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RecordWriter, seededRandom } from '../../support/generate.js';
import { eventually, startStack, type Stack } from '../../support/stack.js';

const writers = 10;
const appendsPerWriter = 40;

/**
 * Appends in explicit transactions that sleep a random while after taking their sequence value:
 * later positions often commit first. A naive reader (`position > last seen`) skips such events;
 * the projector, reading below the transaction-id watermark, must not.
 */
describe('global order under concurrent writers', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.close());

  it('projects every event exactly once while writers commit out of order', async () => {
    stack.runner({ batchSize: 50 }).start();

    let naiveLast = 0n;
    const naiveSeen = new Set<string>();
    let writing = true;
    const naiveReader = (async () => {
      while (writing) {
        const { rows } = await stack.pool.query<{ position: string; event_id: string }>(
          'SELECT position, event_id FROM es_events WHERE position > $1 ORDER BY position',
          [naiveLast.toString()],
        );
        for (const row of rows) {
          naiveSeen.add(row.event_id);
          naiveLast = BigInt(row.position);
        }
        await new Promise((resolve) => setTimeout(resolve, 2));
      }
    })();

    const writerRuns = Array.from({ length: writers }, async (_, index) => {
      const random = seededRandom(1000 + index);
      const writer = new RecordWriter(`w${index}`, `org_${index % 3}`, random);
      const client = new pg.Client({ connectionString: stack.url });
      await client.connect();
      try {
        for (let i = 0; i < appendsPerWriter; i++) {
          const append = writer.next();
          await client.query('BEGIN');
          await client.query('SELECT * FROM es_append($1, $2, $3::uuid[], $4::text[], $5::jsonb[], $6::jsonb[])', [
            append.streamName,
            append.expectedVersion.toString(),
            append.events.map((e) => e.id),
            append.events.map((e) => e.type),
            append.events.map((e) => JSON.stringify(e.data)),
            append.events.map((e) => JSON.stringify(e.metadata)),
          ]);
          await client.query('SELECT pg_sleep($1)', [random() * 0.02]);
          await client.query('COMMIT');
          append.applied();
        }
      } finally {
        await client.end();
      }
    });
    await Promise.all(writerRuns);
    writing = false;
    await naiveReader;

    const { rows } = await stack.pool.query<{ count: string }>('SELECT count(*) FROM es_events');
    expect(Number(rows[0]!.count)).toBe(writers * appendsPerWriter);
    // The scenario is real: a position-only reader missed events that committed late.
    expect(naiveSeen.size).toBeLessThan(writers * appendsPerWriter);

    await eventually(async () => (await stack.store.readAll(stack.progress.current, 1)).length === 0);
    expect(await stack.differences()).toEqual([]);
  });
});
