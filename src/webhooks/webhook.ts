import type { ChangeType } from '../changes/feed.js';

/** A webhook as the API shows it (contract §15); the secret only in the answers that create one. */
export type Webhook = {
  id: string;
  organization_id: string;
  url: string;
  types: ChangeType[];
  description: string;
  enabled: boolean;
  disabled_reason: DisabledReason | null;
  created_at: string;
  updated_at: string;
};

export type WebhookWithSecret = Webhook & { secret: string };

/** Why a webhook stopped: its receiver answered 410 Gone, or it failed for the configured time without a success. */
export type DisabledReason = 'gone' | 'failing';

export type DeliveryStatus = 'pending' | 'succeeded' | 'failed';

/** One change's delivery to one webhook, as list_webhook_deliveries shows it. */
export type Delivery = {
  change_id: string;
  type: ChangeType;
  status: DeliveryStatus;
  attempts: number;
  last_attempt_at: string | null;
  last_status_code: number | null;
  last_error: string | null;
  next_attempt_at: string | null;
};

/** A secret replaced by a rotation, and when it stops signing (24 h after it was replaced). */
export type RetiredSecret = { secret: string; until: string };

/** How long a secret still signs after a rotation replaced it. */
export const rotationOverlapMs = 24 * 3_600_000;

/**
 * How many replaced secrets sign at most beside the current one: the most recently replaced. A
 * webhook rotated more often than this within 24 h drops its oldest before their 24 h are over;
 * the bound keeps `webhook-signature` short (each signature is 47 characters).
 */
export const retiredSecretsKept = 10;

/**
 * The secrets an attempt is signed with: the current one, then every one replaced whose 24 h are
 * not over, the most recently replaced first, at most {@link retiredSecretsKept}.
 * `previous_secret` is the last replaced as an earlier version recorded it (still written, and
 * read for a rotation such an instance made during an upgrade).
 */
export function signingSecrets(
  row: { secret: string; previous_secret: string | null; previous_secret_until: Date | null; retired_secrets: readonly RetiredSecret[] },
  now: Date,
): string[] {
  const retired = row.retired_secrets.map(({ secret, until }) => ({ secret, until: Date.parse(until) }));
  if (row.previous_secret && row.previous_secret_until)
    retired.push({ secret: row.previous_secret, until: row.previous_secret_until.getTime() });
  const signing = [row.secret];
  for (const { secret } of retired.filter(({ until }) => until > now.getTime()).sort((a, b) => b.until - a.until)) {
    if (signing.length > retiredSecretsKept) break;
    if (!signing.includes(secret)) signing.push(secret);
  }
  return signing;
}

/** The body of a delivery (Standard Webhooks): the event type, when it happened, and the change as the feed shows it. */
export const deliveryBody = (change: { type: string; occurred_at: string }) =>
  JSON.stringify({ type: change.type, timestamp: change.occurred_at, data: change });
