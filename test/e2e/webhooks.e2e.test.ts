import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readdirSync, readFileSync } from 'node:fs';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricPrefix } from '../../src/observability/metrics.js';
import { scrape, total } from '../support/metrics.js';
import { startTestService, type TestService } from '../support/service.js';
import { receive } from '../support/webhook-receiver.js';
import { expectError, expectValidation, jsonHeaders, ok, rawPost, sleep } from './helpers.js';

/** What the receiver got: each request's headers and body, verified with the standardwebhooks package. */
type Received = { id: string; signature: string; body: any; verified: boolean; path: string };

/**
 * A real HTTP receiver on loopback. `script` answers each request by path: a status, 'hang' (no
 * answer within the service's timeout), or a redirect. Every request is verified with the
 * standardwebhooks package, not the project's code.
 */
class Receiver {
  readonly received: Received[] = [];
  secrets: string[] = [];
  script: (request: { path: string; id: string; body: any; count: number }) => number | 'hang' | 'redirect' = () => 200;
  private server!: Server;
  url = '';

  async start(): Promise<void> {
    this.server = createServer((request, response) => receive(request, () => this.answer(request, response)));
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  private async answer(request: IncomingMessage, response: ServerResponse): Promise<void> {
    let text = '';
    for await (const chunk of request) text += chunk;
    const headers = Object.fromEntries(Object.entries(request.headers).map(([key, value]) => [key, String(value)]));
    const verified = this.secrets.length > 0 && this.secrets.every((secret) => verifies(secret, text, headers));
    const body = JSON.parse(text || 'null');
    const id = headers['webhook-id'] ?? '';
    const path = request.url ?? '/';
    this.received.push({ id, signature: headers['webhook-signature'] ?? '', body, verified, path });
    const answer = this.script({ path, id, body, count: this.received.filter((r) => r.id === id && r.path === path).length });
    if (answer === 'hang') {
      setTimeout(() => response.writeHead(200).end(), 3000);
      return;
    }
    if (answer === 'redirect') {
      response.writeHead(302, { location: `${this.url}/redirected` }).end();
      return;
    }
    response.writeHead(answer).end();
  }

  deliveries(path: string): Received[] {
    return this.received.filter((r) => r.path === path);
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

function verifies(secret: string, body: string, headers: Record<string, string>): boolean {
  try {
    new StandardWebhook(secret).verify(body, headers);
    return true;
  } catch {
    return false;
  }
}

async function eventually<T>(read: () => Promise<T> | T, done: (value: T) => boolean, timeoutMs = 15_000): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > until) return value;
    await sleep(50);
  }
}

/** A nice value no other thread of the test process has, so that the delivery thread is told apart. */
const deliveryNice = 7;

/** The nice values of this process's threads (Linux: each thread has its own). */
function threadNiceValues(): number[] {
  return readdirSync('/proc/self/task').map((task) =>
    Number(readFileSync(`/proc/self/task/${task}/stat`, 'utf8').split(') ')[1]!.split(' ')[16]),
  );
}

