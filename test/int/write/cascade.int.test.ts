import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventStoreUnavailable, latestPosition, type EventStore, type GlobalPosition } from '../../../src/eventstore/port.js';
import { solutionStream, workspaceStream } from '../../../src/eventstore/stream-names.js';
import { CascadeWorker } from '../../../src/write/cascade.js';
import { decideSolution } from '../../../src/domain/solution.js';
import { decideWorkspace, initialWorkspaceState } from '../../../src/domain/workspace.js';
import { eventually, silentLogger, startStack, type Stack } from '../../support/stack.js';

const context = (now: string) => ({ actor: 'alice', requestId: randomUUID(), now });
const stored = (events: { type: string; data: unknown; metadata: unknown }[]) =>
  events.map((event) => ({ id: randomUUID(), type: event.type, data: event.data, metadata: event.metadata }));

/** A store whose first `failures` appends fail as if the store were unreachable. */
function flakyStore(store: EventStore, failures: number): EventStore {
  let left = failures;
  return new Proxy(store, {
    get(target, property, receiver) {
      if (property === 'append') {
        return (...args: Parameters<EventStore['append']>) => {
          if (left-- > 0) return Promise.reject(new EventStoreUnavailable('injected failure'));
          return target.append(...args);
        };
      }
      return Reflect.get(target, property, receiver);
    },
  });
}

/** A store whose appends to `stream` always fail, as a stream that keeps refusing would. */
function refusingStream(store: EventStore, stream: string): EventStore {
  return new Proxy(store, {
    get(target, property, receiver) {
      if (property === 'append') {
        return (...args: Parameters<EventStore['append']>) =>
          args[0] === stream ? Promise.reject(new Error('injected refusal')) : target.append(...args);
      }
      return Reflect.get(target, property, receiver);
    },
  });
}

