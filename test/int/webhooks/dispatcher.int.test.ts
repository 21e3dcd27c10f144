import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { encodeCursor } from '../../../src/changes/cursor.js';
import { changeEntriesOf, type FeedEvent } from '../../../src/changes/feed.js';
import type { Envelope } from '../../../src/domain/events.js';
import { startOfLog } from '../../../src/eventstore/port.js';
import { migrate } from '../../../src/infra/migrate.js';
import { noChanges } from '../../../src/projections/batch.js';
import { writeChanges } from '../../../src/projections/tables.js';
import { WebhookDispatcher, type DispatcherSettings } from '../../../src/webhooks/adapters/dispatcher.js';
import { dueDeliveries } from '../../../src/webhooks/adapters/queue.js';
import { WebhookStore } from '../../../src/webhooks/adapters/store.js';
import { createTestDatabase } from '../../support/database.js';
import { readDelivery, receive, type ReceivedDelivery } from '../../support/webhook-receiver.js';

/** The dispatcher on a real PostgreSQL with a real receiver on loopback: shared work, connection-time checks, disabling. */
type PlanNode = { 'Actual Rows': number; 'Actual Loops': number; Alias?: string; Plans?: PlanNode[] };
/** The nodes of a plan, depth first. */
const nodesOf = (node: PlanNode): PlanNode[] => [node, ...(node.Plans ?? []).flatMap(nodesOf)];
const parsed = (delivery: ReceivedDelivery) => JSON.parse(delivery.body) as { type: string; data: { version: number } };
/** The most rows any node of a plan read, over all its loops. */
const rowsRead = (node: PlanNode): number => Math.max(node['Actual Rows'] * node['Actual Loops'], ...(node.Plans ?? []).map(rowsRead));

