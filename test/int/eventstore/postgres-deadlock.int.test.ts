import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresEventStore } from '../../../src/eventstore/postgres.js';
import { migrate } from '../../../src/infra/migrate.js';
import { createPool, PgListener, type Pool } from '../../../src/infra/postgres.js';
import { createTestDatabase } from '../../support/database.js';
import { eventually } from '../../support/stack.js';

const logger = pino({ level: 'silent' });

/**
 * An append that PostgreSQL picks as a deadlock's victim was rolled back, nothing of it written:
 * the store sends it again rather than failing the command.
 */
describe('PostgreSQL event store: an append chosen as a deadlock victim', () => {
  let url: string;
  let pool: Pool;
  let listener: PgListener;
  let other: pg.Client;

  beforeAll(async () => {
    url = await createTestDatabase();
    pool = createPool(url, logger, 4);
    await migrate(pool, { eventStore: true });
    listener = new PgListener(url, logger);
    await listener.start();
    other = new pg.Client({ connectionString: url });
    await other.connect();
  });
  afterAll(async () => {
    await other?.end();
    await listener?.close();
    await pool?.end();
  });

  it('is sent again, and appended once the other transaction is gone', async () => {
    const store = new PostgresEventStore(pool, listener);
    // Another writer holds an event with the same id, so the append waits for it after taking its
    // stream; the other writer then waits for that stream: a cycle. The append, waiting first, is
    // its victim when its own deadlock check (deadlock_timeout after it began waiting) finds the
    // cycle formed; on a machine so busy that the other writer's wait began only after that check,
    // the other writer's check finds it instead and the other writer is the victim: the append
    // then simply goes through, which tests nothing here, and the scene is played again.
    const scene = async () => {
      const stream = `workspace-ws_${randomUUID()}`;
      const eventId = randomUUID();
      await other.query('BEGIN');
      await other.query(
        `INSERT INTO es_events (stream_name, version, event_id, type, data, metadata) VALUES ($2, 1, $1, 'Other', '{}', '{}')`,
        [eventId, `elsewhere-${randomUUID()}`],
      );
      const appending = store.append(stream, 0n, [{ id: eventId, type: 'WorkspaceCreated', data: {}, metadata: {} }]);
      const waiting = async () =>
        (
          await pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND pid <> pg_backend_pid() AND locktype = 'transactionid'`,
          )
        ).rows[0]!.n > 0;
      await eventually(waiting);
      const otherWaits = await other.query(`INSERT INTO es_streams (stream_name, version) VALUES ($1, 1)`, [stream]).then(
        () => 'inserted',
        (error: Error) => error.message,
      );
      await other.query('ROLLBACK');
      return { stream, otherWaits, appended: await appending };
    };
    let played = await scene();
    for (let again = 0; again < 4 && played.otherWaits === 'deadlock detected'; again++) played = await scene();
    expect(played.otherWaits).toBe('inserted');
    expect(played.appended).toMatchObject({ version: 1n });
    const { rows } = await pool.query<{ version: string }>('SELECT version::text FROM es_events WHERE stream_name = $1', [played.stream]);
    expect(rows).toEqual([{ version: '1' }]);
  });
});
