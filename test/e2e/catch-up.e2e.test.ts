import { afterEach, describe, expect, it } from 'vitest';
import { comparePositions, startOfLog } from '../../src/eventstore/port.js';
import { readTreeProgress } from '../../src/integrity/adapters/tables.js';
import { createTestDatabase } from '../support/database.js';
import { eventStoreUrlFor, onEventStoreDB, prepareReadDatabase } from '../support/event-store.js';
import { writeRawEvent } from '../support/foreign-writes.js';
import { workspaceHistories } from '../support/generate.js';
import { scrape, total } from '../support/metrics.js';
import { startServiceProcess, type ServiceProcess } from '../support/service-process.js';
import { eventually, startStack, type Stack } from '../support/stack.js';

/**
 * Contract §11 and §13 while the projector catches up a backlog (a fresh read database over a
 * long log, as after a restore): /readyz says not ready, with the backlog and the time to catch
 * up, until the projection reaches the log's end; a command whose events cannot be projected
 * within PROJECTION_WAIT_MS answers at once with its result; the integrity tree waits until the
 * projection is near the log's end. Both event stores.
 */
const org = 'org_catch_up';
/**
 * A backlog that takes several seconds to project, whatever the machine: batch by batch (not in
 * bulk: PROJECTOR_BULK_CATCH_UP_EVENTS=0, covered in test/int/projections/catch-up-cache.int.test.ts),
 * batches held to 500 events (PROJECTOR_MAX_BATCH_EVENTS), each record's five events in one append,
 * and every workspace row the projector writes held `rowWriteMs` by a trigger, as on a busy
 * database: 10,000 records take 10 s or more (6,000 from EventStoreDB, whose stand-in takes
 * appends more slowly). A bigger backlog, with no trigger, took minutes to seed and verify on a
 * slow machine, and on a fast one was projected before readiness could be seen behind.
 */
const eventsPerRecord = 5;
const records = onEventStoreDB ? 6_000 : 10_000;
const rowWriteMs = 1;
/**
 * Short: the command is sent while the estimate to catch up is 3 s or more at the present rate, and
 * a command is out of reach only when the backlog needs more than twice the wait at the fastest
 * rate seen lately (ProjectionProgress.outOfReach).
 */
const projectionWaitMs = 500;

type ReadyAnswer = { status: number; checks: Record<string, unknown> };

describe('a service started on a fresh read database over a long log', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  });

  async function seed(stack: Stack): Promise<void> {
    const appends = workspaceHistories('backlog', org, records, eventsPerRecord);
    const writers = Array.from({ length: 16 }, async () => {
      for (let next = appends.pop(); next; next = appends.pop())
        await stack.store.append(next.streamName, next.expectedVersion, next.events);
    });
    await Promise.all(writers);
  }

  const readyz = async (service: ServiceProcess): Promise<ReadyAnswer> => {
    const response = await fetch(`${service.url}/readyz`);
    return { status: response.status, checks: ((await response.json()) as { checks: Record<string, unknown> }).checks };
  };

  it('is not ready, with the backlog and the time to catch up, until it has caught up; commands answer at once meanwhile', async () => {
    const databaseUrl = await prepareReadDatabase(await createTestDatabase());
    const eventStoreUrl = await eventStoreUrlFor(databaseUrl);
    const stack = await startStack(databaseUrl);
    cleanups.push(() => stack.close());
    await seed(stack);
    await stack.pool.query(`
      CREATE FUNCTION pace_row_writes() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_sleep(${rowWriteMs / 1000}); RETURN NEW; END $$;
      CREATE TRIGGER paced BEFORE INSERT OR UPDATE ON workspaces FOR EACH ROW EXECUTE FUNCTION pace_row_writes();`);

    const service = await startServiceProcess({
      databaseUrl,
      eventStoreUrl,
      // Info: the command's request line is what the test waits for (below).
      env: {
        LOG_LEVEL: 'info',
        PROJECTION_WAIT_MS: String(projectionWaitMs),
        PROJECTOR_MAX_BATCH_EVENTS: '500',
        PROJECTOR_BULK_CATCH_UP_EVENTS: '0',
      },
    });
    cleanups.push(() => service.signal('SIGKILL'));
    const token = await service.token([org]);

    // Behind: 503, the backlog in events, and once the projector has moved a while, an estimate,
    // taken while seconds of work are left, so that the command below is certain to be behind.
    let behind: ReadyAnswer | undefined;
    await eventually(async () => {
      const answer = await readyz(service);
      expect(answer.status, JSON.stringify(answer.checks)).toBe(503);
      const seconds = answer.checks.projection_catch_up_seconds;
      if (typeof seconds === 'number' && seconds >= 3) behind = answer;
      return behind !== undefined;
    }, 60_000);
    expect(behind!.checks).toMatchObject({ event_store: 'ok', read_database: 'ok', projection: 'behind' });
    expect(behind!.checks.projection_backlog_events).toBeGreaterThan(1000);
    expect(behind!.checks.projection_catch_up_seconds).toBeGreaterThan(0);
    const metrics = await scrape(`${service.url}/metrics`);
    expect(total(metrics, 'wsapi_projection_backlog_events')).toBeGreaterThan(1000);
    expect(total(metrics, 'wsapi_projection_catch_up_seconds')).toBeGreaterThan(0);
    expect(total(metrics, 'wsapi_ready', { check: 'all' })).toBe(0);
    // The integrity tree waits while the projection is far behind: readiness and every command wait
    // for the projection, nothing waits for the tree, and on a few cores the two would compete.
    expect(await readTreeProgress(stack.pool)).toEqual(startOfLog);

    // A command behind the backlog cannot be projected within PROJECTION_WAIT_MS: it answers its
    // result at once, marked behind, rather than after the whole wait.
    const response = await fetch(`${service.url}/api`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query: 'create_workspace', params: { organization_id: org, name: 'During the catch-up' } }),
    });
    expect(response.status).toBe(200);
    expect(((await response.json()) as { data: { name: string } }).data.name).toBe('During the catch-up');
    expect(response.headers.get('x-projection-behind')).toBe('true');

    // The log now ends with another program's event, which the projection never lands on
    // (EventStoreDB's `$all` routinely ends with such events, or with system events), and probes
    // made while the backlog lasts wait for it in vain; once caught up (below), the service is
    // ready and its backlog 0 all the same.
    await writeRawEvent(databaseUrl, 'orders-1', { type: 'OrderPlaced', data: { total: 5 } });
    expect((await readyz(service)).status).toBe(503);

    // Not timed (a loaded machine can take the whole wait for the command's own work): a command
    // that waited the wait out logs so before its request's line; one out of reach logs nothing.
    const requestId = response.headers.get('x-request-id')!;
    await eventually(() => service.output().includes(`"request_id":"${requestId}","method":"POST"`), 10_000);
    expect(service.output()).not.toContain('projection did not catch up in time');

    // Caught up: ready, and the read tables are the fold of the log.
    await eventually(async () => (await readyz(service)).status === 200, 120_000);
    expect((await readyz(service)).checks).toEqual({ event_store: 'ok', read_database: 'ok', projection: 'caught_up' });
    const caughtUp = await scrape(`${service.url}/metrics`);
    expect(total(caughtUp, 'wsapi_projection_backlog_events')).toBe(0);
    expect(total(caughtUp, 'wsapi_projection_catch_up_seconds')).toBe(0);
    expect(await stack.differences()).toEqual([]);
    // Then the tree follows.
    await eventually(async () => comparePositions(await readTreeProgress(stack.pool), startOfLog) > 0, 60_000);
  }, 240_000);
});
