import { beforeAll, describe, expect, it } from 'vitest';
import { callApi, startTestService } from '../support/service.js';
import { runCli } from './cli-run.js';

describe('npm run history', () => {
  let databaseUrl: string;
  let workspace: { id: string; created_at: string };
  let solution: { id: string };

  beforeAll(async () => {
    const service = await startTestService();
    databaseUrl = service.databaseUrl;
    try {
      const token = await service.token(['org_history'], undefined, 'alice');
      const other = await service.token(['org_history'], undefined, 'bob');
      workspace = (
        await callApi(service, token, 'create_workspace', { organization_id: 'org_history', name: 'Lab', attributes: { floor: 3 } })
      ).body.data;
      await callApi(service, other, 'update_workspace', { id: workspace.id, name: 'Lab 2', description: 'moved' });
      solution = (await callApi(service, token, 'create_solution', { workspace_id: workspace.id, name: 'Buffer' })).body.data;
      await callApi(service, other, 'update_solution', { id: solution.id, name: 'Buffer v2', attributes: { ph: 7 } });
      expect((await callApi(service, token, 'delete_workspace', { id: workspace.id })).status).toBe(200);
    } finally {
      await service.close();
    }
  }, 120_000);

  it("prints a workspace's history as a table, whatever its organization", async () => {
    const outcome = await runCli('src/cli/history.ts', [workspace.id], databaseUrl);
    expect(outcome.code).toBe(0);
    const lines = outcome.stdout.trimEnd().split('\n');
    expect(lines[0]).toBe(`workspace ${workspace.id}: 3 event(s)`);
    expect(lines[1]).toMatch(/^VERSION\s+WHEN\s+WHO\s+EVENT\s+WHAT CHANGED$/);
    expect(lines[2]).toMatch(
      new RegExp(`^\\s*1\\s+${workspace.created_at.replace(/\./g, '\\.')}\\s+alice\\s+WorkspaceCreated\\s+organization_id="org_history"$`),
    );
    expect(lines.slice(3, 6).map((line) => line.trim())).toEqual(['name="Lab"', 'description=""', 'attributes={"floor":3}']);
    expect(lines[6]).toMatch(/^\s*2\s+\S+Z\s+bob\s+WorkspaceUpdated\s+name="Lab 2"$/);
    expect(lines[7]!.trim()).toBe('description="moved"');
    expect(lines[8]).toMatch(/^\s*3\s+\S+Z\s+alice\s+WorkspaceDeleted$/);
    expect(lines).toHaveLength(9);
  });

  it("prints a solution's history, with the reason of its deletion", async () => {
    const outcome = await runCli('src/cli/history.ts', [solution.id], databaseUrl);
    expect(outcome.code).toBe(0);
    const lines = outcome.stdout.trimEnd().split('\n');
    expect(lines[0]).toBe(`solution ${solution.id}: 3 event(s)`);
    expect(lines.find((line) => /^\s*1\s/.test(line))).toMatch(/alice\s+SolutionCreated\s+organization_id="org_history"$/);
    expect(lines).toContainEqual(expect.stringMatching(/^\s+workspace_id="ws_/));
    expect(lines.find((line) => /^\s*2\s/.test(line))).toMatch(/bob\s+SolutionUpdated\s+name="Buffer v2"$/);
    expect(lines).toContainEqual(expect.stringMatching(/^\s+attributes=\{"ph":7\}$/));
    // The cascade carries the workspace deletion's actor.
    expect(lines.find((line) => /^\s*3\s/.test(line))).toMatch(/alice\s+SolutionDeleted\s+reason=workspace_deleted$/);
  });

  it('exits 1 for a record that never existed and 2 for something that is not an id', async () => {
    const missing = await runCli('src/cli/history.ts', ['ws_doesnotexist000000000'], databaseUrl);
    expect(missing).toMatchObject({ code: 1, stdout: '' });
    expect(missing.stderr).toContain('no workspace ws_doesnotexist000000000 in the event log');
    const wrong = await runCli('src/cli/history.ts', ['org_x'], databaseUrl);
    expect(wrong.code).toBe(2);
    // One line naming the problem (issue 10: a bad value gives one clear line, the usage is on --help).
    expect(wrong.stderr).toBe('npm run history: org_x is not a workspace (ws_...) or solution (sol_...) id (see --help)\n');
  });
});
