import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Gauge } from 'prom-client';
import { decodeCursor } from '../changes/cursor.js';
import type { Change, ChangePage, ChangeQuery } from '../changes/feed.js';
import { ServiceError, ShuttingDown } from '../errors.js';

/**
 * `list_changes` as Server-Sent Events (contract §14): one event per change (`id:` its cursor,
 * `event:` its type, `data:` the change as one JSON line), a comment within `heartbeatMs` when
 * nothing came, until the token stops being accepted (its `exp` plus the verifier's clock
 * tolerance, as for any request), the client goes or the service stops. Everything that can
 * refuse the request (the token, the parameters, `Last-Event-ID`, the per-caller limit, the first
 * page's read) is checked or done before the first byte, so a refusal is the usual JSON error body.
 */

/** The stream's form of a request: whether `Accept` names text/event-stream, other than with `q=0` (which refuses it, RFC 9110 §12.4.2). */
export const wantsEventStream = (request: FastifyRequest): boolean =>
  (request.headers.accept ?? '').split(',').some((range) => {
    const [type = '', ...parameters] = range.split(';').map((part) => part.trim().toLowerCase());
    const quality = parameters.find((parameter) => /^q\s*=/.test(parameter))?.replace(/^q\s*=\s*/, '');
    return type === 'text/event-stream' && (quality === undefined || Number(quality) > 0);
  });

export type ChangeStreamRequest = {
  subject: string;
  /** When the stream ends (ms since the epoch): when its token stops being accepted, `exp` plus the clock tolerance (contract §3). */
  endsAt: number;
  query: ChangeQuery;
  listChanges: (query: ChangeQuery, waitMs: number, signal: AbortSignal) => Promise<ChangePage>;
};

/**
 * A change's event, written once for every stream it goes to: streams woken together read the same
 * Change objects (src/changes/adapters/feed.ts).
 */
const events = new WeakMap<Change, string>();
function eventOf(change: Change): string {
  let event = events.get(change);
  if (event === undefined) events.set(change, (event = `id: ${change.id}\nevent: ${change.type}\ndata: ${JSON.stringify(change)}\n\n`));
  return event;
}

export class ChangeStreams {
  private readonly openPerCaller = new Map<string, number>();
  private readonly running = new Set<AbortController>();

  constructor(
    private readonly limitPerCaller: number,
    private readonly openStreams: Gauge,
    heartbeatMs = 10_000,
  ) {
    this.idleWaitMs = heartbeatMs - Math.min(heartbeatMsSlack, heartbeatMs / 5);
  }

  /**
   * How long a turn waits for a change: a little less than the heartbeat, so that the read after
   * the wait and the comment's write also fit in it (waiting the whole heartbeat, the comments came
   * 15,001–15,005 ms apart with a setting of 15,000, past the contract's "at least every 15 s").
   */
  private readonly idleWaitMs: number;

  /** Ends every stream (the service is stopping): each client reconnects elsewhere with Last-Event-ID. */
  closeAll(): void {
    for (const controller of this.running) controller.abort();
  }

