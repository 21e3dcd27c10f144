import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { workspaceDecider } from '../../../src/domain/deciders.js';
import type { WorkspaceEvent } from '../../../src/domain/events.js';
import type { WorkspaceCommand, WorkspaceState } from '../../../src/domain/workspace.js';
import { EventStoreRefused } from '../../../src/eventstore/port.js';
import { workspaceStream } from '../../../src/eventstore/stream-names.js';
import { PostgresCommandIndex } from '../../../src/write/command-index.js';
import { runGroup, type CommandJob, type Outcome } from '../../../src/write/execute.js';
import { RecentStates } from '../../../src/write/recent-states.js';
import { PostgresSnapshots } from '../../../src/write/snapshots.js';
import { silentLogger, startStack, type Stack } from '../../support/stack.js';

/**
 * Group commit (src/write/execute.ts, runGroup) against the test's event store: one group's
 * commands decided in turn and appended in one append, each answered on its own.
 */
describe('group commit of one record’s commands', () => {
  let stack: Stack;
  let options: Parameters<typeof runGroup>[3];
  let clock = Date.parse('2026-03-01T00:00:00Z');
  const now = () => {
    clock += 1000;
    return `${new Date(clock).toISOString().slice(0, -1)}000Z`;
  };

  beforeAll(async () => {
    stack = await startStack();
    options = {
      snapshots: new PostgresSnapshots(stack.pool, silentLogger),
      commandIndex: new PostgresCommandIndex(stack.pool, silentLogger),
    };
  });
  afterAll(() => stack?.close());

  /** A job of `command`, keyed when `commandId` is given, and the answer it gets. */
  function job(
    command: (context: { actor: string; requestId: string; now: string; commandId?: string }) => WorkspaceCommand,
    commandId?: string,
  ) {
    let job!: CommandJob<WorkspaceCommand, WorkspaceState, WorkspaceEvent>;
    const answer = new Promise<Outcome<WorkspaceState>>((resolve, fail) => {
      const request = { requestId: `request-${Math.random()}`, commandId };
      job = {
        decider: workspaceDecider,
        request,
        commandFor: () => command({ actor: 'user-1', ...request, now: now() }),
        newStream: false,
        resolve,
        fail,
      };
    });
    return {
      job,
      answer: answer.then(
        (outcome) => ({ outcome }),
        (error: unknown) => ({ error }),
      ),
    };
  }
  const create = (id: string) => (context: Parameters<Parameters<typeof job>[0]>[0]) =>
    ({ type: 'CreateWorkspace', id, organizationId: 'org_group', name: 'created', context }) as WorkspaceCommand;
  const remove = (id: string) => (context: Parameters<Parameters<typeof job>[0]>[0]) =>
    ({ type: 'DeleteWorkspace', id, context }) as WorkspaceCommand;
  const update = (id: string, name: string) => (context: Parameters<Parameters<typeof job>[0]>[0]) =>
    ({ type: 'UpdateWorkspace', id, name, attributes: { [name]: true }, context }) as WorkspaceCommand;

  it('given a group with one command the decider refuses, the others are appended in one append and each answers on its own', async () => {
    const id = 'ws_group_refused';
    const stream = workspaceStream(id);
    const first = job(create(id));
    await runGroup(stack.store, stream, [first.job], options);
    expect(await first.answer).toHaveProperty('outcome');

    const group = [job(update(id, 'one')), job(create(id)), job(update(id, 'three'))];
    await runGroup(
      stack.store,
      stream,
      group.map((entry) => entry.job),
      options,
    );
    const [one, refused, three] = await Promise.all(group.map((entry) => entry.answer));
    expect(refused).toEqual({ error: expect.objectContaining({ name: 'RecordIdTaken' }) });
    const applied = [one!, three!].map((answer) => ('outcome' in answer ? answer.outcome : undefined));
    expect(applied.map((outcome) => outcome?.state.status === 'active' && outcome.state.workspace.name)).toEqual(['one', 'three']);
    expect(applied[1]?.state.status === 'active' && applied[1].state.workspace.attributes).toEqual({ one: true, three: true });
    const events = await stack.store.readStream(stream);
    expect(events.map((event) => event.type)).toEqual(['WorkspaceCreated', 'WorkspaceUpdated', 'WorkspaceUpdated']);
    // One append: both answers name the same global position, that of its last event.
    expect(applied[0]?.position).toEqual(events[2]!.position);
    expect(applied[1]?.position).toEqual(events[2]!.position);
  });

  it('given a group whose append the store refuses, a command the decider refused on the stored state answers its own refusal, the others the store’s', async () => {
    const id = 'ws_group_store_refused';
    const stream = workspaceStream(id);
    const stored = [job(create(id)), job(update(id, 'zero'))];
    await runGroup(
      stack.store,
      stream,
      stored.map((entry) => entry.job),
      options,
    );
    const refusing = new Proxy(stack.store, {
      get(store, property, receiver) {
        if (property !== 'append') return Reflect.get(store, property, receiver) as unknown;
        return () => Promise.reject(new EventStoreRefused('injected refusal'));
      },
    });
    // The creation is refused on the record as stored; the last update only on the deletion before it, never stored.
    const group = [job(create(id)), job(update(id, 'one')), job(remove(id)), job(update(id, 'after the deletion'))];
    // As the record queue does when a group throws: every job of it fails with that error, unless settled before.
    await runGroup(
      refusing,
      stream,
      group.map((entry) => entry.job),
      options,
    ).catch((error: unknown) => group.forEach((entry) => entry.job.fail(error)));
    const [refused, ...others] = await Promise.all(group.map((entry) => entry.answer));
    expect(refused).toEqual({ error: expect.objectContaining({ name: 'RecordIdTaken' }) });
    expect(others).toEqual(Array(3).fill({ error: expect.objectContaining({ name: 'EventStoreRefused' }) }));
    expect((await stack.store.readStream(stream)).length).toBe(2);
  });

  it('given a keyed command that ran inside a group, its retry answers what it did there and appends nothing, with the command index and without it', async () => {
    const id = 'ws_group_keyed';
    const stream = workspaceStream(id);
    const first = job(create(id));
    await runGroup(stack.store, stream, [first.job], options);
    const group = [job(update(id, 'before')), job(update(id, 'keyed'), 'command-keyed'), job(update(id, 'after'))];
    await runGroup(
      stack.store,
      stream,
      group.map((entry) => entry.job),
      options,
    );
    const answered = await group[1]!.answer;
    expect(answered).toHaveProperty('outcome');
    const later = job(update(id, 'later'));
    await runGroup(stack.store, stream, [later.job], options);

    for (const withIndex of [true, false]) {
      const retry = job(update(id, 'keyed'), 'command-keyed');
      await runGroup(stack.store, stream, [retry.job], withIndex ? options : { snapshots: options!.snapshots });
      // The same state (the position it waits for the projection at may be its own event's, not its group's last).
      expect(await retry.answer).toEqual({
        outcome: {
          state: (answered as { outcome: Outcome<WorkspaceState> }).outcome.state,
          position: expect.anything(),
          appendedNow: false,
        },
      });
    }
    expect((await stack.store.readStream(stream)).length).toBe(5);
  });

  it('given the same keyed command decided by another instance at another instant and stored first, the second answers what is stored, and the record goes on from the stored event', async () => {
    const id = 'ws_group_keyed_twice';
    const stream = workspaceStream(id);
    // The other instance took the same request (a retry after a first instance stopped answering) and stored it first.
    let other: ReturnType<typeof job> | undefined;
    const otherFirst = new Proxy(stack.store, {
      get(store, property, receiver) {
        if (property !== 'append') return Reflect.get(store, property, receiver) as unknown;
        return async (...args: Parameters<Stack['store']['append']>) => {
          other ??= job(create(id), 'command-twice');
          await runGroup(store, stream, [other.job], options);
          return store.append(...args);
        };
      },
    });
    const recent = new RecentStates();
    const mine = job(create(id), 'command-twice');
    await runGroup(otherFirst, stream, [mine.job], { ...options, recent });

    const stored = await stack.store.readStream(stream);
    expect(stored).toHaveLength(1);
    const theirs = (await other!.answer) as { outcome: Outcome<WorkspaceState> };
    expect(theirs.outcome.state).toMatchObject({
      status: 'active',
      workspace: { created_at: (stored[0]!.metadata as { occurred_at: string }).occurred_at },
    });
    expect(await mine.answer).toEqual({ outcome: { state: theirs.outcome.state, position: expect.anything(), appendedNow: false } });
    // The next command, decided from this instance's memory, chains its hash to the stored event's.
    const next = job(update(id, 'next'));
    await runGroup(stack.store, stream, [next.job], { ...options, recent });
    expect(await next.answer).toHaveProperty('outcome');
    const [first, second] = await stack.store.readStream(stream);
    const hashes = (event: typeof first) => event!.metadata as { hash: string; previous_hash: string };
    expect(hashes(second).previous_hash).toBe(hashes(first).hash);
  });

  it('given another instance that appends first every time, the group retries for 10 s after its first conflict, then answers 503 and appends nothing of its own', async () => {
    const id = 'ws_group_outraced';
    const stream = workspaceStream(id);
    const first = job(create(id));
    await runGroup(stack.store, stream, [first.job], options);
    // The rival is another instance: its own group, through the same code, appended just before each of ours.
    let rivalUpdates = 0;
    const outraced = new Proxy(stack.store, {
      get(store, property, receiver) {
        if (property !== 'append') return Reflect.get(store, property, receiver) as unknown;
        return async (...args: Parameters<Stack['store']['append']>) => {
          const rival = job(update(id, `rival-${++rivalUpdates}`));
          await runGroup(store, stream, [rival.job], options);
          expect(await rival.answer).toHaveProperty('outcome');
          return store.append(...args);
        };
      },
    });

    const started = performance.now();
    // A group that gives up throws; its queue fails each of its commands with that error (RecordQueues).
    const given = await runGroup(outraced, stream, [job(update(id, 'outraced')).job], options).then(
      () => 'settled',
      (error: unknown) => error,
    );
    const elapsed = performance.now() - started;

    expect(given).toEqual(
      expect.objectContaining({ code: 'unavailable', message: 'the record is being changed by too many requests at once; try again' }),
    );
    expect(elapsed).toBeGreaterThanOrEqual(10_000);
    const names = (await stack.store.readStream(stream)).map((event) => (event.data as { name?: string }).name);
    expect(names).toHaveLength(1 + rivalUpdates);
    expect(names).not.toContain('outraced');
  }, 60_000);
});
