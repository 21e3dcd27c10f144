import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { solutionStream, workspaceStream } from '../../src/eventstore/stream-names.js';
import { seededRandom } from '../support/generate.js';
import { applyJsonPatch } from '../support/json-patch.js';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { before, expectError, ok, projectionsVerifiable, unverifiableNote, verifyProjections } from './helpers.js';

/** Provenance and differences (contract §17) over HTTP, in each event store's mode, answers checked against the OpenAPI document. */
describe('provenance and differences (contract §17)', () => {
  let service: TestService;
  // Two writers of one organization, and a reader of another.
  let [alice, bob, outsider] = ['', '', ''];

  beforeAll(async () => {
    service = await startTestService();
    [alice = '', bob = '', outsider = ''] = await Promise.all(
      [
        ['org_prov', 'alice'],
        ['org_prov', 'bob'],
        ['org_elsewhere', 'mallory'],
      ].map(([organization, subject]) => service.token([organization!], undefined, subject)),
    );
  });
  afterAll(() => service?.close());

  it('names who last set each field after updates by two actors: set, overwritten, removed and re-added', async () => {
    const created = await ok(service, alice, 'create_workspace', {
      organization_id: 'org_prov',
      name: 'Lab',
      attributes: { owner: 'ann', 'cost/centre': { '~code': 7 }, tags: ['a'] },
    });
    const overwritten = await ok(service, bob, 'update_workspace', { id: created.id, name: 'Lab', attributes: { owner: 'bea' } });
    const removed = await ok(service, bob, 'update_workspace', { id: created.id, name: 'Lab', attributes: { owner: null } });
    const readded = await ok(service, alice, 'update_workspace', {
      id: created.id,
      name: 'Lab 2',
      attributes: { owner: 'bea', tags: ['a'] },
    });

    const { fields } = await ok(service, bob, 'get_workspace_provenance', { id: created.id });
    expect(fields).toEqual([
      { path: '/name', value: 'Lab 2', version: 4, set_at: readded.updated_at, set_by: 'alice' },
      { path: '/description', value: '', version: 1, set_at: created.created_at, set_by: 'alice' },
      { path: '/attributes/cost~1centre/~0code', value: 7, version: 1, set_at: created.created_at, set_by: 'alice' },
      { path: '/attributes/owner', value: 'bea', version: 4, set_at: readded.updated_at, set_by: 'alice' },
      { path: '/attributes/tags', value: ['a'], version: 1, set_at: created.created_at, set_by: 'alice' },
    ]);

    const atOverwrite = await ok(service, alice, 'get_workspace_provenance', { id: created.id, as_of: before(removed.updated_at) });
    expect(atOverwrite.fields.find((field) => field.path === '/attributes/owner')).toEqual({
      path: '/attributes/owner',
      value: 'bea',
      version: 2,
      set_at: overwritten.updated_at,
      set_by: 'bob',
    });
    const atRemoval = await ok(service, alice, 'get_workspace_provenance', {
      id: created.id,
      as_of: removed.updated_at,
      path: '/attributes/owner',
    });
    expect(atRemoval.fields).toEqual([]);
    const beforeCreation = await callApi(service, alice, 'get_workspace_provenance', { id: created.id, as_of: before(created.created_at) });
    expectError(beforeCreation, 404, 'not_found');
    expectError(await callApi(service, outsider, 'get_workspace_provenance', { id: created.id }), 404, 'not_found');
  });

  it('diffs across a deletion: the record removed whole at "", the deletions in `changes`, and provenance only before it', async () => {
    const workspace = await ok(service, alice, 'create_workspace', { organization_id: 'org_prov', name: 'doomed' });
    const solution = await ok(service, alice, 'create_solution', {
      workspace_id: workspace.id,
      name: 'inside',
      documentation: { blocks: [{ type: 'text', content: 'v1' }] },
    });
    const edited = await ok(service, bob, 'update_solution', {
      id: solution.id,
      name: 'inside',
      documentation: { blocks: [{ type: 'text', content: 'v2' }] },
    });
    await ok(service, bob, 'delete_workspace', { id: workspace.id });

    const workspaceDiff = await ok(service, alice, 'diff_workspace', { id: workspace.id, from: workspace.created_at });
    expect(workspaceDiff).toMatchObject({ from: workspace, to: null, patch: [{ op: 'remove', path: '' }] });
    expect(workspaceDiff.changes.map(({ version, type, actor }) => ({ version, type, actor }))).toEqual([
      { version: 2, type: 'WorkspaceDeleted', actor: 'bob' },
    ]);

    const solutionDiff = await ok(service, alice, 'diff_solution', { id: solution.id, from: solution.created_at });
    expect(solutionDiff).toMatchObject({ from: solution, to: null, patch: [{ op: 'remove', path: '' }] });
    expect(solutionDiff.changes.map(({ version, type }) => [version, type])).toEqual([
      [2, 'SolutionUpdated'],
      [3, 'SolutionDeleted'],
    ]);
    expect(solutionDiff.changes[1]).toMatchObject({ actor: 'bob', data: { reason: 'workspace_deleted' } });
    // From before its creation to after its deletion it existed at neither instant.
    const wholeLife = await callApi(service, alice, 'diff_solution', { id: solution.id, from: before(solution.created_at) });
    expectError(wholeLife, 404, 'not_found');

    const deletedAt = workspaceDiff.changes[0]!.occurred_at;
    const lastState = await ok(service, alice, 'diff_solution', { id: solution.id, from: solution.created_at, to: before(deletedAt) });
    expect(lastState.to).toEqual(edited);
    expect(applyJsonPatch(lastState.from, lastState.patch)).toEqual(lastState.to);
    expect(lastState.patch).toContainEqual({ op: 'replace', path: '/documentation/blocks/0/content', value: 'v2' });

    const provenance = await ok(service, bob, 'get_solution_provenance', { id: solution.id, as_of: before(deletedAt) });
    expect(provenance.fields.find((field) => field.path === '/documentation')).toEqual({
      path: '/documentation',
      value: { blocks: [{ type: 'text', content: 'v2' }] },
      version: 2,
      set_at: edited.updated_at,
      set_by: 'bob',
    });
    // Gone now, and gone from the workspace's deletion on, although the cascade's own event trails it.
    expectError(await callApi(service, alice, 'get_solution_provenance', { id: solution.id }), 404, 'not_found');
    expectError(await callApi(service, alice, 'get_solution_provenance', { id: solution.id, as_of: deletedAt }), 404, 'not_found');
    // Absent at both instants: 404, as for a record that never existed.
    const neither = await callApi(service, alice, 'diff_workspace', {
      id: workspace.id,
      from: before(workspace.created_at),
      to: before(workspace.created_at),
    });
    expectError(neither, 404, 'not_found');
    expectError(await callApi(service, outsider, 'diff_solution', { id: solution.id, from: solution.created_at }), 404, 'not_found');
  });

  it('gives a patch that turns `from` into `to` for every pair of instants in a generated history, in either order', async () => {
    const random = seededRandom(23);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
    const keys = ['a', 'b/c', 'd~e', 'f'];
    const value = (depth: number): unknown =>
      depth < 3 && random() < 0.3
        ? Object.fromEntries([[pick(keys), value(depth + 1)]])
        : pick([1, 'x', true, null, [1, { g: 2 }], 'y', 2.5]);
    const workspace = await ok(service, alice, 'create_workspace', { organization_id: 'org_prov', name: 'gen', attributes: { a: 1 } });
    const instants = [before(workspace.created_at), workspace.created_at];
    for (let step = 0; step < 6; step++) {
      const attributes = Object.fromEntries([
        [pick(keys), value(1)],
        [pick(keys), value(1)],
      ]);
      const updated = await ok(service, pick([alice, bob]), 'update_workspace', {
        id: workspace.id,
        name: pick(['gen', 'gen 2']),
        attributes,
      });
      instants.push(updated.updated_at);
    }
    const deletion = await ok(service, bob, 'delete_workspace', { id: workspace.id });
    expect(deletion).toEqual({ id: workspace.id });
    const history = await ok(service, alice, 'get_workspace_history', { id: workspace.id, page: 1, size: 100 });
    instants.push(history.items.at(-1)!.occurred_at);

    const at = async (instant: string) => {
      const answer = await callApi(service, alice, 'get_workspace', { id: workspace.id, as_of: instant });
      return answer.status === 404 ? null : answer.body.data;
    };
    // Contract §17: `from` and `to` are instants as `as_of` takes them, so `to` may be the earlier:
    // the patch then goes back in time, and no change lies after `from` and at or before `to`.
    for (const from of instants) {
      for (const to of instants) {
        const [then, now] = [await at(from), await at(to)];
        if (then === null && now === null) {
          expectError(await callApi(service, alice, 'diff_workspace', { id: workspace.id, from, to }), 404, 'not_found');
          continue;
        }
        const diff = await ok(service, alice, 'diff_workspace', { id: workspace.id, from, to });
        expect(applyJsonPatch(diff.from, diff.patch), `${from} → ${to}`).toEqual(diff.to);
        expect([diff.from, diff.to]).toEqual([then, now]);
        expect(diff.changes.map(({ version }) => version)).toEqual(
          history.items.filter((item) => item.occurred_at > from && item.occurred_at <= to).map(({ version }) => version),
        );
      }
    }
  });

  // Over 400 commands and four rounds of some 150 reads: 20 s on an idle machine, minutes on a busy one.
  it(`answers provenance and diffs alike from snapshots and without them, keeping provenance snapshots that verify checks${unverifiableNote}`, async () => {
    const workspace = await ok(service, alice, 'create_workspace', {
      organization_id: 'org_prov',
      name: 'long',
      attributes: { kept: 'since creation', owner: 'ann' },
    });
    const solution = await ok(service, alice, 'create_solution', { workspace_id: workspace.id, name: 'long solution' });
    const instants = [before(workspace.created_at), workspace.created_at];
    for (let n = 1; n <= 210; n++) {
      // Owners change every 40 updates and are removed for a while in between; the name changes every 30.
      const owner = n % 40 < 30 ? ['ann', 'bea', 'cat'][Math.floor(n / 40) % 3] : null;
      // The two records' updates side by side: each record's own still come one after another.
      const [updated] = await Promise.all([
        ok(service, n % 3 === 0 ? bob : alice, 'update_workspace', {
          id: workspace.id,
          name: `long ${Math.floor(n / 30)}`,
          attributes: { n, owner },
        }),
        ok(service, n % 2 === 0 ? bob : alice, 'update_solution', { id: solution.id, name: `long solution ${n % 7}` }),
      ]);
      if (n % 37 === 0 || n >= 208 || [99, 100, 101, 199, 200, 201].includes(n)) instants.push(updated.updated_at);
    }
    const deleted = await ok(service, bob, 'delete_workspace', { id: workspace.id });
    expect(deleted).toEqual({ id: workspace.id });

    const database = new pg.Pool({ connectionString: service.databaseUrl, max: 1 });
    const snapshotsOf = async (key: string) =>
      (
        await database.query<{ version: string }>('SELECT version::text FROM record_snapshots WHERE stream_name = $1 ORDER BY version', [
          key,
        ])
      ).rows.map((row) => Number(row.version));
    const verify = () => verifyProjections(service);
    /** Every provenance and diff answer over the instants: each one's status and body (an instant's eight asked at once). */
    const answers = async () => {
      const all = [];
      for (const [index, instant] of instants.entries()) {
        const asked = [];
        for (const [kind, id] of [
          ['workspace', workspace.id],
          ['solution', solution.id],
        ] as const) {
          asked.push(callApi(service, bob, `get_${kind}_provenance`, { id, as_of: instant }));
          asked.push(callApi(service, bob, `get_${kind}_provenance`, { id, as_of: instant, path: '/attributes/owner' }));
          for (const to of [instants[index + 3], undefined])
            asked.push(callApi(service, bob, `diff_${kind}`, { id, from: instant, ...(to === undefined ? {} : { to }) }));
        }
        all.push(...(await Promise.all(asked)));
      }
      // An error's request_id is its own: its code is what must agree.
      return all.map(({ status, body }) => ({ status, body: status === 200 ? body : body.error.code }));
    };
    const streams = [workspaceStream(workspace.id), solutionStream(solution.id)];
    try {
      const withSnapshots = await answers();
      expect(withSnapshots.filter(({ status }) => status === 200).length).toBeGreaterThan(withSnapshots.length / 2);
      // Reading provenance kept its own snapshots every 100 versions, beside the records' own.
      for (const stream of streams) await expect.poll(() => snapshotsOf(`provenance:${stream}`)).toEqual([100, 200]);
      expect(await answers()).toEqual(withSnapshots);

      await database.query('DELETE FROM record_snapshots WHERE stream_name = ANY($1) OR stream_name = ANY($2)', [
        streams,
        streams.map((stream) => `provenance:${stream}`),
      ]);
      expect(await answers()).toEqual(withSnapshots);

      if (projectionsVerifiable) {
        const checked = await verify();
        expect(checked.stdout, checked.stderr).toMatch(
          /^no differences .*\n\d+ snapshot\(s\) agree with the log\n(the command index of \d+ stream\(s\) agrees with the log\n)?$/,
        );
      }
      await database.query(
        `UPDATE record_snapshots SET state = replace(state, '"bob"', '"eve"') WHERE stream_name = $1 AND version = 200`,
        [`provenance:${streams[0]}`],
      );
      if (projectionsVerifiable) {
        const reported = await verify();
        expect(reported.code).toBe(1);
        expect(reported.stdout).toContain(`snapshot provenance:${streams[0]}@200: corrupt`);
      }
      expect(await answers()).toEqual(withSnapshots);
    } finally {
      await database.end();
    }
  }, 300_000);
});
