import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { expectOk, ok, timestampPattern } from './helpers.js';

/** Contract §8: exact format, created == updated on create, strictly increasing updated_at, fixed created_at. */
describe('timestamps', () => {
  let service: TestService;
  let token: string;
  const org = 'org_time';

  beforeAll(async () => {
    service = await startTestService();
    token = await service.token([org]);
  });
  afterAll(() => service?.close());

  /** Milliseconds since the epoch of a contract timestamp, checking it is a real UTC instant. */
  function instant(timestamp: string): number {
    expect(timestamp).toMatch(timestampPattern);
    const millis = Date.parse(timestamp);
    expect(Number.isNaN(millis)).toBe(false);
    expect(new Date(millis).toISOString().slice(0, 23)).toBe(timestamp.slice(0, 23));
    return millis;
  }

  it('uses YYYY-MM-DDTHH:MM:SS.ffffffZ in UTC, close to the current time, on every response', async () => {
    const before = Date.now();
    const workspace = await ok(service, token, 'create_workspace', { organization_id: org, name: 'T' });
    const solution = await ok(service, token, 'create_solution', { workspace_id: workspace.id, name: 'T' });
    const after = Date.now();
    for (const record of [workspace, solution]) {
      for (const field of ['created_at', 'updated_at'] as const) {
        const millis = instant(record[field]);
        // UTC and "now": a time-zone offset would be off by at least 15 minutes. The service's clock
        // is monotonic (performance.now), which may drift slightly from Date.now.
        expect(millis).toBeGreaterThanOrEqual(before - 2000);
        expect(millis).toBeLessThanOrEqual(after + 2000);
      }
    }
    const reads = [
      await ok(service, token, 'get_workspace', { id: workspace.id }),
      await ok(service, token, 'get_solution', { id: solution.id }),
      ...(await ok(service, token, 'list_workspaces', { page: 1, size: 100 })).items,
      ...(await ok(service, token, 'list_solutions', { page: 1, size: 100 })).items,
      await ok(service, token, 'update_workspace', { id: workspace.id, name: 'T2' }),
      await ok(service, token, 'update_solution', { id: solution.id, name: 'T2' }),
    ];
    for (const record of reads) {
      instant(record.created_at);
      instant(record.updated_at);
    }
  });

  it('uses the full microsecond precision (not milliseconds padded with zeros)', async () => {
    const workspace = await ok(service, token, 'create_workspace', { organization_id: org, name: 'Precision' });
    const stamps: string[] = [];
    for (let i = 0; i < 12; i++) {
      stamps.push((await ok(service, token, 'update_workspace', { id: workspace.id, name: `P${i}` })).updated_at);
    }
    // With true microseconds, the last three digits are not "000" every time.
    expect(stamps.some((stamp) => !stamp.endsWith('000Z'))).toBe(true);
  });

  it('sets updated_at equal to created_at on create, for workspaces and solutions', async () => {
    const workspace = await ok(service, token, 'create_workspace', { organization_id: org, name: 'Same' });
    expect(workspace.updated_at).toBe(workspace.created_at);
    const solution = await ok(service, token, 'create_solution', { workspace_id: workspace.id, name: 'Same' });
    expect(solution.updated_at).toBe(solution.created_at);
    expect(await ok(service, token, 'get_solution', { id: solution.id })).toMatchObject({
      created_at: solution.created_at,
      updated_at: solution.created_at,
    });
  });

  it.each(['workspace', 'solution'] as const)('makes every %s update strictly later and never changes created_at', async (kind) => {
    const parent = await ok(service, token, 'create_workspace', { organization_id: org, name: 'Parent' });
    const record = kind === 'workspace' ? parent : await ok(service, token, 'create_solution', { workspace_id: parent.id, name: 'Child' });
    let previous = record.updated_at as string;
    // Back-to-back updates, some identical: each still moves updated_at forward.
    for (let i = 0; i < 15; i++) {
      const updated = await ok(service, token, `update_${kind}`, { id: record.id, name: i % 2 === 0 ? 'Same' : `N${i}` });
      expect(updated.created_at).toBe(record.created_at);
      expect(updated.updated_at > previous, `${updated.updated_at} > ${previous}`).toBe(true);
      expect(instant(updated.updated_at)).toBeGreaterThanOrEqual(instant(previous));
      previous = updated.updated_at;
    }
    const read = await ok(service, token, `get_${kind}`, { id: record.id });
    expect(read.created_at).toBe(record.created_at);
    expect(read.updated_at).toBe(previous);
  });

  it('keeps updated_at strictly increasing under concurrent updates', async () => {
    const workspace = await ok(service, token, 'create_workspace', { organization_id: org, name: 'Busy' });
    const responses = await Promise.all(
      Array.from({ length: 8 }, (_, i) => callApi(service, token, 'update_workspace', { id: workspace.id, name: `C${i}` })),
    );
    const stamps = responses.map((response) => expectOk(response).updated_at as string);
    expect(new Set(stamps).size).toBe(stamps.length);
    for (const stamp of stamps) expect(stamp > workspace.created_at).toBe(true);
  });

  it('keeps a solution’s timestamps independent of its workspace’s updates', async () => {
    const workspace = await ok(service, token, 'create_workspace', { organization_id: org, name: 'Indep' });
    const solution = await ok(service, token, 'create_solution', { workspace_id: workspace.id, name: 'Indep' });
    await ok(service, token, 'update_workspace', { id: workspace.id, name: 'Indep 2' });
    const read = await ok(service, token, 'get_solution', { id: solution.id });
    expect(read.updated_at).toBe(solution.updated_at);
    expect(read.created_at).toBe(solution.created_at);
    expect(solution.created_at >= workspace.created_at).toBe(true);
  });
});
