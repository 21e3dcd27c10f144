import { describe, expect, it } from 'vitest';
import { decodeCursor, encodeCursor } from '../../../src/changes/cursor.js';
import { changeEntriesOf, changeTypes, pageOf, readableTypes, type FeedEvent, type StoredChange } from '../../../src/changes/feed.js';
import type { Envelope } from '../../../src/domain/events.js';
import { startOfLog } from '../../../src/eventstore/port.js';

const metadata = { actor: 'alice', request_id: 'r', occurred_at: '2026-11-25T10:00:00.000000Z', schema_version: 2 };
const at = (commit: bigint, prepare: bigint) => ({ commit, prepare });
const logged = (event: Omit<Envelope, 'metadata'>, streamName: string, version: bigint, commit: bigint): FeedEvent => ({
  event: { ...event, metadata } as Envelope,
  streamName,
  version,
  position: at(commit, 0n),
});

describe('change feed cursors', () => {
  it('encode a position as 22 characters of base64url and decode it back, whatever its size', () => {
    for (const position of [startOfLog, at(1n, 2n), at(2n ** 63n, 7n), at(2n ** 64n - 1n, 2n ** 64n - 1n)]) {
      const cursor = encodeCursor(position);
      expect(cursor).toMatch(/^[A-Za-z0-9_-]{22}$/);
      expect(decodeCursor(cursor)).toEqual(position);
    }
  });

  it('order as their positions do, so cursors compare like the log', () => {
    const cursors = [at(1n, 5n), at(2n, 0n), at(256n, 1n)].map(encodeCursor);
    expect([...cursors].sort()).toEqual(cursors);
  });

  it('refuse anything encodeCursor cannot have made', () => {
    for (const text of ['', 'abc', 'A'.repeat(21), 'A'.repeat(23), 'A'.repeat(21) + '=', 'A'.repeat(21) + 'B', 'A'.repeat(21) + '!']) {
      expect(decodeCursor(text), text).toBeUndefined();
    }
  });
});

describe('the rows a batch adds to the changes table', () => {
  it('gives each event its keys: its own, or those of its record created earlier in the batch, or none for the table to find', () => {
    const entries = changeEntriesOf([
      logged(
        { type: 'WorkspaceCreated', data: { id: 'ws_1', organization_id: 'org_a', name: 'W', description: '', attributes: {} } },
        'workspace-ws_1',
        1n,
        10n,
      ),
      logged({ type: 'WorkspaceUpdated', data: { id: 'ws_1', name: 'W2' } }, 'workspace-ws_1', 2n, 11n),
      logged({ type: 'SolutionUpdated', data: { id: 'sol_1', name: 'S2' } }, 'solution-sol_1', 4n, 12n),
      logged(
        { type: 'SolutionDeleted', data: { id: 'sol_1', organization_id: 'org_a', workspace_id: 'ws_1', reason: 'requested' } },
        'solution-sol_1',
        5n,
        13n,
      ),
    ]);
    expect(
      entries.map(({ organization_id, workspace_id, version, record_id }) => ({ organization_id, workspace_id, version, record_id })),
    ).toEqual([
      { organization_id: 'org_a', workspace_id: 'ws_1', version: '1', record_id: 'ws_1' },
      { organization_id: 'org_a', workspace_id: 'ws_1', version: '2', record_id: 'ws_1' },
      { organization_id: null, workspace_id: null, version: '4', record_id: 'sol_1' },
      { organization_id: 'org_a', workspace_id: 'ws_1', version: '5', record_id: 'sol_1' },
    ]);
    expect(entries[1]).toMatchObject({ commit_position: '11', prepare_position: '0', actor: 'alice', occurred_at: metadata.occurred_at });
  });
});

describe('the kinds a caller reads', () => {
  it('follow the read scopes, narrowed by the types filter', () => {
    expect(readableTypes(new Set(['workspaces:read', 'solutions:read']), undefined)).toEqual([...changeTypes]);
    expect(readableTypes(new Set(['workspaces:read']), undefined)).toEqual(['WorkspaceCreated', 'WorkspaceUpdated', 'WorkspaceDeleted']);
    expect(readableTypes(new Set(['solutions:read', 'workspaces:write']), ['WorkspaceCreated', 'SolutionDeleted'])).toEqual([
      'SolutionDeleted',
    ]);
    expect(readableTypes(new Set(['workspaces:write']), undefined)).toEqual([]);
    // A type asked for six times is one type, not all six (the feed tells a filtered query by its length).
    expect(readableTypes(new Set(['workspaces:read', 'solutions:read']), Array(6).fill('WorkspaceCreated'))).toEqual(['WorkspaceCreated']);
  });
});

describe('a page of changes', () => {
  const row = (commit: number, type: StoredChange['type'] = 'SolutionUpdated'): StoredChange => ({
    commit_position: String(commit),
    prepare_position: '0',
    type,
    record_id: 'sol_1',
    organization_id: 'org_a',
    workspace_id: 'ws_1',
    version: '2',
    occurred_at: metadata.occurred_at,
    actor: 'alice',
    data: { id: 'sol_1', name: 'S' },
  });

  it('shows the rows read, continues after the last one shown, and says whether more follow', () => {
    const page = pageOf({ rows: [row(5), row(7)], more: true }, { after: at(1n, 0n) });
    expect(page.items.map((change) => change.id)).toEqual([encodeCursor(at(5n, 0n)), encodeCursor(at(7n, 0n))]);
    expect(page).toMatchObject({ next: encodeCursor(at(7n, 0n)), has_more: true });
    expect(page.items[0]).toEqual({
      id: encodeCursor(at(5n, 0n)),
      type: 'SolutionUpdated',
      occurred_at: metadata.occurred_at,
      actor: 'alice',
      organization_id: 'org_a',
      workspace_id: 'ws_1',
      solution_id: 'sol_1',
      version: 2,
      data: { id: 'sol_1', name: 'S' },
    });
  });

  it('stays at the cursor when nothing came, and names no solution for a workspace change', () => {
    expect(pageOf({ rows: [], more: false }, { after: at(3n, 1n) })).toEqual({
      items: [],
      next: encodeCursor(at(3n, 1n)),
      has_more: false,
    });
    expect(pageOf({ rows: [row(4, 'WorkspaceUpdated')], more: false }, { after: startOfLog }).items[0]).not.toHaveProperty('solution_id');
  });
});
