import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { workspaceStream } from '../../src/eventstore/stream-names.js';
import { eventStoreUrlFor, standInFor, testEventStore } from '../support/event-store.js';
import { writeRawEvent } from '../support/foreign-writes.js';
import { scrape, total } from '../support/metrics.js';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { eventually } from '../support/stack.js';
import { runCli } from '../int/cli-run.js';
import { expectError, expectOk } from './helpers.js';

/**
 * An event of the service's own that the projector cannot apply (here: a type this version does
 * not know, as a newer version would write during a rolling deployment). The projector stops at
 * it; /readyz and the log name it; /metrics counts it; commands answer at once, saying in a header
 * that the projection is behind; the operator command lists it, retries it and skips it, and the
 * decision is recorded. Runs with events in PostgreSQL and in EventStoreDB.
 */
describe('an event the projector cannot apply', () => {
  let service: TestService;
  let token: string;
  const org = 'org_dead_letters';
  const logLines: Record<string, unknown>[] = [];

  beforeAll(async () => {
    const logger = pino({ level: 'warn' }, { write: (line: string) => void logLines.push(JSON.parse(line) as Record<string, unknown>) });
    // A command that waited for the projection would outlast the test's own timeout.
    service = await startTestService({ logger, env: { PROJECTION_WAIT_MS: '600000' } });
    token = await service.token([org]);
  });
  afterAll(() => service?.close());

  const readyz = async () => {
    const response = await fetch(`${service.url}/readyz`);
    return { status: response.status, body: (await response.json()) as { status: string; checks: Record<string, string> } };
  };
  const tool = async (...args: string[]) =>
    runCli('src/cli/dead-letters.ts', args, service.databaseUrl, { EVENTSTORE_URL: (await eventStoreUrlFor(service.databaseUrl)) ?? '' });

  it('stops the projector, is shown and counted, lets commands answer at once, and is listed, retried and skipped with the operator command', async () => {
    const kept = expectOk(await callApi(service, token, 'create_workspace', { organization_id: org, name: 'Before' }));
    const stream = workspaceStream('ws_from_a_newer_version');
    await writeRawEvent(service.databaseUrl, stream, {
      type: 'WorkspaceArchived',
      data: { id: 'ws_from_a_newer_version' },
      metadata: { actor: 'user-9', request_id: 'r-9', occurred_at: '2030-01-01T00:00:00.000000Z', schema_version: 3 },
    });

    await eventually(async () => (await readyz()).status === 503);
    const notReady = await readyz();
    expect(notReady.body.checks).toMatchObject({ event_store: 'ok', read_database: 'ok', projection: 'stopped' });
    expect(notReady.body.checks.dead_letter).toMatch(
      new RegExp(`${stream} version 1 \\(WorkspaceArchived, position \\d+:\\d+\\): .*unknown`),
    );
    // Logged just after the dead letter is recorded, which /readyz may see first.
    await eventually(() => logLines.some((line) => line.level === 50 && line.stream === stream));
    expect(logLines.find((line) => line.level === 50 && line.stream === stream)).toMatchObject({
      type: 'WorkspaceArchived',
      msg: expect.stringContaining('projections:dead-letters'),
    });

    // Commands answer at once with their result, and say that reads may not show it yet.
    const created = await callApi(service, token, 'create_workspace', { organization_id: org, name: 'While stopped' });
    expect(expectOk(created).name).toBe('While stopped');
    expect(created.headers.get('x-projection-behind')).toBe('true');
    const updated = await callApi(service, token, 'update_workspace', { id: kept.id, name: 'Renamed while stopped' });
    expect(expectOk(updated).name).toBe('Renamed while stopped');
    expect(updated.headers.get('x-projection-behind')).toBe('true');

    const stopped = await scrape(`${service.url}/metrics`);
    expect(total(stopped, 'wsapi_projection_dead_letters', { state: 'blocking' })).toBe(1);
    expect(total(stopped, 'wsapi_ready', { check: 'all' })).toBe(0);
    // By part, as the alert's description names them: the dead letter is the projection's failure.
    const parts = stopped.series.get('wsapi_ready')!.metrics.map((sample) => `${sample.labels?.check}=${sample.value}`);
    expect(parts.sort()).toEqual(['all=0', 'event_store=1', 'projection=0', 'read_database=1']);

    const listed = await tool('list');
    expect(listed.code, listed.stderr).toBe(0);
    const row = listed.stdout.split('\n').find((line) => line.includes(stream))!;
    expect(row).toMatch(/^(\d+)\s+blocking\s+\d+:\d+\s+\S+\s+1\s+WorkspaceArchived\s+1\s/);
    const id = /^(\d+)/.exec(row)![1]!;

    // The cause is still there: the retry fails again, and the list shows the second attempt.
    expect((await tool('retry', id, '--by', 'alice')).code).toBe(0);
    await eventually(async () => /WorkspaceArchived\s+2\s/.test((await tool('list')).stdout));

    const skipped = await tool('skip', id, '--by', 'alice', '--note', 'written by version 3, rolled back');
    expect(skipped.code, skipped.stderr).toBe(0);
    expect(skipped.stdout).toMatch(`dead letter ${id} skipped by alice`);
    await eventually(async () => (await readyz()).status === 200);
    const after = await callApi(service, token, 'create_workspace', { organization_id: org, name: 'After' });
    expectOk(after);
    expect(after.headers.get('x-projection-behind')).toBeNull();
    const names = expectOk(await callApi(service, token, 'list_workspaces', { organization_id: org, page: 1, size: 10 })).items.map(
      (item: { name: string }) => item.name,
    );
    expect(names).toEqual(['Renamed while stopped', 'While stopped', 'After']);

    const resolved = await scrape(`${service.url}/metrics`);
    expect(total(resolved, 'wsapi_projection_dead_letters', { state: 'blocking' })).toBe(0);
    expect(total(resolved, 'wsapi_projection_dead_letters', { state: 'skipped' })).toBe(1);
    expect((await tool('list')).stdout).toMatch(/skipped .*alice .*\(written by version 3, rolled back\)/);
    const again = await tool('skip', id);
    expect({ code: again.code, stderr: again.stderr }).toEqual({
      code: 1,
      stderr: `no unresolved dead letter ${id} (see npm run projections:dead-letters -- list)\n`,
    });
  });

  it('refuses an action without a dead letter id in one line', async () => {
    const outcome = await tool('retry');
    expect({ code: outcome.code, stderr: outcome.stderr }).toEqual({
      code: 2,
      stderr: 'npm run projections:dead-letters: retry needs the id of a dead letter, as list shows it (see --help)\n',
    });
  });

  describe.runIf(testEventStore === 'eventstoredb-standin')('a refusal only the EventStoreDB stand-in injects', () => {
    it('answers 500, not 503, when EventStoreDB refuses an append, and logs why', async () => {
      const standIn = await standInFor(service.databaseUrl);
      standIn.faults.inject('append', { kind: 'unknown', details: 'Unexpected OperationResult: InvalidTransaction' }, 1);
      const refused = await callApi(service, token, 'create_workspace', { organization_id: org, name: 'Refused' });
      expectError(refused, 500, 'internal_error');
      expect(logLines.find((line) => line.level === 50 && line.request_id === refused.body.error.request_id)).toMatchObject({
        err: expect.objectContaining({ message: expect.stringContaining('Unexpected OperationResult: InvalidTransaction') }),
      });
    });
  });
});
