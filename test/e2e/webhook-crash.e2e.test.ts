import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/database.js';
import { eventStoreUrlFor, prepareReadDatabase } from '../support/event-store.js';
import { startServiceProcess } from '../support/service-process.js';
import { callApi } from '../support/service.js';
import { readDelivery, receive, type ReceivedDelivery } from '../support/webhook-receiver.js';
import { expectOk, sleep } from './helpers.js';

/**
 * Contract §15 across a crash, with real processes: the instance delivering a change is killed
 * with SIGKILL while the receiver holds its attempt open (sent, not recorded). Another instance
 * makes the attempt again, with the same webhook-id, once the lease runs out; nothing is lost.
 */
describe('webhook delivery across kill -9', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  });

  it('delivers again, with the same webhook-id, the change whose attempt was cut by the kill', async () => {
    const received: ReceivedDelivery[] = [];
    let secret = '';
    let holdFirst = true;
    const server = createServer((request, response) => {
      receive(request, async () => {
        received.push(await readDelivery(request, secret));
        // The first attempt is never answered: its instance dies holding it.
        if (!holdFirst) response.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    });
    const databaseUrl = await prepareReadDatabase(await createTestDatabase());
    const where = { databaseUrl, eventStoreUrl: await eventStoreUrlFor(databaseUrl) };
    // A short timeout keeps the lease short (timeout + 30 s): the survivor takes over after it. The
    // kill comes well within the timeout, so the attempt is sent and never recorded.
    const env = { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_TIMEOUT_MS: '3000', WEBHOOK_RETRY_SCHEDULE: '100ms' };
    const doomed = await startServiceProcess({ ...where, env });
    cleanups.push(() => doomed.signal('SIGKILL'));
    const token = await doomed.token(['org_crash_hook']);
    const hook = expectOk(
      await callApi(doomed, token, 'create_webhook', {
        organization_id: 'org_crash_hook',
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
      }),
    );
    secret = hook.secret;
    expectOk(await callApi(doomed, token, 'create_workspace', { organization_id: 'org_crash_hook', name: 'Doomed' }));
    for (let waited = 0; received.length === 0 && waited < 15_000; waited += 50) await sleep(50);
    expect(received).toHaveLength(1);
    await doomed.signal('SIGKILL');
    holdFirst = false;

    const killedAt = Date.now();
    const survivor = await startServiceProcess({ ...where, env });
    cleanups.push(() => survivor.signal('SIGKILL'));
    expectOk(await callApi(survivor, token, 'create_workspace', { organization_id: 'org_crash_hook', name: 'Later' }));
    // The lease the dead instance took (3 s + 30 s) must run out first: the survivor cannot know it died.
    for (let waited = 0; received.length < 3 && waited < 60_000; waited += 100) await sleep(100);
    expect(Date.now() - killedAt).toBeGreaterThan(25_000);
    const [cut, again, later] = received;
    // The cut change twice, with one webhook-id; the later one (another record) once; their order is free.
    const ids = [cut, again, later].map((r) => r!.id);
    expect(ids.filter((id) => id === cut!.id)).toHaveLength(2);
    expect(new Set(ids).size).toBe(2);
    expect(received.every((r) => r.verified)).toBe(true);
    await sleep(500);
    expect(received).toHaveLength(3);
  }, 120_000);
});
