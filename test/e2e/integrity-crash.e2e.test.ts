import { generateKeyPairSync } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { runCli } from '../int/cli-run.js';
import { createTestDatabase } from '../support/database.js';
import { eventStoreUrlFor, prepareReadDatabase } from '../support/event-store.js';
import { startServiceProcess, type ServiceProcess } from '../support/service-process.js';
import { callApi } from '../support/service.js';
import { checkpointCovering, sleep } from './helpers.js';

const org = 'org_integrity_crash';

/**
 * The tree's keeper killed with SIGKILL while events arrive and checkpoints are signed every
 * 100 ms: each of its batches is one transaction and each checkpoint one statement, so what is
 * left is whole, and the next instance goes on from it.
 */
describe('the integrity tree after kill -9', () => {
  const processes: ServiceProcess[] = [];
  afterEach(async () => {
    for (const instance of processes.splice(0)) await instance.signal('SIGKILL');
  });

  it('is found whole by audit:verify, and signing resumes in the next instance', async () => {
    const databaseUrl = await prepareReadDatabase(await createTestDatabase());
    const eventStoreUrl = await eventStoreUrlFor(databaseUrl);
    const key = generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
    const env = { AUDIT_CHECKPOINT_INTERVAL_MS: '100', AUDIT_SIGNING_KEY: key };
    const start = async () => {
      const instance = await startServiceProcess({ databaseUrl, eventStoreUrl, env });
      processes.push(instance);
      return instance;
    };
    const verify = () => runCli('src/cli/audit-verify.ts', [], databaseUrl, eventStoreUrl ? { EVENTSTORE_URL: eventStoreUrl } : {});

    const first = await start();
    const token = await first.token([org]);
    const writes = Array.from({ length: 40 }, (_, index) =>
      callApi(first, token, 'create_workspace', { organization_id: org, name: `w${index}` }).catch(() => undefined),
    );
    await sleep(150);
    await first.signal('SIGKILL');
    await Promise.all(writes);

    const afterCrash = await verify();
    expect(afterCrash.stdout).toMatch(/^no breaks/);
    expect(afterCrash.code).toBe(0);

    const second = await start();
    const created = await callApi(second, token, 'create_workspace', { organization_id: org, name: 'after' });
    expect(created.status).toBe(200);
    const stored = await callApi(second, token, 'list_workspaces', { page: 1, size: 1, organization_id: org });
    const checkpoint = await checkpointCovering(second, token, org, stored.body.data.total);
    expect(checkpoint.size).toBe(stored.body.data.total);
    const resumed = await verify();
    expect(resumed.stdout).toMatch(/^no breaks/);
    expect(resumed.code).toBe(0);
  });
});
