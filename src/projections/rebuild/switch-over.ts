import pg from 'pg';
import type { Logger } from 'pino';
import { comparePositions, encodePosition, startOfLog, type EventStore, type GlobalPosition } from '../../eventstore/port.js';
import type { SkippedEvents } from '../../eventstore/event-log.js';
import { rowsNeeded } from '../batch.js';
import { progressChannel } from '../progress.js';
import { loadRows, projectorName } from '../tables.js';
import { oneAtATime } from '../../infra/postgres.js';
import { commit, foldBatch, readCopyPage, writeBatchInTransaction } from './copy.js';
import type { CopyState } from './types.js';

export const quote = (identifier: string) => pg.escapeIdentifier(identifier);

const lockNotAvailable = new Set(['55P03', '40P01']);

/**
 * The switch, in one transaction. Undefined when the live tables could not be locked in time
 * (nothing changed then); the caller catches up and tries again.
 */
export async function trySwitch(options: {
  client: pg.Client;
  store: EventStore;
  /** The rebuild's schema, and the tables of it that replace the live ones. */
  schema: string;
  tables: string[];
  state: CopyState;
  batchSize: number;
  skipped: SkippedEvents;
  lockTimeoutMs: number;
  logger: Logger;
}): Promise<{ previous: GlobalPosition; pendingCascades: number } | undefined> {
  const { client, store, schema, tables, state, batchSize, skipped, lockTimeoutMs, logger } = options;
  // Batches applied inside this transaction count only once it commits.
  const tentative: CopyState = { ...state, cascades: new Map(state.cascades) };
  await client.query('BEGIN');
  try {
    const live = await liveTables(client, tables);
    await client.query(`SET LOCAL lock_timeout = ${lockTimeoutMs}`);
    try {
      if (live.length > 0) {
        await client.query(`LOCK TABLE ${live.map((t) => `public.${quote(t)}`).join(', ')} IN ACCESS EXCLUSIVE MODE`);
      }
      // Blocks the live projector's checkpoint move (and so its commit), not the readers of it.
      await client.query('LOCK TABLE public.projection_checkpoints IN EXCLUSIVE MODE');
    } catch (error) {
      if (!lockNotAvailable.has((error as { code?: string }).code ?? '')) throw error;
      await client.query('ROLLBACK');
      return undefined;
    }
    // Holding everything: later statements wait only for rows of cascade_pending, never long.
    await client.query(`SET LOCAL lock_timeout = '30s'`);
    const previous = await liveCheckpoint(client);

    // The rest of the log, up to the head as it stands with the live projector held (what is
    // appended meanwhile is the live projector's once it restarts from the new checkpoint).
    for (;;) {
      const { events, end, read } = await readCopyPage(store, tentative.position, batchSize, skipped);
      if (end) {
        const envelopes = events.map((logged) => logged.event);
        const loaded = await loadRows(oneAtATime(client), rowsNeeded(envelopes));
        const batch = foldBatch({ from: tentative.position, to: end, count: read, events, envelopes, loaded });
        await writeBatchInTransaction(client, batch);
        commit(tentative, batch);
      }
      if (read < batchSize) break;
    }
    if (comparePositions(tentative.position, previous) < 0) {
      throw new Error(
        `the rebuild reached ${encodePosition(tentative.position)}, behind the live checkpoint ${encodePosition(previous)}; not switching`,
      );
    }

    if (live.length > 0) await client.query(`DROP TABLE ${live.map((t) => `public.${quote(t)}`).join(', ')}`);
    for (const table of tables) await client.query(`ALTER TABLE ${quote(schema)}.${quote(table)} SET SCHEMA public`);
    await client.query(
      `INSERT INTO public.projection_checkpoints (name, commit_position, prepare_position) VALUES ($1, $2, $3)
       ON CONFLICT (name) DO UPDATE SET commit_position = excluded.commit_position, prepare_position = excluded.prepare_position`,
      [projectorName, tentative.position.commit.toString(), tentative.position.prepare.toString()],
    );
    const cascades = [...tentative.cascades].map(([solution_id, workspace_id]) => ({ solution_id, workspace_id }));
    if (cascades.length > 0) {
      await client.query(
        `INSERT INTO public.cascade_pending (solution_id, workspace_id)
         SELECT solution_id, workspace_id FROM jsonb_to_recordset($1::jsonb) AS r(solution_id text, workspace_id text)
         ON CONFLICT DO NOTHING`,
        [JSON.stringify(cascades)],
      );
    }
    // Wakes every instance's read-your-writes waiters; delivered at commit.
    await client.query('SELECT pg_notify($1, $2)', [progressChannel, encodePosition(tentative.position)]);
    await client.query('COMMIT');
    Object.assign(state, tentative);
    logger.debug({ previous: encodePosition(previous), position: encodePosition(state.position) }, 'switched over');
    return { previous, pendingCascades: cascades.length };
  } catch (error) {
    // The switch-over's own error is reported; a failed rollback ends with the connection.
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  }
}

/** Those of the tables that exist in `public` (all of them once migrated). */
async function liveTables(client: pg.Client, tables: string[]): Promise<string[]> {
  const { rows } = await client.query<{ name: string }>(
    `SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public' AND tablename = ANY($1)`,
    [tables],
  );
  const present = new Set(rows.map((row) => row.name));
  return tables.filter((table) => present.has(table));
}

async function liveCheckpoint(client: pg.Client): Promise<GlobalPosition> {
  const { rows } = await client.query<{ commit_position: string; prepare_position: string }>(
    'SELECT commit_position, prepare_position FROM public.projection_checkpoints WHERE name = $1',
    [projectorName],
  );
  const row = rows[0];
  return row ? { commit: BigInt(row.commit_position), prepare: BigInt(row.prepare_position) } : startOfLog;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
