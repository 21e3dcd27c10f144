import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CascadeWorker } from '../../../src/write/cascade.js';
import { CommandHandlers, type Caller } from '../../../src/write/handlers.js';
import { eventually, silentLogger, startStack, type Stack } from '../../support/stack.js';

/**
 * Fairness under a storm on one record (issue 21): the commands of a group are released together
 * (their append, then their projection), and their answers must not run back to back as one
 * stretch of the event loop while another request's I/O waits for all of them.
 */
describe('answers of one record’s group', () => {
  let stack: Stack;
  let server: net.Server;
  let sender: net.Socket;
  let received: net.Socket;

  beforeAll(async () => {
    stack = await startStack();
    server = net.createServer();
    const accepted = new Promise<net.Socket>((resolve) => server.once('connection', resolve));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    sender = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1');
    received = await accepted;
  });
  afterAll(async () => {
    sender?.destroy();
    received?.destroy();
    server?.close();
    await stack?.close();
  });

  it('given twenty updates of one record released by one projection, I/O that arrives meanwhile is served before the last of them answers', async () => {
    let openGate!: () => void;
    let gate: Promise<boolean> = Promise.resolve(true);
    let waits = 0;
    let clock = Date.parse('2026-03-01T00:00:00Z');
    const handlers = new CommandHandlers({
      store: stack.store,
      cascade: new CascadeWorker(stack.store, stack.pool, silentLogger),
      clock: () => `${new Date((clock += 1000)).toISOString().slice(0, -1)}000Z`,
      newId: (prefix) => `${prefix}turns${Math.random().toString(36).slice(2, 12)}`,
      awaitProjection: () => {
        waits += 1;
        return gate;
      },
      projectionWaitMs: 5000,
      logger: silentLogger,
      recordQueueLimit: 100,
    });
    const caller = (n: number): Caller => ({ subject: 'user-1', organizations: new Set(['org_turns']), requestId: `request-${n}` });
    const { id } = await handlers.createWorkspace({ organization_id: 'org_turns', name: 'hot' }, caller(0));

    gate = new Promise((resolve) => (openGate = () => resolve(true)));
    waits = 0;
    const order: string[] = [];
    const updates = Array.from({ length: 20 }, (_, n) =>
      handlers.updateWorkspace({ id, name: `writer ${n}` }, caller(n + 1)).then(() => order.push('answer')),
    );
    await eventually(() => waits === 20);
    received.once('data', () => order.push('io'));
    // On loopback the byte is readable at the next poll for I/O, as another client's request would be.
    sender.write('x');
    openGate();
    await Promise.all(updates);
    await eventually(() => order.includes('io'));

    expect(order.filter((entry) => entry === 'answer')).toHaveLength(20);
    expect(order.indexOf('io')).toBeLessThan(order.lastIndexOf('answer'));
  });
});
