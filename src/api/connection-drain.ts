import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';

/**
 * Lets a stop end every connection: at once those with no request in flight, each other one once
 * its answers are written (they say `connection: close`), and after `drainMs` those whose request
 * has not finished. Node's own close leaves a connection that sent nothing, or only part of its
 * headers, open until its headers timeout (a minute and more), one whose body stalls for ever
 * (Fastify sets no request timeout), and a keep-alive one until its client closes it: any of them
 * would turn a clean stop into the forced one. Called once, before the app's other hooks; tells
 * whether the stop has begun.
 */
export function drainConnectionsOnClose(app: FastifyInstance, drainMs: number): { closing: () => boolean } {
  const requestsInFlight = new Map<Socket, number>();
  let closing = false;
  let drainTimer: NodeJS.Timeout | undefined;

  app.server.on('connection', (socket: Socket) => {
    // Accepted between the close's start and the listener's end: nothing has been asked of it yet.
    if (closing) return void socket.destroy();
    requestsInFlight.set(socket, 0);
    socket.once('close', () => requestsInFlight.delete(socket));
  });
  app.server.on('request', ({ socket }: { socket: Socket }, response: NodeJS.EventEmitter) => {
    requestsInFlight.set(socket, (requestsInFlight.get(socket) ?? 0) + 1);
    response.once('close', () => {
      if (!requestsInFlight.has(socket)) return;
      const left = requestsInFlight.get(socket)! - 1;
      requestsInFlight.set(socket, left);
      // An answer begun before the stop (a change stream) went out keep-alive: end its connection once
      // it is written, without waiting for the client to close its side (Node keeps a half-closed socket).
      if (closing && left === 0) socket.destroySoon();
    });
  });

  app.addHook('preClose', async () => {
    closing = true;
    for (const [socket, count] of requestsInFlight) if (count === 0) socket.destroy();
    drainTimer = setTimeout(() => {
      const unfinished = [...requestsInFlight.values()].reduce((sum, count) => sum + count, 0);
      if (unfinished > 0)
        app.log.warn({ unfinished, drain_ms: drainMs }, 'requests still unfinished after the drain time; closing their connections');
      // Every connection left, answered or not: none may hold the stop past the drain time.
      for (const socket of requestsInFlight.keys()) socket.destroy();
    }, drainMs);
    drainTimer.unref();
  });
  app.addHook('onSend', async (_request, reply) => {
    if (closing) reply.header('connection', 'close');
  });
  app.addHook('onClose', async () => clearTimeout(drainTimer));
  return { closing: () => closing };
}
