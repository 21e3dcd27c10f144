import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeCursor, encodeCursor } from '../../../src/changes/cursor.js';
import type { ChangeQuery } from '../../../src/changes/feed.js';
import { startInMemoryApp, type InMemoryApp } from './in-memory-app.js';

/** list_changes through app.inject: what reaches the feed's query from the token, the parameters and the headers. */
describe('list_changes in the app', () => {
  let started: InMemoryApp;
  const asked: { query: ChangeQuery; waitMs: number }[] = [];

  beforeAll(async () => {
    started = await startInMemoryApp({
      queries: {
        listChanges: async (query, waitMs) => {
          asked.push({ query, waitMs });
          return { items: [], next: encodeCursor(query.after), has_more: false };
        },
      },
    });
  });
  afterAll(() => started.close());

  const call = async (params: unknown, token: string, headers: Record<string, string> = {}) =>
    started.app.inject({
      method: 'POST',
      url: '/api',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}`, ...headers },
      payload: JSON.stringify({ query: 'list_changes', params }),
    });

  it("asks for the token's organizations and readable kinds, from the start of the log, 100 at a time, without waiting", async () => {
    const response = await call({}, await started.token({ organizations: ['org_a', 'org_b'], scope: 'workspaces:read' }));
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({ data: { items: [], next: 'AAAAAAAAAAAAAAAAAAAAAA', has_more: false } });
    expect(asked.at(-1)).toEqual({
      query: {
        organizations: ['org_a', 'org_b'],
        workspaceId: undefined,
        types: ['WorkspaceCreated', 'WorkspaceUpdated', 'WorkspaceDeleted'],
        after: { commit: 0n, prepare: 0n },
        limit: 100,
      },
      waitMs: 0,
    });
  });

  it('narrows by the filters; an organization not granted leaves none', async () => {
    const token = await started.token({ organizations: ['org_a'] });
    const after = encodeCursor({ commit: 42n, prepare: 7n });
    await call({ after, limit: 5, organization_id: 'org_b', workspace_id: 'ws_x', types: ['SolutionCreated'], wait_ms: 250 }, token);
    expect(asked.at(-1)).toEqual({
      query: { organizations: [], workspaceId: 'ws_x', types: ['SolutionCreated'], after: decodeCursor(after), limit: 5 },
      waitMs: 250,
    });
  });

  it('refuses a token with neither read scope (403) before looking at the parameters, and a malformed cursor (400)', async () => {
    const writer = await started.token({ scope: 'workspaces:write solutions:write' });
    const refused = await call({ after: 'bad' }, writer);
    expect(refused.statusCode).toBe(403);
    expect(refused.json().error.code).toBe('forbidden');
    const malformed = await call({ after: 'bad' }, await started.token());
    expect(malformed.statusCode).toBe(400);
    expect(malformed.json().error.details).toEqual([
      { path: 'params.after', message: 'must be a cursor from list_changes (`next` or a change id)' },
    ]);
  });

  it('refuses a malformed Last-Event-ID on the stream with the JSON error body', async () => {
    const response = await call({}, await started.token(), { accept: 'text/event-stream', 'last-event-id': 'nope' });
    expect(response.statusCode).toBe(400);
    expect(response.headers['content-type']).toMatch(/^application\/json/);
    expect(response.json().error.details).toEqual([
      { path: 'headers.last-event-id', message: 'must be a cursor from list_changes (a change id)' },
    ]);
  });
});
