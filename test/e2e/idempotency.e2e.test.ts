import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { allScopes } from './helpers.js';

describe('Idempotency-Key on commands', () => {
  let service: TestService;
  let token: string;

  beforeAll(async () => {
    service = await startTestService();
    token = await service.token(['org_idem']);
  });
  afterAll(() => service?.close());

  const create = (key: string, name: string, bearer = token) =>
    callApi(service, bearer, 'create_workspace', { organization_id: 'org_idem', name }, { 'idempotency-key': key });

  it('replays the first answer to a repeated request and creates once', async () => {
    const first = await create('key-replay', 'Once');
    const second = await create('key-replay', 'Once');
    expect(first.status).toBe(200);
    expect(second.status).toBe(200);
    expect(second.body).toEqual(first.body);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    const list = await callApi(service, token, 'list_workspaces', { page: 1, size: 100 });
    expect(list.body.data.items.filter((w: { name: string }) => w.name === 'Once')).toHaveLength(1);
  });

  it('replays the answer to a retry whose members come in another order, which JSON gives no meaning', async () => {
    const first = await callApi(
      service,
      token,
      'create_workspace',
      { organization_id: 'org_idem', name: 'Reordered', attributes: { b: 1, a: { y: [1, { q: 1, p: 2 }], x: 'x' } } },
      { 'idempotency-key': 'key-reordered' },
    );
    const retry = await callApi(
      service,
      token,
      'create_workspace',
      { attributes: { a: { x: 'x', y: [1, { p: 2, q: 1 }] }, b: 1 }, name: 'Reordered', organization_id: 'org_idem' },
      { 'idempotency-key': 'key-reordered' },
    );
    expect(first.status).toBe(200);
    expect(retry.status).toBe(200);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body).toEqual(first.body);
    // An array's order has a meaning: the same members in another order are another request.
    const arrayReordered = await callApi(
      service,
      token,
      'create_workspace',
      { organization_id: 'org_idem', name: 'Reordered', attributes: { b: 1, a: { y: [{ q: 1, p: 2 }, 1], x: 'x' } } },
      { 'idempotency-key': 'key-reordered' },
    );
    expect(arrayReordered.status).toBe(422);
  });

  it('answers 422 when the key is reused with a different request', async () => {
    expect((await create('key-reused', 'A')).status).toBe(200);
    const reused = await create('key-reused', 'B');
    expect(reused.status).toBe(422);
    expect(reused.body.error.code).toBe('idempotency_key_reused');
  });

  it('lets concurrent repeats through at most once: the others get 409 or the replay', async () => {
    const answers = await Promise.all(Array.from({ length: 8 }, () => create('key-concurrent', 'Concurrent')));
    const statuses = answers.map((a) => a.status);
    expect(statuses.every((s) => s === 200 || s === 409)).toBe(true);
    const ids = new Set(answers.filter((a) => a.status === 200).map((a) => a.body.data.id));
    expect(ids.size).toBe(1);
    for (const answer of answers.filter((a) => a.status === 409)) expect(answer.body.error.code).toBe('conflict');
    const list = await callApi(service, token, 'list_workspaces', { page: 1, size: 100 });
    expect(list.body.data.items.filter((w: { name: string }) => w.name === 'Concurrent')).toHaveLength(1);
  });

  it('replays client errors, and keeps keys apart per caller', async () => {
    const missing = { id: 'ws_doesnotexist' };
    const first = await callApi(service, token, 'delete_workspace', missing, { 'idempotency-key': 'key-error' });
    const again = await callApi(service, token, 'delete_workspace', missing, { 'idempotency-key': 'key-error' });
    expect(first.status).toBe(404);
    expect(again.status).toBe(404);
    // The same error, naming the request that answers it, as its x-request-id header does (contract §1).
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual({ error: { ...first.body.error, request_id: again.headers.get('x-request-id') } });
    expect(again.body.error.request_id).not.toBe(first.body.error.request_id);

    const other = await service.token(['org_idem'], undefined, 'user-2');
    const mine = await create('key-shared', 'Mine');
    const theirs = await create('key-shared', 'Theirs', other);
    expect(theirs.status).toBe(200);
    expect(theirs.body.data.id).not.toBe(mine.body.data.id);
  });

  it('treats another caller’s use of a key as an unrelated request: never a replay, a 409 or a 422', async () => {
    const other = await service.token(['org_idem'], undefined, 'user-3');
    const mine = await create('key-per-caller', 'Mine too');
    const sameRequest = await create('key-per-caller', 'Mine too', other);
    const otherRequest = await create('key-per-caller', 'Something else', other);
    expect([mine.status, sameRequest.status, otherRequest.status]).toEqual([200, 200, 422]);
    expect(sameRequest.headers.get('idempotent-replayed')).toBeNull();
    expect(sameRequest.body.data.id).not.toBe(mine.body.data.id);
  });

  it('checks the key with the other bad_request checks, before the scope (contract §2 order)', async () => {
    const readOnly = await service.token(['org_idem'], 'workspaces:read');
    const response = await callApi(
      service,
      readOnly,
      'create_workspace',
      { organization_id: 'org_idem', name: 'x' },
      { 'idempotency-key': 'bad key' },
    );
    expect(response.status).toBe(400);
    expect(response.body.error.code).toBe('bad_request');
  });

  it('rejects a malformed key', async () => {
    const bad = await create('x'.repeat(256), 'Bad key');
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('bad_request');
  });

  it('does not replay a record to a caller who has lost access to its organization: the answer is the one the request gets now', async () => {
    const created = await create('key-access', 'Kept');
    expect(created.status).toBe(200);
    const withoutAccess = await service.token([], undefined, 'user-1');
    const replay = await create('key-access', 'Kept', withoutAccess);
    const unkeyed = await callApi(service, withoutAccess, 'create_workspace', { organization_id: 'org_idem', name: 'Kept' });
    expect(unkeyed.status).toBe(403);
    expect(replay.status).toBe(403);
    expect(replay.body.error.code).toBe('forbidden');
    expect(replay.body.error.message).toBe(unkeyed.body.error.message);
    expect(JSON.stringify(replay.body)).not.toContain('Kept');

    const update = (bearer: string) =>
      callApi(
        service,
        bearer,
        'update_workspace',
        { id: created.body.data.id, name: 'Renamed' },
        { 'idempotency-key': 'key-access-update' },
      );
    expect((await update(token)).status).toBe(200);
    const updateReplay = await update(withoutAccess);
    expect(updateReplay.status).toBe(404);
    expect(updateReplay.body.error.code).toBe('not_found');
    expect(JSON.stringify(updateReplay.body)).not.toContain('Renamed');
  });

  it('answers a keyed retry after the caller lost access with the 404 of the same request without the key', async () => {
    const keeper = await service.token(['org_idem'], allScopes, 'keeper');
    const elsewhere = await service.token(['org_elsewhere'], allScopes, 'keeper');
    const workspace = (await callApi(service, keeper, 'create_workspace', { organization_id: 'org_idem', name: 'Lost' })).body.data;
    const solution = (await callApi(service, keeper, 'create_solution', { workspace_id: workspace.id, name: 'Lost' })).body.data;
    // Only the deletions of its solutions are due to it: an address the tests never connect to.
    const hook = { organization_id: 'org_idem', url: 'https://127.0.0.2.nip.io/hook', types: ['SolutionDeleted'] };
    const webhook = (await callApi(service, keeper, 'create_webhook', hook)).body.data;
    const requests: [string, Record<string, unknown>][] = [
      ['update_workspace', { id: workspace.id, name: 'Renamed' }],
      ['create_solution', { workspace_id: workspace.id, name: 'Another' }],
      ['update_solution', { id: solution.id, name: 'Renamed' }],
      ['create_webhook', hook],
      ['update_webhook', { id: webhook.id, description: 'Renamed' }],
      ['rotate_webhook_secret', { id: webhook.id }],
    ];
    for (const [query, params] of requests) {
      const headers = { 'idempotency-key': `lost-${query}` };
      expect((await callApi(service, keeper, query, params, headers)).status, query).toBe(200);
      const replay = await callApi(service, elsewhere, query, params, headers);
      const unkeyed = await callApi(service, elsewhere, query, params);
      expect(unkeyed.status, query).toBe(404);
      expect([replay.status, replay.body.error.code, replay.body.error.message], query).toEqual([
        404,
        'not_found',
        unkeyed.body.error.message,
      ]);
    }
  });

  it('keeps the field order of the first answer in a replay', async () => {
    const first = await create('key-order', 'Ordered');
    const again = await fetch(`${service.url}/api`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}`, 'idempotency-key': 'key-order' },
      body: JSON.stringify({ query: 'create_workspace', params: { organization_id: 'org_idem', name: 'Ordered' } }),
    });
    expect(Object.keys(((await again.json()) as { data: object }).data)).toEqual(Object.keys(first.body.data));
  });
});
