import { afterEach, describe, expect, it } from 'vitest';
import { workspaceStream } from '../../../src/eventstore/stream-names.js';
import type { EventStore } from '../../../src/eventstore/port.js';
import { startInMemoryApp, type InMemoryApp } from './in-memory-app.js';

/**
 * Writers of one record queue inside an instance (contract §7, issue 21), through the app on the
 * in-memory store. The store's appends are counted, and held at a gate where a test needs writers
 * to pile up behind one another.
 */
describe('commands on one record wait their turn and are appended together', () => {
  let started: InMemoryApp | undefined;
  afterEach(() => started?.close());

  /** The store's appends, counted; while `held`, each waits until `open()`. */
  function gateAppends(store: EventStore) {
    const append = store.append.bind(store);
    let opened: Promise<void> = Promise.resolve();
    let open = () => undefined as void;
    const counted = {
      appends: 0,
      hold: () => {
        opened = new Promise<void>((resolve) => (open = resolve));
      },
      open: () => open(),
    };
    store.append = async (...args) => {
      counted.appends += 1;
      await opened;
      return append(...args);
    };
    return counted;
  }

  async function start(recordQueueLimit?: number) {
    started = await startInMemoryApp(recordQueueLimit === undefined ? {} : { recordQueueLimit });
    const token = await started.token();
    const call = (query: string, params: unknown, bearer = token) =>
      started!.app.inject({
        method: 'POST',
        url: '/api',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${bearer}` },
        payload: JSON.stringify({ query, params }),
      });
    const created = (await call('create_workspace', { organization_id: 'org_unit', name: 'hot' })).json().data;
    const id = created.id as string;
    /** How many commands wait on the record, not counting the group being run. */
    const waiting = () => started!.waitingOn(workspaceStream(id));
    return { call, id, store: started.store, token, waiting };
  }

  /**
   * Resolves once `reached` is true. A request reaches the record's queue only after its
   * authentication, which on a busy machine takes any time: polled, not assumed.
   */
  async function until(reached: () => boolean): Promise<void> {
    for (const started = performance.now(); !reached(); await new Promise((resolve) => setTimeout(resolve, 2))) {
      if (performance.now() - started > 10_000) throw new Error('the requests never reached the record’s queue');
    }
  }

  /**
   * Starts requests one after another, each once the one before has reached the record (running,
   * waiting, or answered already, as one refused is), so that they queue in this order.
   */
  async function inTurn<T>(requests: (() => Promise<T>)[], reachedRecord: () => number): Promise<Promise<T>[]> {
    const started: Promise<T>[] = [];
    for (const request of requests) {
      const before = reachedRecord();
      let answered = false;
      const answer = request();
      void answer.then(
        () => (answered = true),
        () => (answered = true),
      );
      started.push(answer);
      await until(() => answered || reachedRecord() > before);
    }
    return started;
  }

  it('twenty concurrent writers each adding a key: all answer 200, every key survives, in fewer appends than writers', async () => {
    const { call, id, store, waiting } = await start();
    const gate = gateAppends(store);
    gate.hold();
    const writes = Array.from({ length: 20 }, (_, n) => call('update_workspace', { id, name: `w${n}`, attributes: { [`key${n}`]: n } }));
    await until(() => gate.appends === 1 && waiting() === 19);
    gate.open();
    const answers = await Promise.all(writes);
    expect(answers.map((answer) => answer.statusCode)).toEqual(Array(20).fill(200));
    const events = await store.readStream(workspaceStream(id));
    expect(events).toHaveLength(21);
    const final = (await call('update_workspace', { id, name: 'after' })).json().data;
    expect(Object.keys(final.attributes).sort()).toEqual(Array.from({ length: 20 }, (_, n) => `key${n}`).sort());
    // The first writer's own append, then the other nineteen together (and the final update).
    expect(gate.appends).toBe(3);
    // Each answer shows its own change on top of those queued before it.
    for (const [n, answer] of answers.entries()) expect(answer.json().data.attributes[`key${n}`]).toBe(n);
  });

  it('a command the decider refuses inside a group fails alone; the others of its group are applied', async () => {
    const { call, id, store, waiting } = await start();
    const outsider = await started!.token({ subject: 'outsider', organizations: ['org_elsewhere'] });
    const gate = gateAppends(store);
    gate.hold();
    const first = call('update_workspace', { id, name: 'first', attributes: { a: 1 } });
    await until(() => gate.appends === 1);
    const group = await inTurn(
      [
        () => call('update_workspace', { id, name: 'second', attributes: { b: 2 } }),
        () => call('update_workspace', { id, name: 'not allowed', attributes: { c: 3 } }, outsider),
        () => call('delete_workspace', { id }),
        () => call('update_workspace', { id, name: 'after the deletion' }),
      ],
      waiting,
    );
    gate.open();
    expect((await first).statusCode).toBe(200);
    expect((await Promise.all(group)).map((answer) => answer.statusCode)).toEqual([200, 404, 200, 404]);
    const types = (await store.readStream(workspaceStream(id))).map((event) => event.type);
    expect(types).toEqual(['WorkspaceCreated', 'WorkspaceUpdated', 'WorkspaceUpdated', 'WorkspaceDeleted']);
    expect(gate.appends).toBe(2);
  });

  it('beyond RECORD_QUEUE_LIMIT waiting commands on one record: 429 rate_limited with Retry-After, never a 5xx', async () => {
    const { call, id, store, waiting } = await start(3);
    const gate = gateAppends(store);
    gate.hold();
    const writes = await inTurn(
      Array.from({ length: 8 }, (_, n) => () => call('update_workspace', { id, name: `w${n}`, attributes: { [`k${n}`]: n } })),
      () => gate.appends + waiting(),
    );
    // Another record is not refused for this record's full queue.
    const other = call('create_workspace', { organization_id: 'org_unit', name: 'elsewhere' });
    gate.open();
    expect((await other).statusCode).toBe(200);
    const answers = await Promise.all(writes);
    // One running, three waiting; the four after them refused.
    expect(answers.map((answer) => answer.statusCode)).toEqual([200, 200, 200, 200, 429, 429, 429, 429]);
    for (const refused of answers.slice(4)) {
      expect(refused.headers['retry-after']).toBe('1');
      expect(refused.json().error).toMatchObject({ code: 'rate_limited' });
    }
    expect(await store.readStream(workspaceStream(id))).toHaveLength(5);
  });
});