describe('webhooks', () => {
  let service: TestService;
  let receiver: Receiver;
  let token: string;
  const org = 'org_hooks';

  beforeAll(async () => {
    receiver = new Receiver();
    await receiver.start();
    service = await startTestService({
      env: {
        WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
        WEBHOOK_RETRY_SCHEDULE: '100ms,200ms,300ms',
        WEBHOOK_TIMEOUT_MS: '1000',
        WEBHOOK_DELIVERY_NICE: String(deliveryNice),
      },
    });
    token = await service.token([org]);
  });
  afterAll(async () => {
    await service?.close();
    await receiver?.close();
  });

  const createHook = async (path: string, extra: Record<string, unknown> = {}) => {
    const created = await ok(service, token, 'create_webhook', { organization_id: org, url: `${receiver.url}${path}`, ...extra });
    receiver.secrets = [created.secret];
    return created;
  };

  it.runIf(process.platform === 'linux')(
    "delivers from a thread of its own, started with the first webhook, at WEBHOOK_DELIVERY_NICE, the API's thread left as it was",
    async () => {
      const atDeliveryNice = () => threadNiceValues().filter((value) => value === deliveryNice).length;
      expect(atDeliveryNice()).toBe(0);
      const created = await createHook('/first');
      expect(await eventually(atDeliveryNice, (count) => count === 1)).toBe(1);
      expect(threadNiceValues()[0]).toBe(0);
      await ok(service, token, 'delete_webhook', { id: created.id });
    },
  );

  it('creates a webhook with a secret shown once, and delivers each change signed, once, with its change id', async () => {
    const created = await createHook('/plain');
    expect(created.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(created).toMatchObject({ organization_id: org, enabled: true, disabled_reason: null, description: '' });
    expect(created.types).toHaveLength(6);
    const shown = await ok(service, token, 'get_webhook', { id: created.id });
    expect(shown).not.toHaveProperty('secret');
    expect((await ok(service, token, 'list_webhooks', { page: 1, size: 10 })).items.map((w) => w.id)).toContain(created.id);

    const workspace = await ok(service, token, 'create_workspace', { organization_id: org, name: 'Hooked' });
    await ok(service, token, 'update_workspace', { id: workspace.id, name: 'Hooked 2' });
    const got = await eventually(
      () => receiver.deliveries('/plain'),
      (list) => list.length >= 2,
    );
    const changes = (await ok(service, token, 'list_changes', { organization_id: org, workspace_id: workspace.id })).items;
    expect(got.map((r) => r.id)).toEqual(changes.map((change) => change.id));
    expect(got.every((r) => r.verified)).toBe(true);
    expect(got[0]!.body).toEqual({ type: 'WorkspaceCreated', timestamp: changes[0]!.occurred_at, data: changes[0] });
    const log = await eventually(
      () => ok(service, token, 'list_webhook_deliveries', { id: created.id, page: 1, size: 10 }),
      (page) => page.items.every((d) => d.status === 'succeeded'),
    );
    expect(log.items.map((d) => [d.change_id, d.status, d.attempts, d.last_status_code])).toEqual(
      changes.map((change) => [change.id, 'succeeded', 1, 200]),
    );
    // Paged in log order, each page with the total, and past the last page an empty one.
    for (const [page, expected] of [
      [1, [changes[0]!.id]],
      [2, [changes[1]!.id]],
      [3, []],
    ] as const) {
      const onePerPage = await ok(service, token, 'list_webhook_deliveries', { id: created.id, page, size: 1 });
      expect([onePerPage.total, onePerPage.items.map((d) => d.change_id)]).toEqual([2, expected]);
    }
    await sleep(300);
    expect(receiver.deliveries('/plain')).toHaveLength(2);
    // Counted by the delivery thread, in the service's metrics.
    expect(
      total(await scrape(`${service.url}/metrics`), `${metricPrefix}webhook_attempts_total`, { outcome: 'succeeded' }),
    ).toBeGreaterThanOrEqual(2);
    await ok(service, token, 'delete_webhook', { id: created.id });
  });

  it('retries a 500 and a timeout with the same webhook-id, holds back only the same record, then fails when the schedule is spent', async () => {
    const created = await createHook('/flaky');
    // A's creation fails twice (500, then no answer in time); B's goes through at once.
    receiver.script = ({ path, body, count }) =>
      path === '/flaky' && body.type === 'WorkspaceCreated' && body.data.data.name === 'A' && count <= 2
        ? count === 1
          ? 500
          : 'hang'
        : 200;
    const [first, second] = [
      await ok(service, token, 'create_workspace', { organization_id: org, name: 'A' }),
      await ok(service, token, 'create_workspace', { organization_id: org, name: 'B' }),
    ];
    await ok(service, token, 'update_workspace', { id: first.id, name: 'A2' });
    const got = await eventually(
      () => receiver.deliveries('/flaky'),
      (list) => list.filter((r) => r.body.data.workspace_id === first.id).length >= 4,
    );
    const ofFirst = got.filter((r) => r.body.data.workspace_id === first.id);
    expect(ofFirst.map((r) => r.body.type)).toEqual(['WorkspaceCreated', 'WorkspaceCreated', 'WorkspaceCreated', 'WorkspaceUpdated']);
    expect(new Set(ofFirst.slice(0, 3).map((r) => r.id)).size).toBe(1);
    // B was not held back behind A's retries.
    expect(got.findIndex((r) => r.body.data.workspace_id === second.id)).toBeLessThan(got.indexOf(ofFirst[2]!));
    const log = await ok(service, token, 'list_webhook_deliveries', { id: created.id, page: 1, size: 10, status: 'succeeded' });
    expect(log.items.find((d) => d.change_id === ofFirst[0]!.id)).toMatchObject({ attempts: 3, last_status_code: 200 });

    receiver.script = ({ path }) => (path === '/flaky' ? 500 : 200);
    await ok(service, token, 'update_workspace', { id: second.id, name: 'B2' });
    const failed = await eventually(
      () => ok(service, token, 'list_webhook_deliveries', { id: created.id, page: 1, size: 10, status: 'failed' }),
      (page) => page.items.length === 1,
    );
    expect(failed.items[0]).toMatchObject({ status: 'failed', attempts: 4, last_status_code: 500, next_attempt_at: null });

    // Redelivery: the same change again, now, with the same id.
    receiver.script = () => 200;
    const again = await ok(service, token, 'redeliver_webhook_change', { id: created.id, change_id: failed.items[0]!.change_id });
    expect(again).toMatchObject({ status: 'pending', attempts: 0 });
    await eventually(
      () => ok(service, token, 'list_webhook_deliveries', { id: created.id, page: 1, size: 10, status: 'failed' }),
      (page) => page.items.length === 0,
    );
    expect(receiver.deliveries('/flaky').at(-1)!.id).toBe(failed.items[0]!.change_id);
    await ok(service, token, 'delete_webhook', { id: created.id });
  });

  it('redelivers only a change the webhook was due: its organization, one of its types, committed after its creation', async () => {
    const send = (as: string, params: unknown) =>
      rawPost(service, JSON.stringify({ query: 'redeliver_webhook_change', params }), jsonHeaders(as));
    const changesOf = async (workspaceId: string) =>
      (await ok(service, token, 'list_changes', { organization_id: org, workspace_id: workspaceId })).items;
    const before = await ok(service, token, 'create_workspace', { organization_id: org, name: 'Before' });
    const created = await createHook('/due', { types: ['WorkspaceCreated'] });
    const after = await ok(service, token, 'create_workspace', { organization_id: org, name: 'After' });
    await ok(service, token, 'update_workspace', { id: after.id, name: 'After 2' });
    const [beforeCreated] = await changesOf(before.id);
    const [afterCreated, afterUpdated] = await changesOf(after.id);
    await eventually(
      () => receiver.deliveries('/due'),
      (list) => list.length >= 1,
    );
    const refused = async (as: string, params: unknown, message: string) => {
      const response = await send(as, params);
      expectError(response, 404, 'not_found');
      expect(response.body.error.message).toBe(message);
    };
    // Committed before the webhook was created; of a type it does not take.
    await refused(token, { id: created.id, change_id: beforeCreated!.id }, 'change not found');
    await refused(token, { id: created.id, change_id: afterUpdated!.id }, 'change not found');
    // A webhook unknown, or another organization's: the webhook is what is not found.
    await refused(token, { id: 'wh_unknown', change_id: afterCreated!.id }, 'webhook not found');
    await refused(await service.token(['org_hooks_other']), { id: created.id, change_id: afterCreated!.id }, 'webhook not found');
    // Keyed (contract §2): a retry with the same key answers the kept delivery, and sends nothing again.
    const keyed = () =>
      rawPost(service, JSON.stringify({ query: 'redeliver_webhook_change', params: { id: created.id, change_id: afterCreated!.id } }), {
        ...jsonHeaders(token),
        'idempotency-key': 'redeliver-after-created',
      });
    const redelivered = await keyed();
    expect(redelivered.status).toBe(200);
    expect(redelivered.body.data).toMatchObject({
      change_id: afterCreated!.id,
      status: 'pending',
      attempts: 0,
    });
    const replayed = await keyed();
    expect([replayed.status, replayed.headers.get('idempotent-replayed'), replayed.body]).toEqual([200, 'true', redelivered.body]);
    await eventually(
      () => receiver.deliveries('/due'),
      (list) => list.length >= 2,
    );
    expect(receiver.deliveries('/due').map((delivery) => delivery.id)).toEqual([afterCreated!.id, afterCreated!.id]);
    await ok(service, token, 'delete_webhook', { id: created.id });
  });

  it('never follows a redirect, and a 410 disables the webhook at once', async () => {
    const redirected = await createHook('/moved', { types: ['WorkspaceCreated'] });
    receiver.script = ({ path }) => (path === '/moved' ? 'redirect' : path === '/gone' ? 410 : 200);
    await ok(service, token, 'create_workspace', { organization_id: org, name: 'R' });
    const failedAttempts = await eventually(
      () => ok(service, token, 'list_webhook_deliveries', { id: redirected.id, page: 1, size: 10 }),
      (page) => page.items[0]?.status === 'failed',
    );
    expect(failedAttempts.items[0]).toMatchObject({ attempts: 4, last_status_code: 302 });
    expect(receiver.deliveries('/redirected')).toEqual([]);
    await ok(service, token, 'delete_webhook', { id: redirected.id });

    const gone = await createHook('/gone', { types: ['WorkspaceCreated'] });
    await ok(service, token, 'create_workspace', { organization_id: org, name: 'G1' });
    const disabled = await eventually(
      () => ok(service, token, 'get_webhook', { id: gone.id }),
      (hook) => !hook.enabled,
    );
    expect(disabled).toMatchObject({ enabled: false, disabled_reason: 'gone' });
    await ok(service, token, 'create_workspace', { organization_id: org, name: 'G2' });
    await sleep(500);
    expect(receiver.deliveries('/gone')).toHaveLength(1);
    // Enabled again, it delivers what waited.
    receiver.script = () => 200;
    expect(await ok(service, token, 'update_webhook', { id: gone.id, enabled: true })).toMatchObject({
      enabled: true,
      disabled_reason: null,
    });
    await eventually(
      () => receiver.deliveries('/gone'),
      (list) => list.length >= 2,
    );
    await ok(service, token, 'delete_webhook', { id: gone.id });
  });

  it('shows no next_attempt_at for a pending delivery as soon as its webhook is disabled, even with an attempt out', async () => {
    const created = await createHook('/paused', { types: ['WorkspaceCreated'] });
    // Each attempt gets no answer within the timeout: the delivery stays pending for seconds.
    receiver.script = ({ path }) => (path === '/paused' ? 'hang' : 200);
    await ok(service, token, 'create_workspace', { organization_id: org, name: 'Paused' });
    const deliveries = () => ok(service, token, 'list_webhook_deliveries', { id: created.id, page: 1, size: 10 });
    const attempted = await eventually(deliveries, (page) => page.items[0]?.attempts === 1);
    expect(attempted.items[0]).toMatchObject({ status: 'pending' });
    expect(attempted.items[0]!.next_attempt_at).not.toBeNull();
    await ok(service, token, 'update_webhook', { id: created.id, enabled: false });
    expect((await deliveries()).items[0]).toMatchObject({ status: 'pending', next_attempt_at: null });
    // The attempt out ends in a failure with a retry planned meanwhile: still none shown while disabled.
    await sleep(1500);
    expect((await deliveries()).items[0]).toMatchObject({ status: 'pending', attempts: 1, next_attempt_at: null });
    receiver.script = () => 200;
    await ok(service, token, 'update_webhook', { id: created.id, enabled: true });
    await eventually(deliveries, (page) => page.items[0]?.status === 'succeeded');
    expect((await deliveries()).items[0]).toMatchObject({ status: 'succeeded', attempts: 2 });
    await ok(service, token, 'delete_webhook', { id: created.id });
  });

  it('given a delivery parked while its webhook was disabled, sends it within a few seconds of the webhook being enabled again', async () => {
    const created = await createHook('/parked', { types: ['WorkspaceCreated'] });
    receiver.script = ({ path }) => (path === '/parked' ? 'hang' : 200);
    await ok(service, token, 'create_workspace', { organization_id: org, name: 'Parked' });
    const deliveries = () => ok(service, token, 'list_webhook_deliveries', { id: created.id, page: 1, size: 10 });
    await eventually(deliveries, (page) => page.items[0]?.attempts === 1);
    await ok(service, token, 'update_webhook', { id: created.id, enabled: false });
    // Parked by the delivery thread's periodic sweep (every 10 s): the row loses its next attempt.
    const parked = async () =>
      (
        await service.runtime.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM webhook_deliveries WHERE webhook_id = $1 AND status = 'pending' AND next_attempt_at IS NULL`,
          [created.id],
        )
      ).rows[0]!.n;
    expect(await eventually(parked, (count) => count === 1, 20_000)).toBe(1);
    receiver.script = () => 200;
    await ok(service, token, 'update_webhook', { id: created.id, enabled: true });
    // The next periodic sweep is about 10 s away: enabling asks the thread for one now.
    const resumed = await eventually(deliveries, (page) => page.items[0]?.status === 'succeeded', 5_000);
    expect(resumed.items[0]).toMatchObject({ status: 'succeeded', attempts: 2 });
    await ok(service, token, 'delete_webhook', { id: created.id });
  });

  it.each([
    ['a rotation', 1],
    // The second must not drop the first: every secret replaced within 24 h keeps signing.
    ['two rotations in a row', 2],
  ])('after %s, signs with every secret, each verifiable by standardwebhooks', async (_, rotations) => {
    const created = await createHook(`/rotated-${rotations}`, { types: ['WorkspaceCreated'] });
    const secrets = [created.secret];
    for (let i = 0; i < rotations; i++) secrets.push((await ok(service, token, 'rotate_webhook_secret', { id: created.id })).secret);
    expect(new Set(secrets).size).toBe(rotations + 1);
    // Every one of them must verify the delivery (the receiver checks each).
    receiver.secrets = secrets;
    await ok(service, token, 'create_workspace', { organization_id: org, name: `Rot${rotations}` });
    const [delivery] = await eventually(
      () => receiver.deliveries(`/rotated-${rotations}`),
      (list) => list.length >= 1,
    );
    expect(delivery!.signature.split(' ')).toHaveLength(rotations + 1);
    expect(delivery!.verified).toBe(true);
    await ok(service, token, 'delete_webhook', { id: created.id });
  });

  it("refuses without webhooks:manage (403), hides other organizations' webhooks (404), and checks params", async () => {
    const created = await createHook('/private', { description: 'mine' });
    const send = (as: string, query: string, params: unknown) => rawPost(service, JSON.stringify({ query, params }), jsonHeaders(as));
    expectError(await send(await service.token([org], 'workspaces:read'), 'get_webhook', { id: created.id }), 403, 'forbidden');
    const stranger = await service.token(['org_hooks_other']);
    expectError(await send(stranger, 'get_webhook', { id: created.id }), 404, 'not_found');
    expectError(await send(stranger, 'delete_webhook', { id: created.id }), 404, 'not_found');
    expectError(await send(stranger, 'create_webhook', { organization_id: org, url: 'https://example.com/' }), 404, 'not_found');
    expect((await ok(service, stranger, 'list_webhooks', { page: 1, size: 10 })).total).toBe(0);
    expectError(await send(token, 'get_webhook', { id: 'ws_wrongprefix' }), 400, 'validation_error');
    expectError(await send(token, 'create_webhook', { organization_id: org, url: 'ftp://example.com/' }), 400, 'validation_error');
    // A bad parameter is refused before access is looked at (contract §2), as update_webhook does.
    expectError(await send(stranger, 'create_webhook', { organization_id: org, url: 'ftp://example.com/' }), 400, 'validation_error');
    // Stored as given or refused (contract §5): never a NUL PostgreSQL refuses (a 500), nor a lone surrogate replaced.
    for (const url of [`${receiver.url}/a\u0000b`, `${receiver.url}/a\ud800b`, `${receiver.url}/a\tb`]) {
      expectError(await send(token, 'create_webhook', { organization_id: org, url }), 400, 'validation_error');
      expectError(await send(token, 'update_webhook', { id: created.id, url }), 400, 'validation_error');
    }
    // A type listed twice, a URL naming port 0: refused, with the service's words, nothing stored.
    const refusedAt = async (query: string, params: unknown, path: string, message: string) => {
      const response = await send(token, query, params);
      expectValidation(response, path);
      expect(response.body.error.details).toContainEqual({ path, message });
    };
    const repeated = ['WorkspaceCreated', 'WorkspaceUpdated', 'WorkspaceCreated'];
    const listedTwice = 'must list each type once ("WorkspaceCreated" is repeated)';
    await refusedAt('create_webhook', { organization_id: org, url: receiver.url, types: repeated }, 'params.types', listedTwice);
    await refusedAt('update_webhook', { id: created.id, types: repeated }, 'params.types', listedTwice);
    for (const url of ['https://8.8.8.8:0/', `${receiver.url.replace(/:\d+$/, ':0')}/x`]) {
      await refusedAt('create_webhook', { organization_id: org, url }, 'params.url', 'must not name port 0');
      await refusedAt('update_webhook', { id: created.id, url }, 'params.url', 'must not name port 0');
    }
    expect(await ok(service, token, 'get_webhook', { id: created.id })).toMatchObject({
      url: `${receiver.url}/private`,
      types: created.types,
    });
    await ok(service, token, 'delete_webhook', { id: created.id });
    expectError(await send(token, 'get_webhook', { id: created.id }), 404, 'not_found');
  });
});
