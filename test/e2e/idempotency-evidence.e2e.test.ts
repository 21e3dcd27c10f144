import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IdempotencyKeys } from '../../src/api/idempotency.js';
import { workspaceStream } from '../../src/eventstore/stream-names.js';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { startStack, type Stack } from '../support/stack.js';
import { expectOk, projectionsVerifiable, verifyProjections } from './helpers.js';

/**
 * Contract §2: a retry with the same key and request has the effect of one execution and answers
 * what that execution did, whatever happened in between. The stored answer may never have been
 * written (the instance died after the append, or PostgreSQL went away): here it is removed, and
 * the retry must find what was done in the record's own events.
 */
describe('Idempotency-Key: the events are the evidence of what a keyed command did', () => {
  const org = 'org_evidence';
  let service: TestService;
  let token: string;
  let database: pg.Pool;
  let stack: Stack;

  beforeAll(async () => {
    service = await startTestService();
    token = await service.token([org]);
    database = new pg.Pool({ connectionString: service.databaseUrl, max: 1 });
    stack = await startStack(service.databaseUrl);
  });
  afterAll(async () => {
    await stack?.close();
    await database?.end();
    await service?.close();
  });

  const keyed = (key: string, query: string, params: Record<string, unknown>) =>
    callApi(service, token, query, params, { 'idempotency-key': key });
  const plain = async (query: string, params: Record<string, unknown>) => expectOk(await callApi(service, token, query, params));
  /** The same caller's retry, its token now granting no organization. */
  const keyedWithoutAccess = async (key: string, query: string, params: Record<string, unknown>) =>
    callApi(service, await service.token([], undefined, 'user-1'), query, params, { 'idempotency-key': key });
  const forgetStoredAnswer = (key: string) => database.query('DELETE FROM idempotency_keys WHERE key = $1', [key]);
  const history = async (kind: 'workspace' | 'solution', id: string) =>
    (await plain(`get_${kind}_history`, { id, page: 1, size: 100 })).items.map((item: { type: string }) => item.type);

  it('create_workspace: the retry answers the same record, created once', async () => {
    const first = expectOk(await keyed('ev-create-ws', 'create_workspace', { organization_id: org, name: 'Once' }));
    await forgetStoredAnswer('ev-create-ws');
    await plain('update_workspace', { id: first.id, name: 'Renamed since' });
    const retry = expectOk(await keyed('ev-create-ws', 'create_workspace', { organization_id: org, name: 'Once' }));
    expect(retry).toEqual(first);
    expect(await history('workspace', first.id)).toEqual(['WorkspaceCreated', 'WorkspaceUpdated']);
  });

  it('update_workspace: the retry answers the first update, and the update is in the history once', async () => {
    const workspace = await plain('create_workspace', { organization_id: org, name: 'Updated once' });
    const first = expectOk(await keyed('ev-update-ws', 'update_workspace', { id: workspace.id, name: 'First', attributes: { n: 1 } }));
    await forgetStoredAnswer('ev-update-ws');
    await plain('update_workspace', { id: workspace.id, name: 'Someone else since' });
    const retry = expectOk(await keyed('ev-update-ws', 'update_workspace', { id: workspace.id, name: 'First', attributes: { n: 1 } }));
    expect(retry).toEqual(first);
    expect(await history('workspace', workspace.id)).toEqual(['WorkspaceCreated', 'WorkspaceUpdated', 'WorkspaceUpdated']);
    expect((await plain('get_workspace', { id: workspace.id })).name).toBe('Someone else since');
  });

  it('delete_workspace: the retry answers the deletion again, not 404', async () => {
    const workspace = await plain('create_workspace', { organization_id: org, name: 'Deleted once' });
    const first = expectOk(await keyed('ev-delete-ws', 'delete_workspace', { id: workspace.id }));
    await forgetStoredAnswer('ev-delete-ws');
    const retry = expectOk(await keyed('ev-delete-ws', 'delete_workspace', { id: workspace.id }));
    expect(retry).toEqual(first);
    expect(await history('workspace', workspace.id)).toEqual(['WorkspaceCreated', 'WorkspaceDeleted']);
  });

  it('create_solution, update_solution and delete_solution likewise', async () => {
    const workspace = await plain('create_workspace', { organization_id: org, name: 'Holds solutions' });
    const created = expectOk(await keyed('ev-create-sol', 'create_solution', { workspace_id: workspace.id, name: 'Sol' }));
    await forgetStoredAnswer('ev-create-sol');
    expect(expectOk(await keyed('ev-create-sol', 'create_solution', { workspace_id: workspace.id, name: 'Sol' }))).toEqual(created);

    const updated = expectOk(await keyed('ev-update-sol', 'update_solution', { id: created.id, name: 'Sol v2' }));
    await forgetStoredAnswer('ev-update-sol');
    await plain('update_solution', { id: created.id, name: 'Sol v3' });
    expect(expectOk(await keyed('ev-update-sol', 'update_solution', { id: created.id, name: 'Sol v2' }))).toEqual(updated);

    const deleted = expectOk(await keyed('ev-delete-sol', 'delete_solution', { id: created.id }));
    await forgetStoredAnswer('ev-delete-sol');
    expect(expectOk(await keyed('ev-delete-sol', 'delete_solution', { id: created.id }))).toEqual(deleted);

    expect(await history('solution', created.id)).toEqual(['SolutionCreated', 'SolutionUpdated', 'SolutionUpdated', 'SolutionDeleted']);
  });

  it('create_solution, update_solution and delete_solution: the retry answers what was done though the workspace was deleted since', async () => {
    const workspace = await plain('create_workspace', { organization_id: org, name: 'Deleted under its solutions' });
    const created = expectOk(await keyed('ev-gone-create', 'create_solution', { workspace_id: workspace.id, name: 'Made' }));
    const other = await plain('create_solution', { workspace_id: workspace.id, name: 'Other' });
    const updated = expectOk(await keyed('ev-gone-update', 'update_solution', { id: created.id, name: 'Made v2' }));
    const deleted = expectOk(await keyed('ev-gone-delete', 'delete_solution', { id: other.id }));
    for (const key of ['ev-gone-create', 'ev-gone-update', 'ev-gone-delete']) await forgetStoredAnswer(key);
    await plain('delete_workspace', { id: workspace.id });

    expect(expectOk(await keyed('ev-gone-create', 'create_solution', { workspace_id: workspace.id, name: 'Made' }))).toEqual(created);
    expect(expectOk(await keyed('ev-gone-update', 'update_solution', { id: created.id, name: 'Made v2' }))).toEqual(updated);
    expect(expectOk(await keyed('ev-gone-delete', 'delete_solution', { id: other.id }))).toEqual(deleted);
    // Nothing done again: the cascade's deletion after each, and no more.
    expect(await history('solution', created.id)).toEqual(['SolutionCreated', 'SolutionUpdated', 'SolutionDeleted']);
    expect(await history('solution', other.id)).toEqual(['SolutionCreated', 'SolutionDeleted']);
    // And a new request, without a key, is refused as ever.
    expect((await callApi(service, token, 'create_solution', { workspace_id: workspace.id, name: 'Made' })).status).toBe(404);
  });

  it('a solution command retried by a caller who has since lost access to the organization is not found', async () => {
    const workspace = await plain('create_workspace', { organization_id: org, name: 'Access to solutions' });
    const created = expectOk(await keyed('ev-sol-access', 'create_solution', { workspace_id: workspace.id, name: 'Secret solution' }));
    await forgetStoredAnswer('ev-sol-access');
    const retry = await keyedWithoutAccess('ev-sol-access', 'create_solution', { workspace_id: workspace.id, name: 'Secret solution' });
    expect(retry.status).toBe(404);
    expect(JSON.stringify(retry.body)).not.toContain(created.id);
  });

  it('a retry by a caller who has since lost access to the organization is not found, and changes nothing', async () => {
    const workspace = await plain('create_workspace', { organization_id: org, name: 'Access' });
    expectOk(await keyed('ev-access', 'update_workspace', { id: workspace.id, name: 'Secret name' }));
    await forgetStoredAnswer('ev-access');
    const retry = await keyedWithoutAccess('ev-access', 'update_workspace', { id: workspace.id, name: 'Secret name' });
    expect(retry.status).toBe(404);
    expect(JSON.stringify(retry.body)).not.toContain('Secret name');
    expect(await history('workspace', workspace.id)).toEqual(['WorkspaceCreated', 'WorkspaceUpdated']);
  });

  describe('found through the command index (src/write/command-index.ts), which a keyed command reads instead of the whole stream', () => {
    const update = (name: string) => ({ id: workspaceId, name, attributes: { by: name } });
    let workspaceId: string;
    let first: unknown;
    const stream = () => workspaceStream(workspaceId);
    const commandIdOf = (key: string, params: unknown) =>
      IdempotencyKeys.commandId('user-1', key, IdempotencyKeys.hashes('update_workspace', params).asSent);
    const indexed = async () =>
      (
        await database.query<{ command_id: string; first_version: string; last_version: string }>(
          'SELECT command_id, first_version::text, last_version::text FROM record_commands WHERE stream_name = $1 ORDER BY first_version',
          [stream()],
        )
      ).rows;
    const mark = async () =>
      (
        await database.query<{ through: string; event_id: string }>(
          'SELECT indexed_through::text AS through, event_id_at_mark AS event_id FROM record_command_marks WHERE stream_name = $1',
          [stream()],
        )
      ).rows[0];
    const eventIdAt = async (version: number) => (await stack.store.readStream(stream(), { from: BigInt(version), limit: 1 }))[0]!.id;
    /** The keyed update `ix-first` is retried without its kept answer: it answers what it did, and is in the history once. */
    const retryAnswersTheFirst = async () => {
      await forgetStoredAnswer('ix-first');
      expect(expectOk(await keyed('ix-first', 'update_workspace', update('first')))).toEqual(first);
      expect(await history('workspace', workspaceId)).toEqual(['WorkspaceCreated', ...Array(4).fill('WorkspaceUpdated')]);
    };

    beforeAll(async () => {
      workspaceId = (await plain('create_workspace', { organization_id: org, name: 'Indexed' })).id;
      first = expectOk(await keyed('ix-first', 'update_workspace', update('first')));
      for (const name of ['second', 'third', 'fourth']) await plain('update_workspace', update(name));
    });

    it('the keyed update is indexed at its version, and its retry answers from there', async () => {
      await expect.poll(indexed).toEqual([{ command_id: commandIdOf('ix-first', update('first')), first_version: '2', last_version: '2' }]);
      expect((await mark())?.through).toBe('2');
      await retryAnswersTheFirst();
      // The retry read the events after the mark, and moved it over them.
      await expect.poll(async () => (await mark())?.through).toBe('5');
    });

    it('without the index, the retry reads the stream whole and answers alike, and the index is made again', async () => {
      await database.query('DELETE FROM record_commands WHERE stream_name = $1', [stream()]);
      await database.query('DELETE FROM record_command_marks WHERE stream_name = $1', [stream()]);
      await retryAnswersTheFirst();
      await expect.poll(indexed).toEqual([{ command_id: commandIdOf('ix-first', update('first')), first_version: '2', last_version: '2' }]);
      expect(await mark()).toEqual({ through: '5', event_id: await eventIdAt(5) });
    });

    it('with a void mark (its event not the stream’s at its version), the retry answers alike and the mark is made again', async () => {
      await database.query(`UPDATE record_command_marks SET event_id_at_mark = 'not-this-stream' WHERE stream_name = $1`, [stream()]);
      await retryAnswersTheFirst();
      await expect.poll(mark).toEqual({ through: '5', event_id: await eventIdAt(5) });
    });

    it('with its events after the mark, the retry finds them there', async () => {
      await database.query('DELETE FROM record_commands WHERE stream_name = $1', [stream()]);
      await database.query(
        'UPDATE record_command_marks SET indexed_through = 1, event_id_at_mark = $2, head_hash = NULL WHERE stream_name = $1',
        [stream(), await eventIdAt(1)],
      );
      await retryAnswersTheFirst();
      await expect.poll(indexed).toEqual([{ command_id: commandIdOf('ix-first', update('first')), first_version: '2', last_version: '2' }]);
    });

    it('an entry its events do not bear out is not believed: a forged one neither answers for a command that never ran nor misplaces one that did', async () => {
      const never = update('never ran');
      await database.query(
        `INSERT INTO record_commands (stream_name, command_id, first_version, last_version) VALUES ($1, $2, 3, 3), ($1, $3, 4, 4)
         ON CONFLICT (stream_name, command_id) DO UPDATE SET first_version = excluded.first_version, last_version = excluded.last_version`,
        [stream(), commandIdOf('ix-never', never), commandIdOf('ix-first', update('first'))],
      );
      await retryAnswersTheFirst();
      const done = expectOk(await keyed('ix-never', 'update_workspace', never));
      expect(done).toMatchObject({ name: 'never ran', attributes: { by: 'never ran' } });
      expect(await history('workspace', workspaceId)).toEqual(['WorkspaceCreated', ...Array(5).fill('WorkspaceUpdated')]);
      // Both entries are put right from the log.
      await expect.poll(indexed).toEqual([
        { command_id: commandIdOf('ix-first', update('first')), first_version: '2', last_version: '2' },
        { command_id: commandIdOf('ix-never', never), first_version: '6', last_version: '6' },
      ]);
    });

    // The tool folds the whole log, which on a shared real server holds other test files' records too.
    it.runIf(projectionsVerifiable)(
      'projections:verify compares the index with the log, and names an entry that is not the log’s',
      async () => {
        const verify = () => verifyProjections(service);
        const agreed = await verify();
        expect(agreed.stdout, agreed.stderr).toMatch(/the command index of \d+ stream\(s\) agrees with the log\n$/);

        const commandId = commandIdOf('ix-first', update('first'));
        await database.query('UPDATE record_commands SET first_version = 3, last_version = 3 WHERE stream_name = $1 AND command_id = $2', [
          stream(),
          commandId,
        ]);
        const reported = await verify();
        expect(reported.code).toBe(1);
        expect(reported.stdout).toContain(
          `command index ${stream()}: command ${commandId} is at versions 2-2, the index says versions 3-3`,
        );
      },
    );
  });
});