describe('webhook delivery', () => {
  let pool: pg.Pool;
  let server: Server;
  let url = '';
  const received: ReceivedDelivery[] = [];
  let secret = '';
  let answer = 200;
  /** While set, answers wait for it. */
  let held: Promise<void> | undefined;
  /** While set, answers to /slow wait for it; what came there is counted apart. */
  let slow: Promise<void> | undefined;
  let slowArrived = 0;
  let ids = 0;
  const store = () => new WebhookStore(pool, () => `wh_${++ids}`);
  const metadata = { actor: 'alice', request_id: 'r', occurred_at: '2026-11-25T10:00:00.000000Z', schema_version: 2 };
  let commit = 0n;
  const idle = { current: startOfLog, waitPast: (_: unknown, ms: number) => new Promise<boolean>((r) => setTimeout(() => r(false), ms)) };
  const settings = (overrides: Partial<DispatcherSettings> = {}): DispatcherSettings => ({
    timeoutMs: 10_000,
    retrySchedule: [50, 50, 50],
    disableAfterMs: 3_600_000,
    allowPrivateTargets: true,
    ...overrides,
  });
  const logger = pino({ level: 'silent' });

  /** `count` workspaces created in `organization`, each its own record, projected as one batch. */
  async function project(organization: string, count: number): Promise<void> {
    const events: FeedEvent[] = Array.from({ length: count }, (_, i) => {
      const id = `ws_${organization}_${commit + 1n}_${i}`;
      return {
        event: {
          type: 'WorkspaceCreated',
          data: { id, organization_id: organization, name: id, description: '', attributes: {} },
          metadata,
        } as Envelope,
        streamName: `workspace-${id}`,
        version: 1n,
        position: { commit: (commit += 1n), prepare: 0n },
      };
    });
    await writeChanges(pool, { ...noChanges(), feed: changeEntriesOf(events) });
  }

  /** Versions `first` to `last` of one record of `organization` (its creation, then updates), projected as one batch. */
  async function projectRecord(organization: string, id: string, first: number, last: number): Promise<void> {
    const events: FeedEvent[] = Array.from({ length: last - first + 1 }, (_, i) => ({
      event: (first + i === 1
        ? { type: 'WorkspaceCreated', data: { id, organization_id: organization, name: id, description: '', attributes: {} }, metadata }
        : { type: 'WorkspaceUpdated', data: { id, name: `${id} ${first + i}` }, metadata }) as Envelope,
      streamName: `workspace-${id}`,
      version: BigInt(first + i),
      position: { commit: (commit += 1n), prepare: 0n },
    }));
    await writeChanges(pool, { ...noChanges(), feed: changeEntriesOf(events) });
  }

  /** A webhook of `organization` for creations and updates, its secret the receiver's. */
  async function recordsHook(organization: string) {
    const hook = await store().create({
      organization_id: organization,
      url,
      types: ['WorkspaceCreated', 'WorkspaceUpdated'],
      description: '',
    });
    secret = hook.secret;
    return hook;
  }

  /**
   * Every change of `organization` made a due delivery of `hook` that already had `attempts`, and
   * the hook enqueued up to the last of them; then the hook disabled, as after days of failures.
   */
  async function dueDeliveriesOfDisabledHook(hookId: string, organization: string, attempts: number): Promise<void> {
    await pool.query(
      `INSERT INTO webhook_deliveries (webhook_id, commit_position, prepare_position, organization_id, stream_name, type, status,
         attempts, next_attempt_at)
       SELECT $1, commit_position, prepare_position, organization_id, stream_name, type, 'pending', $3, now() - interval '1 minute'
       FROM changes WHERE organization_id = $2`,
      [hookId, organization, attempts],
    );
    await pool.query(`UPDATE webhooks SET enqueued_commit = $2 WHERE id = $1`, [hookId, commit.toString()]);
    await store().update(hookId, [organization], { enabled: false });
  }

  /** Deliveries of `hookId` matching `condition`. */
  async function deliveriesOf(hookId: string, condition: string): Promise<number> {
    const { rows } = await pool.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM webhook_deliveries WHERE webhook_id = $1 AND ${condition}`,
      [hookId],
    );
    return Number(rows[0]!.n);
  }

  /**
   * Dispatchers started by the running test, each with its stop once asked. A test that fails
   * before stopping its dispatcher leaves it to afterEach: left running, it would deliver the
   * next tests' changes with its own settings (seen in CI: one failed assertion failed five more).
   */
  const running = new Map<WebhookDispatcher, Promise<void> | undefined>();
  function started(dispatcher: WebhookDispatcher): void {
    running.set(dispatcher, undefined);
    dispatcher.start();
  }
  function stopped(dispatcher: WebhookDispatcher): Promise<void> {
    const stopping = running.get(dispatcher) ?? dispatcher.stop();
    running.set(dispatcher, stopping);
    return stopping;
  }

  async function until(condition: () => Promise<boolean> | boolean, timeoutMs = 15_000): Promise<void> {
    const end = Date.now() + timeoutMs;
    while (!(await condition()) && Date.now() < end) await new Promise((resolve) => setTimeout(resolve, 50));
  }

  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: await createTestDatabase(), max: 10 });
    await migrate(pool, { eventStore: false });
    server = createServer((request, response) => {
      receive(request, async () => {
        const delivery = await readDelivery(request, secret);
        if (request.url === '/slow') {
          slowArrived += 1;
          await slow;
        } else received.push(delivery);
        await held;
        response.writeHead(answer).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  });
  afterEach(async () => {
    await Promise.all([...running.keys()].map(stopped));
    running.clear();
  });
  afterAll(async () => {
    server?.closeAllConnections();
    server?.close();
    await pool?.end();
  });

  it('two instances under load deliver each change once, signed, and record one attempt each', async () => {
    const hook = await store().create({ organization_id: 'org_one', url, types: ['WorkspaceCreated'], description: '' });
    secret = hook.secret;
    const dispatchers = [0, 1].map(() => new WebhookDispatcher(pool, idle, settings(), logger, {}, 20));
    for (const dispatcher of dispatchers) started(dispatcher);
    // Another organization's changes are not this webhook's.
    await project('org_other', 5);
    for (let batch = 0; batch < 10; batch++) await project('org_one', 20);
    await until(() => received.length >= 200);
    await new Promise((resolve) => setTimeout(resolve, 300));
    await Promise.all(dispatchers.map(stopped));
    expect(received).toHaveLength(200);
    expect(new Set(received.map((r) => r.id)).size).toBe(200);
    expect(received.every((r) => r.verified)).toBe(true);
    const { rows } = await pool.query<{ status: string; attempts: number; n: string }>(
      'SELECT status, attempts, count(*)::text AS n FROM webhook_deliveries WHERE webhook_id = $1 GROUP BY 1, 2',
      [hook.id],
    );
    expect(rows).toEqual([{ status: 'succeeded', attempts: 1, n: '200' }]);
    await store().remove(hook.id, ['org_one']);
  });

  it("leases without reading the deliveries waiting behind a record's earlier one, and sends them in order once it went through", async () => {
    received.length = 0;
    answer = 500;
    const hook = await recordsHook('org_queue');
    const dispatcher = new WebhookDispatcher(pool, idle, settings({ retrySchedule: [600_000] }), logger, {}, 20);
    started(dispatcher);
    // The creation fails and is retried in ten minutes; the 1,999 updates behind it wait.
    for (let batch = 0; batch < 20; batch++) await projectRecord('org_queue', 'ws_queued', batch * 100 + 1, batch * 100 + 100);
    const pending = async () =>
      Number(
        (
          await pool.query<{ n: string }>(
            `SELECT count(*)::text AS n FROM webhook_deliveries WHERE webhook_id = $1 AND status = 'pending'`,
            [hook.id],
          )
        ).rows[0]!.n,
      );
    await until(async () => received.length === 1 && (await pending()) === 2000);
    await stopped(dispatcher);
    expect(received.map((r) => parsed(r).type)).toEqual(['WorkspaceCreated']);
    // In the delivery log (contract §15), the head shows its retry's time; those waiting behind it, none.
    const log = (await store().deliveries(hook.id, ['org_queue'], { page: 1, size: 3 }, 'pending'))!;
    expect(log.items.map((delivery) => [delivery.type, delivery.next_attempt_at === null])).toEqual([
      ['WorkspaceCreated', false],
      ['WorkspaceUpdated', true],
      ['WorkspaceUpdated', true],
    ]);

    // Vacuumed first: a bitmap scan of the due index also counts the dead entries of the head's
    // earlier versions, until vacuum removes them; the lease's steady cost is what is measured.
    await pool.query('VACUUM (INDEX_CLEANUP ON) webhook_deliveries');
    const { rows } = await pool.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(
      `EXPLAIN (ANALYZE, FORMAT JSON) ${dueDeliveries}`,
      [128],
    );
    // Before the queue had heads, each of the 1,999 was read, found due and tested for an earlier one.
    expect(rowsRead(rows[0]!['QUERY PLAN'][0]!.Plan)).toBeLessThanOrEqual(2);

    await store().remove(hook.id, ['org_queue']);

    // A shorter record whose creation fails once: its retry goes through, and its updates follow it, in version order.
    received.length = 0;
    const chain = await recordsHook('org_chain');
    const again = new WebhookDispatcher(pool, idle, settings(), logger, {}, 20);
    started(again);
    await projectRecord('org_chain', 'ws_chain', 1, 50);
    await until(() => received.length >= 1);
    answer = 200;
    await until(() => received.length === 51);
    await stopped(again);
    const versions = received.map((r) => parsed(r).data.version);
    expect(versions).toEqual([1, ...Array.from({ length: 50 }, (_, i) => i + 1)]);
    await store().remove(chain.id, ['org_chain']);
  });

  it('probes for an earlier pending change only the due deliveries it takes, not the whole backlog of due ones', async () => {
    const hook = await recordsHook('org_backlog');
    // 2,000 records' creations, due and never attempted: a dispatcher that fell behind.
    for (let batch = 0; batch < 20; batch++) await project('org_backlog', 100);
    await pool.query(
      `INSERT INTO webhook_deliveries (webhook_id, commit_position, prepare_position, organization_id, stream_name, type, status,
         next_attempt_at)
       SELECT $1, commit_position, prepare_position, organization_id, stream_name, type, 'pending', now() - interval '1 minute'
       FROM changes WHERE organization_id = 'org_backlog'`,
      [hook.id],
    );
    // The plan PostgreSQL takes while its statistics say the table is small: every due row found through a bitmap, then sorted.
    const client = await pool.connect();
    await client.query('BEGIN');
    await client.query('SET LOCAL enable_indexscan = off');
    const { rows } = await client.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(
      `EXPLAIN (ANALYZE, FORMAT JSON) ${dueDeliveries}`,
      [10],
    );
    await client.query('ROLLBACK');
    client.release();
    const probes = nodesOf(rows[0]!['QUERY PLAN'][0]!.Plan).filter((node) => node.Alias === 'earlier');
    expect(probes.length).toBeGreaterThan(0);
    // Probed before the limit, as in the build before this one, each of the 2,000 was.
    expect(Math.max(...probes.map((node) => node['Actual Loops']))).toBeLessThanOrEqual(10);
    await store().remove(hook.id, ['org_backlog']);
  });

  it("leaves a disabled webhook's deliveries out of every lease, and sends them once it is enabled again", async () => {
    received.length = 0;
    answer = 200;
    const hook = await recordsHook('org_disabled');
    // 2,000 records' changes due, as a webhook disabled after days of failures leaves them.
    for (let batch = 0; batch < 20; batch++) await project('org_disabled', 100);
    await dueDeliveriesOfDisabledHook(hook.id, 'org_disabled', 5);
    const dispatcher = new WebhookDispatcher(pool, idle, settings(), logger, {}, 20);
    started(dispatcher);
    const scheduled = () => deliveriesOf(hook.id, 'next_attempt_at IS NOT NULL');
    await until(async () => (await scheduled()) === 0);
    // Parked: out of the range of the due index that every lease reads, oldest first, whatever plan
    // PostgreSQL takes. Left due, each of the 2,000 was read by every lease and dropped for its webhook.
    // (The lease's plan is no measure of that: a bitmap scan counts the parked rows' dead index
    // entries until vacuum, and PostgreSQL may as well take a plan that reads none of them either way.)
    expect(await scheduled()).toBe(0);
    expect(received).toEqual([]);
    // In the delivery log (contract §15): pending, with no attempt planned while disabled.
    const log = (await store().deliveries(hook.id, ['org_disabled'], { page: 1, size: 1 }, 'pending'))!;
    expect(log.items[0]).toMatchObject({ status: 'pending', attempts: 5, next_attempt_at: null });
    // A redelivery asked for meanwhile waits for it too.
    const { rows: changes } = await pool.query<{ commit_position: string }>(
      `SELECT commit_position::text FROM changes WHERE organization_id = 'org_disabled' ORDER BY commit_position LIMIT 1`,
    );
    const redelivered = await store().redeliver(
      hook.id,
      ['org_disabled'],
      encodeCursor({ commit: BigInt(changes[0]!.commit_position), prepare: 0n }),
    );
    expect(redelivered).toMatchObject({ delivery: { status: 'pending', attempts: 0, next_attempt_at: null } });
    expect(await scheduled()).toBe(0);

    await store().update(hook.id, ['org_disabled'], { enabled: true });
    await until(() => received.length === 2000, 30_000);
    await stopped(dispatcher);
    expect(new Set(received.map((delivery) => delivery.id)).size).toBe(2000);
    await store().remove(hook.id, ['org_disabled']);
  });

  it('given a webhook enabled again through the store that tells the dispatcher, sends its parked deliveries at once, not at the next periodic sweep', async () => {
    received.length = 0;
    answer = 200;
    const hook = await recordsHook('org_reenabled');
    await project('org_reenabled', 20);
    await dueDeliveriesOfDisabledHook(hook.id, 'org_reenabled', 1);
    // Periodic sweeps a minute apart (pollMs × 20): the first, at the start, parks the deliveries.
    const dispatcher = new WebhookDispatcher(pool, idle, settings(), logger, {}, 3000);
    started(dispatcher);
    const parked = () => deliveriesOf(hook.id, "status = 'pending' AND next_attempt_at IS NULL");
    await until(async () => (await parked()) === 20);
    expect(await parked()).toBe(20);

    // As the service wires it: the store tells the delivery thread, which tells its dispatcher.
    await new WebhookStore(
      pool,
      () => `wh_${++ids}`,
      () => dispatcher.sweepSoon(),
    ).update(hook.id, ['org_reenabled'], { enabled: true });
    await until(() => received.length === 20, 20_000);
    await stopped(dispatcher);
    expect(new Set(received.map((delivery) => delivery.id)).size).toBe(20);
    await store().remove(hook.id, ['org_reenabled']);
  });

  it("redelivers a change after its record's earlier change still pending, as a first delivery would be", async () => {
    received.length = 0;
    answer = 500;
    const hook = await recordsHook('org_redelivered');
    const dispatcher = new WebhookDispatcher(pool, idle, settings({ retrySchedule: [600_000] }), logger, {}, 20);
    started(dispatcher);
    await projectRecord('org_redelivered', 'ws_redelivered', 1, 2);
    // The creation fails and is retried in ten minutes; the update waits behind it.
    await until(() => received.length === 1);
    const { rows } = await pool.query<{ version: number; commit_position: string }>(
      `SELECT version, commit_position::text FROM changes WHERE stream_name = 'workspace-ws_redelivered' ORDER BY version`,
    );
    const changeOf = (version: number) => encodeCursor({ commit: BigInt(rows[version - 1]!.commit_position), prepare: 0n });
    // Asked again, the update still waits for its record's creation.
    expect(await store().redeliver(hook.id, ['org_redelivered'], changeOf(2))).toMatchObject({
      delivery: { status: 'pending', next_attempt_at: null },
    });
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(received).toHaveLength(1);
    // The creation asked again goes now; once it went through, the update follows.
    answer = 200;
    expect(await store().redeliver(hook.id, ['org_redelivered'], changeOf(1))).toMatchObject({
      delivery: { status: 'pending', attempts: 0 },
    });
    await until(() => received.length === 3);
    await stopped(dispatcher);
    expect(received.map((r) => [parsed(r).type, parsed(r).data.version])).toEqual([
      ['WorkspaceCreated', 1],
      ['WorkspaceCreated', 1],
      ['WorkspaceUpdated', 2],
    ]);
    await store().remove(hook.id, ['org_redelivered']);
  });

  it('redelivers, for a webhook created before its start was kept, a change that occurred after its creation or one it was given', async () => {
    const hook = await recordsHook('org_legacy');
    await projectRecord('org_legacy', 'ws_legacy', 1, 1);
    const { rows } = await pool.query<{ commit_position: string }>(
      `SELECT commit_position::text FROM changes WHERE stream_name = 'workspace-ws_legacy'`,
    );
    const change = encodeCursor({ commit: BigInt(rows[0]!.commit_position), prepare: 0n });
    // As migration 18 leaves a webhook created before it: no start; the change occurred just before its creation.
    const createdAt = (at: string) =>
      pool.query('UPDATE webhooks SET start_commit = NULL, start_prepare = NULL, created_at = $2 WHERE id = $1', [hook.id, at]);
    await createdAt('2026-11-25T10:00:00.000001Z');
    expect(await store().redeliver(hook.id, ['org_legacy'], change)).toEqual({ missing: 'change' });
    // Given to it once (it was due then): it may have it again.
    await pool.query(
      `INSERT INTO webhook_deliveries (webhook_id, commit_position, prepare_position, organization_id, stream_name, type, status)
       SELECT $1, commit_position, prepare_position, organization_id, stream_name, type, 'succeeded' FROM changes
       WHERE stream_name = 'workspace-ws_legacy'`,
      [hook.id],
    );
    expect(await store().redeliver(hook.id, ['org_legacy'], change)).toMatchObject({ delivery: { status: 'pending', attempts: 0 } });
    await pool.query('DELETE FROM webhook_deliveries WHERE webhook_id = $1', [hook.id]);
    // Created just before the change occurred.
    await createdAt('2026-11-25T09:59:59.999999Z');
    expect(await store().redeliver(hook.id, ['org_legacy'], change)).toMatchObject({ delivery: { status: 'pending', attempts: 0 } });
    expect(await store().redeliver(hook.id, ['org_other_legacy'], change)).toEqual({ missing: 'webhook' });
    await store().remove(hook.id, ['org_legacy']);
  });

  it('makes due, by its sweep, a delivery left waiting behind one that ended without promoting it (a process died between)', async () => {
    received.length = 0;
    const hook = await recordsHook('org_swept');
    await projectRecord('org_swept', 'ws_swept', 1, 2);
    // As a dispatcher that died after recording the creation's success leaves them: the update waits, and nothing is left to enqueue.
    await pool.query(
      `INSERT INTO webhook_deliveries (webhook_id, commit_position, prepare_position, organization_id, stream_name, type, status)
       SELECT $1, commit_position, prepare_position, organization_id, stream_name, type,
         CASE type WHEN 'WorkspaceCreated' THEN 'succeeded' ELSE 'pending' END
       FROM changes WHERE stream_name = 'workspace-ws_swept'`,
      [hook.id],
    );
    await pool.query(`UPDATE webhooks SET enqueued_commit = $2 WHERE id = $1`, [hook.id, commit.toString()]);
    const dispatcher = new WebhookDispatcher(pool, idle, settings(), logger, {}, 20);
    started(dispatcher);
    await until(() => received.length === 1);
    await stopped(dispatcher);
    expect(received.map((r) => [parsed(r).type, parsed(r).data.version])).toEqual([['WorkspaceUpdated', 2]]);
    await store().remove(hook.id, ['org_swept']);
  });

  it('refuses at connection a name that resolves to a non-public address, whatever the URL was when created, told as a name that resolves to nothing is', async () => {
    received.length = 0;
    const hook = await store().create({ organization_id: 'org_two', url, types: ['WorkspaceCreated'], description: '' });
    // A name that never resolves (RFC 6761), for the error its delivery gets.
    const nowhere = await store().create({ organization_id: 'org_two', url, types: ['WorkspaceCreated'], description: '' });
    // As if its DNS changed after creation: the name now points at loopback.
    await pool.query('UPDATE webhooks SET url = $2 WHERE id = $1', [
      hook.id,
      url.replace('127.0.0.1', 'localhost').replace('http:', 'https:'),
    ]);
    await pool.query('UPDATE webhooks SET url = $2 WHERE id = $1', [nowhere.id, 'https://no-such-name.invalid/hook']);
    const dispatcher = new WebhookDispatcher(pool, idle, settings({ allowPrivateTargets: false, retrySchedule: [] }), logger, {}, 20);
    started(dispatcher);
    await project('org_two', 1);
    const log = (id: string) => store().deliveries(id, ['org_two'], { page: 1, size: 10 }, undefined);
    await until(async () => (await log(hook.id))!.items[0]?.status === 'failed' && (await log(nowhere.id))!.items[0]?.status === 'failed');
    await stopped(dispatcher);
    expect((await log(hook.id))!.items[0]).toMatchObject({ status: 'failed', attempts: 1, last_status_code: null });
    // Alike, so that a delivery log cannot tell which names resolve inside the service's network.
    expect((await log(hook.id))!.items[0]!.last_error).toBe('no public address was found for localhost');
    expect((await log(nowhere.id))!.items[0]!.last_error).toBe('no public address was found for no-such-name.invalid');
    expect(received).toEqual([]);
    await store().remove(nowhere.id, ['org_two']);
  });

  it('refuses at connection a plain http:// URL once private targets are not allowed, whatever was allowed when created', async () => {
    received.length = 0;
    // Created while WEBHOOK_ALLOW_PRIVATE_TARGETS=true; the service runs without it since.
    const hook = await store().create({
      organization_id: 'org_plain',
      url: 'http://8.8.8.8:4111/x',
      types: ['WorkspaceCreated'],
      description: '',
    });
    const dispatcher = new WebhookDispatcher(
      pool,
      idle,
      settings({ allowPrivateTargets: false, retrySchedule: [], timeoutMs: 1000 }),
      logger,
      {},
      20,
    );
    started(dispatcher);
    await project('org_plain', 1);
    const log = () => store().deliveries(hook.id, ['org_plain'], { page: 1, size: 10 }, undefined);
    await until(async () => (await log())!.items[0]?.status === 'failed');
    await stopped(dispatcher);
    // Refused before connecting: no answer, no connection error, the scheme named.
    expect((await log())!.items[0]).toMatchObject({
      status: 'failed',
      attempts: 1,
      last_status_code: null,
      last_error: 'http:// is refused: targets must be https://',
    });
    await store().remove(hook.id, ['org_plain']);
  });

  it.each([
    ['', false],
    // As some clients send it with every update: only enabling a disabled webhook resets its clock.
    [', its clock kept while a client sends enabled: true', true],
  ])('disables a webhook failing without a success for the configured time%s', async (_, insisting) => {
    answer = 500;
    const organization = insisting ? 'org_insisting' : 'org_three';
    const hook = await store().create({ organization_id: organization, url, types: ['WorkspaceCreated'], description: '' });
    const dispatcher = new WebhookDispatcher(
      pool,
      idle,
      settings({ disableAfterMs: 3000, retrySchedule: Array(200).fill(50) }),
      logger,
      {},
      20,
    );
    try {
      started(dispatcher);
      await project(organization, 1);
      const failingSince = async () =>
        (await pool.query<{ at: Date | null }>('SELECT failing_since AS at FROM webhooks WHERE id = $1', [hook.id])).rows[0]!.at;
      await until(async () => (await failingSince()) !== null);
      const since = await failingSince();
      // Updates for 300 ms, well before the webhook's time is over: none can race with its disabling.
      const updatesUntil = Date.now() + 300;
      while (insisting && Date.now() < updatesUntil) {
        await store().update(hook.id, [organization], { description: 'insisting', enabled: true });
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(await failingSince()).toEqual(since);
      await until(async () => !(await store().get(hook.id, [organization]))!.enabled);
      // Stopped first, so that no failure recorded meanwhile starts its clock again.
      await stopped(dispatcher);
      expect(await store().get(hook.id, [organization])).toMatchObject({ enabled: false, disabled_reason: 'failing' });
      expect(await failingSince()).toEqual(since);
      // Enabled again after the disabling, it gets its time again.
      expect(await store().update(hook.id, [organization], { enabled: true })).toMatchObject({ enabled: true, disabled_reason: null });
      expect(await failingSince()).toBeNull();
    } finally {
      await stopped(dispatcher);
      await store().remove(hook.id, [organization]);
      answer = 200;
    }
  });

  it("records a success without touching the webhook's row, so it never waits for it (nor deadlocks with a deletion)", async () => {
    received.length = 0;
    const hook = await store().create({ organization_id: 'org_four', url, types: ['WorkspaceCreated'], description: '' });
    secret = hook.secret;
    let release: () => void = () => undefined;
    held = new Promise((resolve) => (release = resolve));
    const dispatcher = new WebhookDispatcher(pool, idle, settings(), logger, {}, 20);
    started(dispatcher);
    await project('org_four', 1);
    await until(() => received.length === 1);
    // The attempt is out; the webhook's row is locked, as an update or a deletion of it would lock it.
    const locker = await pool.connect();
    await locker.query('BEGIN');
    await locker.query('SELECT FROM webhooks WHERE id = $1 FOR UPDATE', [hook.id]);
    release();
    const status = async () => (await store().deliveries(hook.id, ['org_four'], { page: 1, size: 1 }, undefined))!.items[0]?.status;
    // Waiting for the row, the outcome would wait for the locker's rollback, after this: never.
    await until(async () => (await status()) === 'succeeded', 10_000);
    const recorded = await status();
    await locker.query('ROLLBACK');
    locker.release();
    held = undefined;
    await stopped(dispatcher);
    expect(recorded).toBe('succeeded');
  });

  it("goes on with other webhooks' deliveries while an attempt waits for a slow receiver", async () => {
    received.length = 0;
    let release: () => void = () => undefined;
    slow = new Promise((resolve) => (release = resolve));
    await store().create({ organization_id: 'org_five', url: `${url}slow`, types: ['WorkspaceCreated'], description: '' });
    const fast = await store().create({ organization_id: 'org_five', url, types: ['WorkspaceCreated'], description: '' });
    secret = fast.secret;
    const dispatcher = new WebhookDispatcher(pool, idle, settings(), logger, {}, 20);
    started(dispatcher);
    await project('org_five', 1);
    await until(() => received.length === 1 && slowArrived === 1);
    // The slow receiver holds its answer; the fast one gets the next changes meanwhile.
    await project('org_five', 3);
    // Under the attempt's 10 s timeout: held behind the slow attempt, the changes would come after it.
    await until(() => received.length === 4, 8000);
    const whileHeld = received.length;
    release();
    slow = undefined;
    await until(() => slowArrived === 4);
    await stopped(dispatcher);
    expect(whileHeld).toBe(4);
    expect(received.every((r) => r.verified)).toBe(true);
    expect(slowArrived).toBe(4);
  });

  it('stopped while an attempt waits for a receiver that does not answer, cuts it short and leaves it to its lease, recording nothing', async () => {
    slow = new Promise(() => undefined);
    slowArrived = 0;
    const hook = await store().create({ organization_id: 'org_six', url: `${url}slow`, types: ['WorkspaceCreated'], description: '' });
    // An attempt would wait a minute for its answer: a stop must not.
    const dispatcher = new WebhookDispatcher(pool, idle, settings({ timeoutMs: 60_000 }), logger, {}, 20);
    started(dispatcher);
    await project('org_six', 1);
    await until(() => slowArrived === 1);
    const stopping = stopped(dispatcher);
    const outcome = await Promise.race([
      stopping.then(() => 'stopped'),
      new Promise((resolve) => setTimeout(() => resolve('waiting'), 10_000)),
    ]);
    slow = undefined;
    expect(outcome).toBe('stopped');
    const { rows } = await pool.query(
      `SELECT d.status, d.attempts, d.last_error, d.leased_until > now() AS leased, w.failing_since
       FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id WHERE d.webhook_id = $1`,
      [hook.id],
    );
    expect(rows).toEqual([{ status: 'pending', attempts: 1, last_error: null, leased: true, failing_since: null }]);
  });
});
