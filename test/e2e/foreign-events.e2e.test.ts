import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { solutionStream, workspaceStream } from '../../src/eventstore/stream-names.js';
import { eventStoreUrlFor } from '../support/event-store.js';
import { writeRawEvent } from '../support/foreign-writes.js';
import { scrape, total } from '../support/metrics.js';
import { startTestService, type TestService } from '../support/service.js';
import { runCli } from '../int/cli-run.js';
import { verifyRecord, type AuditKeys } from '../../src/client/index.js';
import { checkpointCovering, ok, projectionsVerifiable, unverifiableNote } from './helpers.js';

/**
 * A shared event store: other programs write into streams named like the service's. Their events
 * (no metadata, another program's metadata, types the service never defined) are left out by the
 * live projection, the history, `as_of`, the rebuild and verify alike, logged once each with their
 * position and counted, and never stop anything. Runs with events in PostgreSQL and in EventStoreDB.
 */
describe('events another program wrote into service streams', () => {
  let service: TestService;
  let token: string;
  const org = 'org_foreign';
  const logLines: Record<string, unknown>[] = [];
  const foreignLines = () => logLines.filter((line) => line.msg === 'left out an event another program wrote into a service stream');

  beforeAll(async () => {
    const logger = pino({ level: 'warn' }, { write: (line: string) => void logLines.push(JSON.parse(line) as Record<string, unknown>) });
    service = await startTestService({ logger, env: { AUDIT_CHECKPOINT_INTERVAL_MS: '200' } });
    token = await service.token([org]);
  });
  afterAll(() => service?.close());

  it(`are skipped by the projector, commands, history, as_of, verify and the rebuild, and logged and counted once each${unverifiableNote}`, async () => {
    const workspace = await ok(service, token, 'create_workspace', { organization_id: org, name: 'Shared store' });
    const solution = await ok(service, token, 'create_solution', { workspace_id: workspace.id, name: 'Kept' });
    const beforeForeign = new Date().toISOString().replace(/\.(\d{3})Z$/, '.$1999Z');

    await writeRawEvent(service.databaseUrl, workspaceStream(workspace.id), {
      type: 'WorkspaceUpdated',
      data: { id: workspace.id, name: 'hijacked' },
    });
    await writeRawEvent(service.databaseUrl, workspaceStream(workspace.id), {
      type: 'WorkspaceCreated',
      data: { id: 'ws_other', organization_id: org, name: 'not ours' },
      metadata: { $correlationId: 'crm-42', source: 'crm' },
    });
    await writeRawEvent(service.databaseUrl, solutionStream(solution.id), {
      type: 'InvoiceSent',
      data: { amount: 5 },
      metadata: { source: 'billing' },
    });
    await writeRawEvent(service.databaseUrl, workspaceStream('ws_made_by_another_program'), { type: 'Hello', data: { hi: true } });

    // A command on the record appends after the foreign events (its expected version counts them)
    // and waits for the projection, which must pass them to answer.
    const updated = await ok(service, token, 'update_workspace', { id: workspace.id, name: 'Renamed' });
    expect(updated.name).toBe('Renamed');
    expect(await ok(service, token, 'update_solution', { id: solution.id, name: 'Still kept' })).toMatchObject({ name: 'Still kept' });
    expect((await ok(service, token, 'get_workspace', { id: workspace.id })).name).toBe('Renamed');
    expect(await ok(service, token, 'list_workspaces', { organization_id: org, page: 1, size: 10 })).toMatchObject({ total: 1 });

    const history = await ok(service, token, 'get_workspace_history', { id: workspace.id, page: 1, size: 10 });
    expect(history.items.map((item) => item.type)).toEqual(['WorkspaceCreated', 'WorkspaceUpdated']);
    expect(history.total).toBe(2);
    // Versions are the events' places in the stream, the foreign ones counted (contract §12), as the feed and proofs give them.
    expect(history.items.map((item) => item.version)).toEqual([1, 4]);
    const changes = await ok(service, token, 'list_changes', { organization_id: org, workspace_id: workspace.id });
    expect(changes.items.filter((change) => change.type.startsWith('Workspace')).map((change) => change.version)).toEqual([1, 4]);
    const diff = await ok(service, token, 'diff_workspace', { id: workspace.id, from: beforeForeign });
    expect(diff.changes.map((item) => item.version)).toEqual([4]);
    const provenance = await ok(service, token, 'get_workspace_provenance', { id: workspace.id });
    expect(provenance.fields.find((field) => field.path === '/name')).toMatchObject({ value: 'Renamed', version: 4 });
    // The proof of the record verifies with the client's own function: the foreign events are outside its chain.
    const checkpoint = await checkpointCovering(service, token, org, 4);
    const proof = await ok(service, token, 'get_workspace_proof', { id: workspace.id, size: checkpoint.size });
    expect(proof.events.map((event) => event.version)).toEqual([1, 4]);
    const keys = (await (await fetch(`${service.url}/audit-keys`)).json()) as AuditKeys;
    expect(await verifyRecord(proof, checkpoint, keys)).toEqual({ valid: true, problems: [] });
    const solutionHistory = await ok(service, token, 'get_solution_history', { id: solution.id, page: 1, size: 10 });
    expect(solutionHistory.items.map((item) => item.type)).toEqual(['SolutionCreated', 'SolutionUpdated']);
    expect((await ok(service, token, 'get_workspace', { id: workspace.id, as_of: beforeForeign })).name).toBe('Shared store');

    const ready = await fetch(`${service.url}/readyz`);
    expect(ready.status).toBe(200);

    const metrics = await scrape(`${service.url}/metrics`);
    expect(total(metrics, 'wsapi_foreign_events_total', { reason: 'no_metadata' })).toBe(2);
    expect(total(metrics, 'wsapi_foreign_events_total', { reason: 'foreign_metadata' })).toBe(2);
    const logged = foreignLines();
    expect(logged).toHaveLength(4);
    expect(logged.find((line) => line.stream === workspaceStream(workspace.id) && line.version === '2')).toMatchObject({
      level: 40,
      type: 'WorkspaceUpdated',
      reason: 'no_metadata',
      position: expect.stringMatching(/^\d+:\d+$/),
    });

    if (projectionsVerifiable) {
      const env = { EVENTSTORE_URL: (await eventStoreUrlFor(service.databaseUrl)) ?? '' };
      const verified = await runCli('src/cli/verify.ts', [], service.databaseUrl, env);
      expect(verified.stdout, verified.stderr).toMatch(/^no differences \(1 workspaces, 1 solutions\)/);
      const rebuilt = await runCli('src/cli/rebuild.ts', [], service.databaseUrl, env);
      expect(rebuilt.code, rebuilt.stderr).toBe(0);
      expect((await runCli('src/cli/verify.ts', [], service.databaseUrl, env)).code).toBe(0);
      const history = await runCli('src/cli/history.ts', [workspace.id], service.databaseUrl, env);
      expect(history.stdout).toMatch(/: 2 event\(s\)\n/);
    }

    // Read again and again: still logged and counted once each.
    await ok(service, token, 'get_workspace_history', { id: workspace.id, page: 1, size: 10 });
    await ok(service, token, 'update_workspace', { id: workspace.id, name: 'Renamed again' });
    expect(foreignLines()).toHaveLength(4);
    const again = await scrape(`${service.url}/metrics`);
    expect(total(again, 'wsapi_foreign_events_total')).toBe(4);
    expect((await ok(service, token, 'list_workspaces', { organization_id: org, page: 1, size: 10 })).items[0]!.name).toBe('Renamed again');
  });
});
