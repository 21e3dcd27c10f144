/**
 * The two ends a client of the change feed holds, for the benches and the soak: a webhook receiver
 * on loopback that answers every delivery at once with 204 and keeps what came, and a reader of a
 * change stream (Server-Sent Events). Both note when each change arrived, to measure its delay from
 * the change (`occurred_at`, set by the service on the same machine's clock).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createParser } from 'eventsource-parser';
import { toMicros } from '../src/domain/timestamp.js';

/** Now, in milliseconds since the epoch with a fraction: the wall clock `occurred_at` is read from. */
const nowMs = () => performance.timeOrigin + performance.now();

/** Milliseconds from a change's `occurred_at` to now. */
export const delayMs = (occurredAt: string) => nowMs() - Number(toMicros(occurredAt)) / 1000;

/** One delivery as it came: its path (which webhook), its `webhook-id`, its delay from the change, and when (performance.now()). */
export type Received = { path: string; webhookId: string; delayMs: number; at: number };

export type Receiver = {
  url: string;
  received: Received[];
  /** Down for `ms`: connections dropped and refused, then listening again on the same port. */
  down: (ms: number) => Promise<void>;
  close: () => Promise<void>;
};

/** A webhook receiver on 127.0.0.1: every POST answered 204 at once, then noted with its path and `webhook-id`. */
export async function startReceiver(): Promise<Receiver> {
  const received: Received[] = [];
  const server: Server = createServer((request, response) => {
    let body = '';
    request.setEncoding('utf8');
    request.on('data', (chunk: string) => (body += chunk));
    request.on('end', () => {
      response.writeHead(204).end();
      const { data } = JSON.parse(body) as { data: { occurred_at: string } };
      received.push({
        path: request.url ?? '/',
        webhookId: String(request.headers['webhook-id']),
        delayMs: delayMs(data.occurred_at),
        at: performance.now(),
      });
    });
  });
  const listen = (port: number) => new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  const close = () => {
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeAllConnections();
    return closed;
  };
  await listen(0);
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    down: async (ms) => {
      await close();
      await new Promise((resolve) => setTimeout(resolve, ms));
      await listen(port);
    },
    close,
  };
}

export type StreamedChange = { id: string; delayMs: number };

/**
 * `list_changes` as a stream, read until `signal` aborts; each change noted as it arrives.
 * Resolves once the stream is open (its first comment came), with what it has read so far and
 * the promise of its end.
 */
export async function openChangeStream(
  serviceUrl: string,
  token: string,
  params: Record<string, unknown>,
  signal: AbortSignal,
): Promise<{ changes: StreamedChange[]; ended: Promise<void> }> {
  const response = await fetch(`${serviceUrl}/api`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}`, accept: 'text/event-stream' },
    body: JSON.stringify({ query: 'list_changes', params }),
    signal,
  });
  if (response.status !== 200) throw new Error(`the change stream answered ${response.status}: ${await response.text()}`);
  const changes: StreamedChange[] = [];
  let opened: () => void = () => undefined;
  const open = new Promise<void>((resolve) => (opened = resolve));
  const parser = createParser({
    onEvent: (message) =>
      changes.push({ id: message.id!, delayMs: delayMs((JSON.parse(message.data) as { occurred_at: string }).occurred_at) }),
    onComment: () => opened(),
  });
  const decoder = new TextDecoder();
  const ended = (async () => {
    const reader = response.body!.getReader();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        parser.feed(decoder.decode(value, { stream: true }));
      }
    } catch (error) {
      // Aborting is how the bench closes its streams; anything else is a failure to report.
      if (!signal.aborted) throw error;
    } finally {
      opened();
    }
  })();
  await open;
  return { changes, ended };
}