describe('cascade worker', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
    stack.runner().start();
  });
  afterAll(() => stack?.close());

  /** A workspace with solutions, deleted by bob, its deletion projected: its solutions' own deletions are the cascade to do. */
  async function deletedWorkspace(workspaceId: string, solutionIds: string[]): Promise<void> {
    const [created] = decideWorkspace(
      { type: 'CreateWorkspace', id: workspaceId, organizationId: 'org_c', name: 'w', context: context('2026-01-01T00:00:00.000000Z') },
      initialWorkspaceState,
    );
    await stack.store.append(workspaceStream(workspaceId), 0n, stored([created!]));
    for (const id of solutionIds) {
      const events = decideSolution(
        {
          type: 'CreateSolution',
          id,
          workspace: { id: workspaceId, organization_id: 'org_c' },
          name: id,
          context: context('2026-01-01T00:00:01.000000Z'),
        },
        { status: 'absent' },
      );
      await stack.store.append(solutionStream(id), 0n, stored(events));
    }
    const deleted = decideWorkspace(
      { type: 'DeleteWorkspace', id: workspaceId, context: { actor: 'bob', requestId: 'req-delete', now: '2026-01-01T00:00:02.000000Z' } },
      {
        status: 'active',
        workspace: {
          id: workspaceId,
          organization_id: 'org_c',
          name: 'w',
          description: '',
          attributes: {},
          created_at: '2026-01-01T00:00:00.000000Z',
          updated_at: '2026-01-01T00:00:00.000000Z',
        },
      },
    );
    const { position } = await stack.store.append(workspaceStream(workspaceId), 1n, stored(deleted));
    expect(await stack.progress.waitFor(position, 10_000)).toBe(true);
    const pending = await stack.pool.query('SELECT solution_id FROM cascade_pending WHERE workspace_id = $1', [workspaceId]);
    expect(pending.rows.map((row) => row.solution_id).sort()).toEqual(solutionIds);
  }

  it('retries a failed cascade until every solution has its own deletion, with the deleting actor', async () => {
    const workspaceId = 'ws_cascade1';
    const solutionIds = ['sol_c1', 'sol_c2', 'sol_c3'];
    await deletedWorkspace(workspaceId, solutionIds);

    const worker = new CascadeWorker(flakyStore(stack.store, 2), stack.pool, silentLogger);
    try {
      worker.drainAll();
      await eventually(async () => (await stack.pool.query('SELECT 1 FROM cascade_pending WHERE done_at IS NULL')).rowCount === 0, 30_000);
    } finally {
      await worker.close();
    }
    const deletions: GlobalPosition[] = [];
    for (const id of solutionIds) {
      const events = await stack.store.readStream(solutionStream(id));
      expect(events.map((event) => event.type)).toEqual(['SolutionCreated', 'SolutionDeleted']);
      expect(events[1]!.data).toMatchObject({ reason: 'workspace_deleted' });
      expect(events[1]!.metadata).toMatchObject({ actor: 'bob', request_id: 'req-delete' });
      deletions.push(events[1]!.position);
    }
    // Listed as written, with where each deletion is in the log.
    const { rows: done } = await stack.pool.query(
      'SELECT solution_id, deleted_commit, deleted_prepare FROM cascade_pending WHERE workspace_id = $1 ORDER BY solution_id',
      [workspaceId],
    );
    expect(done.map((row) => ({ commit: BigInt(row.deleted_commit), prepare: BigInt(row.deleted_prepare) }))).toEqual(deletions);
    // Another instance's delete command, arriving after this worker wrote every deletion, writes
    // nothing and still learns the latest of them: what it must see projected before it answers.
    const lateWorker = new CascadeWorker(stack.store, stack.pool, silentLogger);
    const versionsBefore = await Promise.all(solutionIds.map(async (id) => (await stack.store.readStream(solutionStream(id))).length));
    expect(await lateWorker.drainWorkspace(workspaceId)).toEqual({ latest: latestPosition(deletions) });
    expect(await Promise.all(solutionIds.map(async (id) => (await stack.store.readStream(solutionStream(id))).length))).toEqual(
      versionsBefore,
    );
    await lateWorker.close();
    // The last deletions are in the log once the to-do list is empty; the change feed shows them once projected.
    await eventually(async () => (await stack.store.readAll(stack.progress.current, 1)).length === 0);
    expect(await stack.differences()).toEqual([]);
  });

  it('tells a delete command whose cascade failed half-way where the deletions it did write are, after writing all it could', async () => {
    const workspaceId = 'ws_cascade2';
    const solutionIds = ['sol_d1', 'sol_d2', 'sol_d3'];
    await deletedWorkspace(workspaceId, solutionIds);
    const worker = new CascadeWorker(flakyStore(stack.store, 1), stack.pool, silentLogger);
    const drained = await worker.drainWorkspace(workspaceId);
    await worker.close();
    expect(drained.failure).toBeInstanceOf(Error);
    const written: GlobalPosition[] = [];
    for (const id of solutionIds) {
      const events = await stack.store.readStream(solutionStream(id));
      if (events.length === 2) written.push(events[1]!.position);
    }
    expect(written).toHaveLength(2);
    expect(drained.latest).toEqual(latestPosition(written));
  });

  it('starts no deletion once its time is up: tells where those it wrote are, and that some are left to do', async () => {
    const workspaceId = 'ws_cascade4';
    const solutionIds = Array.from({ length: 24 }, (_, n) => `sol_g${String(n).padStart(2, '0')}`);
    await deletedWorkspace(workspaceId, solutionIds);
    const slow = new Proxy(stack.store, {
      get(target, property, receiver) {
        if (property !== 'append') return Reflect.get(target, property, receiver) as unknown;
        return async (...args: Parameters<EventStore['append']>) => {
          await new Promise((resolve) => setTimeout(resolve, 60));
          return target.append(...args);
        };
      },
    });
    const worker = new CascadeWorker(slow, stack.pool, silentLogger);
    // With no time at all, nothing is started.
    expect(await worker.drainWorkspace(workspaceId, 0)).toEqual({ latest: undefined, unfinished: true });
    const drained = await worker.drainWorkspace(workspaceId, 100);
    await worker.close();
    const written: GlobalPosition[] = [];
    for (const id of solutionIds) {
      const events = await stack.store.readStream(solutionStream(id));
      if (events.length === 2) written.push(events[1]!.position);
    }
    expect(written.length).toBeGreaterThan(0);
    expect(written.length).toBeLessThan(solutionIds.length);
    expect(drained).toEqual({ latest: latestPosition(written), unfinished: true });
    const { rows } = await stack.pool.query('SELECT 1 FROM cascade_pending WHERE workspace_id = $1 AND done_at IS NULL', [workspaceId]);
    expect(rows).toHaveLength(solutionIds.length - written.length);
    const healthy = new CascadeWorker(stack.store, stack.pool, silentLogger);
    expect(await healthy.drainWorkspace(workspaceId)).toEqual({ latest: expect.anything() });
    await healthy.close();
  });

  it('closed in the middle of a pass, starts no more deletions and leaves the rest listed for the next start', async () => {
    const workspaceId = 'ws_cascade5';
    const solutionIds = Array.from({ length: 40 }, (_, n) => `sol_h${String(n).padStart(2, '0')}`);
    await deletedWorkspace(workspaceId, solutionIds);
    let appended = 0;
    const slow = new Proxy(stack.store, {
      get(target, property, receiver) {
        if (property !== 'append') return Reflect.get(target, property, receiver) as unknown;
        return async (...args: Parameters<EventStore['append']>) => {
          await new Promise((resolve) => setTimeout(resolve, 100));
          appended += 1;
          return target.append(...args);
        };
      },
    });
    const worker = new CascadeWorker(slow, stack.pool, silentLogger);
    worker.drainAll();
    await eventually(() => appended > 0);
    await worker.close();
    const { rows } = await stack.pool.query('SELECT 1 FROM cascade_pending WHERE workspace_id = $1 AND done_at IS NULL', [workspaceId]);
    expect(rows.length).toBeGreaterThan(0);
    const written = (
      await Promise.all(solutionIds.map(async (id) => (await stack.store.readStream(solutionStream(id))).length === 2))
    ).filter(Boolean).length;
    expect(written + rows.length).toBe(solutionIds.length);
    const next = new CascadeWorker(stack.store, stack.pool, silentLogger);
    expect((await next.drainWorkspace(workspaceId)).failure).toBeUndefined();
    await next.close();
  });

  it('does not write again a deletion listed as written, though its position is unknown', async () => {
    // As an EventStoreDB older than 22.6 leaves it. Were it written again, the worker would find
    // no deleted workspace of that id and take the row off.
    await stack.pool.query(`INSERT INTO cascade_pending (solution_id, workspace_id, done_at) VALUES ('sol_nopos', 'ws_nopos', now())`);
    const worker = new CascadeWorker(stack.store, stack.pool, silentLogger);
    expect(await worker.drainWorkspace('ws_nopos')).toEqual({ latest: undefined });
    await worker.close();
    expect((await stack.pool.query(`SELECT 1 FROM cascade_pending WHERE solution_id = 'sol_nopos'`)).rowCount).toBe(1);
  });

  it('goes on past a workspace whose cascade keeps failing: the workspaces after it are cascaded', async () => {
    await deletedWorkspace('ws_cascade3a', ['sol_e1', 'sol_e2']);
    await deletedWorkspace('ws_cascade3b', ['sol_f1', 'sol_f2']);
    const worker = new CascadeWorker(refusingStream(stack.store, solutionStream('sol_e1')), stack.pool, silentLogger);
    try {
      worker.drainAll();
      await eventually(
        async () =>
          (await stack.pool.query(`SELECT 1 FROM cascade_pending WHERE done_at IS NULL AND workspace_id = 'ws_cascade3b'`)).rowCount === 0,
        15_000,
      );
    } finally {
      await worker.close();
    }
    const { rows } = await stack.pool.query(`SELECT solution_id FROM cascade_pending WHERE done_at IS NULL ORDER BY solution_id`);
    expect(rows.map((row) => row.solution_id)).toEqual(['sol_e1']);
    // Its deletion written by a worker whose store takes it, the list is empty again.
    const healthy = new CascadeWorker(stack.store, stack.pool, silentLogger);
    expect((await healthy.drainWorkspace('ws_cascade3a')).failure).toBeUndefined();
    await healthy.close();
    expect((await stack.pool.query('SELECT 1 FROM cascade_pending WHERE done_at IS NULL')).rowCount).toBe(0);
  });
});
