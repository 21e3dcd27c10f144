import { Server, type Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';

/**
 * How long a stop keeps a connection with no request in flight: a request its client sent before
 * it could know of the stop, still on its way or waiting for the event loop, is answered (503,
 * `connection: close`) rather than reset. Closing such a connection at once reset every client
 * of a busy instance whose next request was on its way (an ECONNRESET, which tells a client
 * nothing of whether its request was taken). Bounded by the drain time.
 */
const idleConnectionGraceMs = 1_000;

/**
 * Lets a stop end every connection: the listener at once (a refused connection is one its client
 * knows was not taken); those with no request in flight once they have had no request for the
 * grace above, or once they have had one, answered 503 and ending with it; each other one once its
 * answers are written (they say `connection: close`); and after `drainMs` those whose request has
 * not finished. Node's own close leaves a connection that sent nothing, or only part of its
 * headers, open until its headers timeout (a minute and more), one whose body stalls for ever
 * (Fastify sets no request timeout), and a keep-alive one until its client closes it: any of them
 * would turn a clean stop into the forced one. Called once, before the app's other hooks; tells
 * whether the stop has begun, and gives the wait for the grace to end (`idleGraceOver`).
 */
export function drainConnectionsOnClose(
  app: FastifyInstance,
  drainMs: number,
): { closing: () => boolean; idleGraceOver: () => Promise<void> } {
  const requestsInFlight = new Map<Socket, number>();
  let closing = false;
  let drainTimer: NodeJS.Timeout | undefined;
  /** Once the stop has begun: the connections that had no request in flight then and have had none since. */
  const untouched = new Set<Socket>();
  let untouchedGone = () => undefined as void;
  let idleGrace: Promise<void> = Promise.resolve();

  const forget = (socket: Socket) => {
    if (untouched.delete(socket) && untouched.size === 0) untouchedGone();
  };
  app.server.on('connection', (socket: Socket) => {
    // Accepted between the close's start and the listener's end: nothing has been asked of it yet.
    if (closing) return void socket.destroy();
    requestsInFlight.set(socket, 0);
    socket.once('close', () => {
      requestsInFlight.delete(socket);
      forget(socket);
    });
  });
  app.server.on('request', ({ socket }: { socket: Socket }, response: NodeJS.EventEmitter) => {
    requestsInFlight.set(socket, (requestsInFlight.get(socket) ?? 0) + 1);
    forget(socket);
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
    // The listener only: Node's http close would also close every idle connection at once, the reset this grace avoids.
    Server.prototype.close.call(app.server);
    drainTimer = setTimeout(() => {
      const unfinished = [...requestsInFlight.values()].reduce((sum, count) => sum + count, 0);
      if (unfinished > 0)
        app.log.warn({ unfinished, drain_ms: drainMs }, 'requests still unfinished after the drain time; closing their connections');
      // Every connection left, answered or not: none may hold the stop past the drain time.
      for (const socket of requestsInFlight.keys()) socket.destroy();
    }, drainMs);
    drainTimer.unref();
    for (const [socket, count] of requestsInFlight) if (count === 0) untouched.add(socket);
    if (untouched.size === 0) return;
    let graceTimer: NodeJS.Timeout | undefined;
    idleGrace = new Promise<void>((resolve) => {
      untouchedGone = resolve;
      graceTimer = setTimeout(resolve, Math.min(idleConnectionGraceMs, drainMs));
    }).then(() => clearTimeout(graceTimer));
  });
  app.addHook('onSend', async (_request, reply) => {
    if (closing) reply.header('connection', 'close');
  });
  app.addHook('onClose', async () => clearTimeout(drainTimer));
  return {
    closing: () => closing,
    /**
     * For the app's last preClose hook: waits out the grace begun with the stop, then closes the
     * connections still idle (Node's close would close them next, at once). Awaited there, after
     * the other hooks have ended the change streams and the long polls, so the grace holds them up
     * no longer than it holds the stop.
     */
    idleGraceOver: async () => {
      await idleGrace;
      for (const [socket, count] of requestsInFlight) if (count === 0) socket.destroy();
    },
  };
}
