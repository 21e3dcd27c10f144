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

/** The secrets an attempt is signed with: the current one, and the one before it until its 24 h are over. */
export function signingSecrets(
  row: { secret: string; previous_secret: string | null; previous_secret_until: Date | null },
  now: Date,
): string[] {
  return row.previous_secret && row.previous_secret_until && row.previous_secret_until > now
    ? [row.secret, row.previous_secret]
    : [row.secret];
}

/** How long an old secret still signs after a rotation. */
export const rotationOverlapMs = 24 * 3_600_000;

/** The body of a delivery (Standard Webhooks): the event type, when it happened, and the change as the feed shows it. */
export const deliveryBody = (change: { type: string; occurred_at: string }) =>
  JSON.stringify({ type: change.type, timestamp: change.occurred_at, data: change });
