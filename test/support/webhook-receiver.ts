import type { IncomingMessage } from 'node:http';
import { Webhook as StandardWebhook } from 'standardwebhooks';

/** A delivery as a test receiver got it: its webhook-id, whether the standardwebhooks package verified it with the secret, its body. */
export type ReceivedDelivery = { id: string; verified: boolean; body: string };

/** Reads a delivery's body and verifies it with the standardwebhooks package (never the project's own code). */
export async function readDelivery(request: IncomingMessage, secret: string): Promise<ReceivedDelivery> {
  let body = '';
  for await (const chunk of request) body += chunk;
  const headers = Object.fromEntries(Object.entries(request.headers).map(([key, value]) => [key, String(value)]));
  let verified = true;
  try {
    new StandardWebhook(secret).verify(body, headers);
  } catch {
    verified = false;
  }
  return { id: headers['webhook-id'] ?? '', verified, body };
}

/**
 * Handles a request to a test receiver (each handler reads the body first). A request whose body
 * was not fully received (the sender cut it: the dispatcher's timeout or stop, its process killed)
 * is no delivery: its failure is dropped. Any other failure stays unhandled, which fails the run.
 */
export function receive(request: IncomingMessage, handle: () => Promise<void>): void {
  handle().catch((error: unknown) => {
    if (request.complete) throw error;
  });
}