  async serve(request: FastifyRequest, reply: FastifyReply, stream: ChangeStreamRequest): Promise<void> {
    const resumeFrom = request.headers['last-event-id'];
    let { after } = stream.query;
    if (resumeFrom !== undefined) {
      const position = typeof resumeFrom === 'string' ? decodeCursor(resumeFrom) : undefined;
      if (!position) {
        throw new ServiceError('validation_error', 'invalid parameters', [
          { path: 'headers.last-event-id', message: 'must be a cursor from list_changes (a change id)' },
        ]);
      }
      after = position;
    }
    const open = this.openPerCaller.get(stream.subject) ?? 0;
    if (open >= this.limitPerCaller) {
      reply.header('Retry-After', '5');
      throw new ServiceError('rate_limited', `at most ${this.limitPerCaller} change streams may be open per caller`);
    }
    this.openPerCaller.set(stream.subject, open + 1);
    this.openStreams.inc();
    const controller = new AbortController();
    const { signal } = controller;
    this.running.add(controller);
    const { raw } = reply;
    // The response's close: the client went away (or the stream ended).
    raw.on('close', () => controller.abort());
    let first: ChangePage;
    try {
      // The first page is read before the headers: a failure there (the read database refusing
      // sessions, say) is the usual JSON error body, not a 200 and an empty stream.
      first = await stream.listChanges({ ...stream.query, after }, 0, signal);
      if (signal.aborted) throw new ShuttingDown();
    } catch (error) {
      this.release(controller, stream.subject);
      throw error;
    }
    reply.hijack();
    // The token's end aborts the stream wherever it waits: for a change, or for a client that does not read.
    const cancelExpiry = abortAt(controller, stream.endsAt);
    try {
      raw.writeHead(200, {
        ...(reply.getHeaders() as Record<string, string>),
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache',
        connection: 'keep-alive',
        // Proxies that buffer (nginx) would hold the events back.
        'x-accel-buffering': 'no',
      });
      await write(raw, `: change stream\n\n${first.items.map(eventOf).join('')}`, signal);
      after = decodeCursor(first.next) ?? after;
      while (!signal.aborted) {
        const left = stream.endsAt - Date.now();
        if (left <= 0) break;
        const page = await stream.listChanges({ ...stream.query, after }, Math.min(this.idleWaitMs, left), signal);
        if (signal.aborted) break;
        const text = page.items.map(eventOf).join('');
        await write(raw, text || ': keep-alive\n\n', signal);
        after = decodeCursor(page.next) ?? after;
      }
    } catch (error) {
      // Past the headers no error body can be sent: the stream ends, and the client resumes with Last-Event-ID.
      request.log.warn({ err: (error as Error).message }, 'change stream ended by an error');
    } finally {
      cancelExpiry();
      this.release(controller, stream.subject);
      // Data the client has not taken yet: end() would wait for it to read (for ever, if it never
      // does), holding the connection and the stop; the stream is cut instead.
      if (raw.writableLength > 0) raw.destroy();
      else raw.end();
    }
  }

  /** The stream is over (or refused after all): its per-caller slot and its count in the gauge go. */
  private release(controller: AbortController, subject: string): void {
    this.running.delete(controller);
    const left = (this.openPerCaller.get(subject) ?? 1) - 1;
    if (left > 0) this.openPerCaller.set(subject, left);
    else this.openPerCaller.delete(subject);
    this.openStreams.dec();
  }
}

/**
 * Writes to the stream; when the socket's buffers are full (the client reads slowly, or not at
 * all), waits until they drain, the connection closes or the stream is aborted (the service
 * stopping, the token's end), whichever comes first.
 */
async function write(raw: FastifyReply['raw'], text: string, signal: AbortSignal): Promise<void> {
  if (raw.destroyed || signal.aborted || raw.write(text)) return;
  await new Promise<void>((resolve) => {
    const done = () => {
      raw.off('drain', done).off('close', done);
      signal.removeEventListener('abort', done);
      resolve();
    };
    raw.on('drain', done).on('close', done);
    signal.addEventListener('abort', done);
  });
}

/** What an idle stream's wait leaves of the heartbeat for its read and write: a second, or a fifth of a shorter heartbeat. */
const heartbeatMsSlack = 1_000;

/** The longest delay setTimeout takes (a longer one fires at once). */
const longestTimeoutMs = 2 ** 31 - 1;

/**
 * Aborts `controller` at `at` (ms since the epoch): a timer, set again while `at` is beyond
 * setTimeout's reach. Answers what cancels it.
 */
function abortAt(controller: AbortController, at: number): () => void {
  let timer: NodeJS.Timeout | undefined;
  const arm = () => {
    const left = at - Date.now();
    if (left <= 0) controller.abort();
    else timer = setTimeout(arm, Math.min(left, longestTimeoutMs)).unref();
  };
  arm();
  return () => clearTimeout(timer);
}
