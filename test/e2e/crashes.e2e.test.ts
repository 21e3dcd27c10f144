import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { startOfLog } from '../../src/eventstore/port.js';
import { workspaceStream } from '../../src/eventstore/stream-names.js';
import { lockKeys } from '../../src/infra/lock-keys.js';
import { createTestDatabase } from '../support/database.js';
import { eventStoreUrlFor, onEventStoreDB, prepareReadDatabase, standInFor, testEventStore } from '../support/event-store.js';
import { startServiceProcess } from '../support/service-process.js';
import { callApi, startTestService, type ApiResponse, type TestService } from '../support/service.js';
import { eventually, startStack, type Stack } from '../support/stack.js';
import { expectError, expectOk, sleep } from './helpers.js';

/**
 * Contract §2 and §11 under crashes and database faults, with real processes: an instance killed
 * with SIGKILL after its append, a projector leader frozen with SIGSTOP, the read database cut
 * away under a running command. Runs with events in PostgreSQL and in EventStoreDB alike.
 */
const org = 'org_crash';

describe('crashes and database faults', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  });

  async function freshDatabase() {
    const databaseUrl = await prepareReadDatabase(await createTestDatabase());
    return { databaseUrl, eventStoreUrl: await eventStoreUrlFor(databaseUrl) };
  }

  async function processOn(where: { databaseUrl: string; eventStoreUrl: string | undefined }, env: Record<string, string> = {}) {
    const instance = await startServiceProcess({ ...where, env });
    cleanups.push(() => instance.signal('SIGKILL'));
    return instance;
  }

  async function serviceOn(databaseUrl: string, options: { runProjector?: boolean } = {}): Promise<TestService> {
    const service = await startTestService({ databaseUrl, ...options });
    cleanups.push(() => service.close());
    return service;
  }

  async function stackOn(databaseUrl: string): Promise<Stack> {
    const stack = await startStack(databaseUrl);
    cleanups.push(() => stack.close());
    return stack;
  }

  /** Takes the projector's lock so that no instance projects until `release`. */
  async function holdProjection(databaseUrl: string) {
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    await client.query('SELECT pg_advisory_lock($1)', [lockKeys.projector]);
    cleanups.push(() => client.end());
    return { release: () => client.query('SELECT pg_advisory_unlock($1)', [lockKeys.projector]) };
  }

  /**
   * A database with one projected workspace, named `name`; an instance on it that does not
   * project (it survives the crash), and a stack whose projector the test starts when it wants.
   */
  async function projectedWorkspace(name: string) {
    const where = await freshDatabase();
    const survivor = await serviceOn(where.databaseUrl, { runProjector: false });
    const stack = await stackOn(where.databaseUrl);
    const token = await survivor.token([org]);
    const projecting = stack.runner();
    projecting.start();
    const workspace = expectOk(await callApi(survivor, token, 'create_workspace', { organization_id: org, name }));
    await projecting.stop();
    return { where, survivor, stack, token, workspace };
  }

  /** Repeats a keyed call as a client whose answer was lost does, while it is told the first is still running. */
  async function retryWhileConflict(call: () => Promise<ApiResponse>, timeoutMs: number): Promise<ApiResponse> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const response = await call();
      if (response.status !== 409 || Date.now() > deadline) return response;
      await sleep(100);
    }
  }

  const historyTypes = async (service: TestService, token: string, id: string) =>
    expectOk(await callApi(service, token, 'get_workspace_history', { id, page: 1, size: 100 })).items.map(
      (item: { type: string }) => item.type,
    );

  it('a keyed update whose instance is killed after its append: the key is free at once, and the retry answers it without doing it again', async () => {
    const { where, survivor, stack, token, workspace } = await projectedWorkspace('Before');

    const projection = await holdProjection(where.databaseUrl);
    const doomed = await processOn(where, { PROJECTION_WAIT_MS: '30000' });
    const update = { id: workspace.id, name: 'Updated once', attributes: { attempt: 1 } };
    const keyed = (service: { url: string }) => callApi(service, token, 'update_workspace', update, { 'idempotency-key': 'crash-update' });
    const lost = keyed(doomed).catch(() => undefined);
    // The update is appended; its instance now waits for a projection that cannot run.
    await eventually(async () => (await stack.store.readStream(workspaceStream(workspace.id))).length === 2, 20_000);
    expectError(await keyed(survivor), 409, 'conflict');

    await doomed.signal('SIGKILL');
    const killedAt = Date.now();
    await lost;
    await projection.release();
    stack.runner().start();
    const retried = await retryWhileConflict(() => keyed(survivor), 10_000);
    const answeredAfterMs = Date.now() - killedAt;

    const answer = expectOk(retried);
    expect(answer).toMatchObject({ id: workspace.id, name: 'Updated once', attributes: { attempt: 1 } });
    expect(answeredAfterMs).toBeLessThan(5000);
    expect(await historyTypes(survivor, token, workspace.id)).toEqual(['WorkspaceCreated', 'WorkspaceUpdated']);
    expect(await stack.differences()).toEqual([]);
  });

  it('a keyed command inside a multi-command group whose instance is killed after the group is appended: its retry answers what it did, done once', async () => {
    const { where, survivor, stack, token, workspace } = await projectedWorkspace('Grouped');
    const stream = workspaceStream(workspace.id);

    const projection = await holdProjection(where.databaseUrl);
    const doomed = await processOn(where, { PROJECTION_WAIT_MS: '30000' });
    const database = new pg.Client({ connectionString: where.databaseUrl });
    await database.connect();
    cleanups.push(() => database.end());
    const update = (n: number) => ({ id: workspace.id, name: `grouped ${n}`, attributes: { [`grouped${n}`]: n } });
    const keyed = (service: { url: string }, n: number) =>
      callApi(service, token, 'update_workspace', update(n), { 'idempotency-key': `grouped-${n}` });
    // The first command's group stops at its command-index lookup while the lock is held: the four
    // others queue behind it (each has claimed its key first), and go together as the next group.
    await database.query('BEGIN');
    await database.query('LOCK TABLE record_command_marks IN ACCESS EXCLUSIVE MODE');
    const lost = [0, 1, 2, 3, 4].map((n) => keyed(doomed, n).catch(() => undefined));
    await eventually(
      async () => (await database.query(`SELECT 1 FROM idempotency_keys WHERE key LIKE 'grouped-%'`)).rowCount === 5,
      20_000,
    );
    await sleep(300);
    await database.query('COMMIT');
    await eventually(async () => (await stack.store.readStream(stream)).length === 6, 20_000);
    const appended = await stack.store.readStream(stream);
    // The last four were appended together: one append, one transaction (in PostgreSQL, where an append's events share it).
    if (!onEventStoreDB) expect(new Set(appended.slice(2).map((event) => event.position.commit)).size).toBe(1);

    await doomed.signal('SIGKILL');
    await Promise.all(lost);
    await projection.release();
    stack.runner().start();
    const grouped = appended.slice(2).map((event) => Number((event.data as { name: string }).name.replace('grouped ', '')));
    const inGroup = grouped[1]!;
    const answer = expectOk(await retryWhileConflict(() => keyed(survivor, inGroup), 10_000));
    // As its own event left the record: after the group's commands before it, not after those after it.
    expect(answer.name).toBe(`grouped ${inGroup}`);
    expect(Object.keys(answer.attributes).sort()).toEqual(
      appended
        .slice(1, 4)
        .map((event) => `grouped${(event.data as { name: string }).name.replace('grouped ', '')}`)
        .sort(),
    );
    for (const n of [0, 1, 2, 3, 4]) expect((await retryWhileConflict(() => keyed(survivor, n), 10_000)).status).toBe(200);
    expect(await historyTypes(survivor, token, workspace.id)).toEqual(['WorkspaceCreated', ...Array(5).fill('WorkspaceUpdated')]);
  });

  it('a keyed creation whose instance is killed after its append is created once, and the retry answers that record', async () => {
    const where = await freshDatabase();
    const survivor = await serviceOn(where.databaseUrl, { runProjector: false });
    const stack = await stackOn(where.databaseUrl);
    const token = await survivor.token([org]);
    const projection = await holdProjection(where.databaseUrl);
    const doomed = await processOn(where, { PROJECTION_WAIT_MS: '30000' });
    const keyed = (service: { url: string }) =>
      callApi(service, token, 'create_workspace', { organization_id: org, name: 'Created once' }, { 'idempotency-key': 'crash-create' });
    const lost = keyed(doomed).catch(() => undefined);
    await eventually(async () => (await stack.store.readAll(startOfLog, 10)).length === 1, 20_000);

    await doomed.signal('SIGKILL');
    await lost;
    await projection.release();
    stack.runner().start();
    const created = expectOk(await retryWhileConflict(() => keyed(survivor), 10_000));
    expect(created.name).toBe('Created once');
    expect(await historyTypes(survivor, token, created.id)).toEqual(['WorkspaceCreated']);
    const listed = expectOk(await callApi(survivor, token, 'list_workspaces', { organization_id: org, page: 1, size: 10 }));
    expect(listed.total).toBe(1);
  });

  it('a command whose event is stored answers with its result when the read database goes away before it could answer', async () => {
    const where = await freshDatabase();
    const proxy = await CutProxy.open(new URL(where.databaseUrl));
    cleanups.push(() => proxy.close());
    const stack = await stackOn(where.databaseUrl);
    const projection = await holdProjection(where.databaseUrl);
    const instance = await processOn({ ...where, databaseUrl: proxy.url(where.databaseUrl) }, { PROJECTION_WAIT_MS: '3000' });
    const token = await instance.token([org]);

    const answer = callApi(
      instance,
      token,
      'create_workspace',
      { organization_id: org, name: 'Durable' },
      { 'idempotency-key': 'cut-create' },
    );
    await eventually(async () => (await stack.store.readAll(startOfLog, 10)).length === 1, 20_000);
    proxy.cut();
    const response = await answer;
    expect(expectOk(response).name).toBe('Durable');

    proxy.restore();
    await projection.release();
    stack.runner().start();
    const retried = expectOk(
      await retryWhileConflict(
        () => callApi(instance, token, 'create_workspace', { organization_id: org, name: 'Durable' }, { 'idempotency-key': 'cut-create' }),
        10_000,
      ),
    );
    expect(retried.id).toBe(response.body.data.id);
    expect((await stack.store.readAll(startOfLog, 10)).length).toBe(1);
  });

  describe.runIf(testEventStore === 'eventstoredb-standin')('faults only the EventStoreDB stand-in injects', () => {
    it('an append whose answer was lost says in its 503 that the outcome is unknown, and the keyed retry answers what was stored', async () => {
      const where = await freshDatabase();
      const standIn = await standInFor(where.databaseUrl);
      const service = await serviceOn(where.databaseUrl);
      const token = await service.token([org]);
      const keyed = () =>
        callApi(service, token, 'create_workspace', { organization_id: org, name: 'Unknown' }, { 'idempotency-key': 'lost-answer' });
      standIn.faults.inject('append', { kind: 'lose-answer' }, 1);
      const failed = await keyed();
      expectError(failed, 503, 'unavailable');
      expect(failed.body.error.details).toEqual([{ path: 'request', message: expect.stringContaining('outcome unknown') }]);
      const retried = expectOk(await keyed());
      expect(retried.name).toBe('Unknown');
      expect(standIn.log.stream(workspaceStream(retried.id))).toHaveLength(1);
    });

    it('an append the event store refused the connection for answers a plain 503: nothing was sent, so its outcome is known', async () => {
      const where = await freshDatabase();
      const standIn = await standInFor(where.databaseUrl);
      const service = await serviceOn(where.databaseUrl);
      const token = await service.token([org]);
      expectOk(await callApi(service, token, 'create_workspace', { organization_id: org, name: 'Before' }));
      const logged = standIn.log.size;
      await standIn.stop();
      // A creation reads nothing first: it goes straight to the append.
      const create = () => callApi(service, token, 'create_workspace', { organization_id: org, name: 'Refused' });
      try {
        // The first call after the stop may meet the connection it had, dropped on its way: that one's outcome is unknown.
        let refused = await create();
        for (let tries = 1; tries < 5 && refused.body.error?.details !== undefined; tries++) refused = await create();
        expectError(refused, 503, 'unavailable');
        expect(refused.body.error.details).toBeUndefined();
      } finally {
        await standIn.restart();
      }
      expect(standIn.log.size).toBe(logged);
    });
  });

  it('a frozen projector leader is replaced within 5 s, no command waits longer than PROJECTION_WAIT_MS, and it cannot write when it wakes', async () => {
    const where = await freshDatabase();
    const stack = await stackOn(where.databaseUrl);
    const leader = await processOn(where, { PROJECTION_WAIT_MS: '5000' });
    const leaderPid = async () => (await stack.pool.query<{ pid: number }>('SELECT pid FROM projector_leader')).rows[0]?.pid;
    await eventually(async () => (await leaderPid()) !== undefined, 20_000);
    const frozenPid = await leaderPid();
    const other = await processOn(where, { PROJECTION_WAIT_MS: '5000' });
    const token = await other.token([org]);
    expectOk(await callApi(other, token, 'create_workspace', { organization_id: org, name: 'Before the freeze' }));

    await leader.signal('SIGSTOP');
    cleanups.push(() => leader.signal('SIGCONT'));
    const frozenAt = Date.now();
    // Watched from the freeze on, beside the command: the time to replace the leader is not the command's wait.
    const replaced = eventually(async () => ![undefined, frozenPid].includes(await leaderPid()), 10_000).then(() => Date.now() - frozenAt);
    // Failed, it fails the test where awaited below; handled here too, should the command fail the test first.
    replaced.catch(() => undefined);
    const started = Date.now();
    const during = expectOk(await callApi(other, token, 'create_workspace', { organization_id: org, name: 'During the freeze' }));
    const waitedMs = Date.now() - started;
    const replacedAfterMs = await replaced;

    expect(waitedMs).toBeLessThan(5000 + 1000);
    expect(replacedAfterMs).toBeLessThan(5000);
    const listed = expectOk(await callApi(other, token, 'list_workspaces', { organization_id: org, page: 1, size: 10 }));
    expect(listed.items.map((item: { id: string }) => item.id)).toContain(during.id);

    await leader.signal('SIGCONT');
    expectOk(await callApi(other, token, 'create_workspace', { organization_id: org, name: 'After the freeze' }));
    await sleep(1000);
    expect(await stack.differences()).toEqual([]);
    expect(expectOk(await callApi(leader, token, 'list_workspaces', { organization_id: org, page: 1, size: 10 })).total).toBe(3);
  });
});

/** A TCP proxy in front of PostgreSQL whose connections can be cut (refused and dropped) and restored. */
class CutProxy {
  private readonly sockets = new Set<import('node:net').Socket>();
  private refusing = false;

  private constructor(
    private readonly server: import('node:net').Server,
    readonly port: number,
  ) {}

  static async open(target: URL): Promise<CutProxy> {
    const net = await import('node:net');
    let proxy: CutProxy | undefined;
    const server = net.createServer((client) => {
      if (!proxy || proxy.refusing) return void client.destroy();
      const upstream = net.connect(Number(target.port), target.hostname);
      for (const socket of [client, upstream]) {
        proxy.sockets.add(socket);
        socket.on('close', () => proxy!.sockets.delete(socket));
        socket.on('error', () => undefined);
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    proxy = new CutProxy(server, (server.address() as import('node:net').AddressInfo).port);
    return proxy;
  }

  url(databaseUrl: string): string {
    const proxied = new URL(databaseUrl);
    proxied.port = String(this.port);
    return proxied.toString();
  }

  cut(): void {
    this.refusing = true;
    for (const socket of this.sockets) socket.destroy();
  }

  restore(): void {
    this.refusing = false;
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise((resolve) => this.server.close(resolve));
  }
}
