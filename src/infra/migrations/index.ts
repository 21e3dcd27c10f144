import { eventStore } from './0001-event-store.js';
import { readTables } from './0002-read-tables.js';
import { idempotencyKeys } from './0003-idempotency-keys.js';
import { projectorLeader } from './0004-projector-leader.js';
import { claimsHeldByASession } from './0005-claims-held-by-a-session.js';
import { appendBatch } from './0006-append-batch.js';
import { projectionDeadLetters } from './0007-projection-dead-letters.js';
import { roomForUpdates } from './0008-room-for-updates.js';
import { recordSnapshots } from './0009-record-snapshots.js';
import { integrity } from './0010-integrity.js';
import { changeFeed } from './0011-change-feed.js';
import { webhooks } from './0012-webhooks.js';
import { recordCommands } from './0013-record-commands.js';
import { appendsMarked } from './0014-appends-marked.js';
import { webhookHeads } from './0015-webhook-heads.js';
import { disabledWebhooksParked } from './0016-disabled-webhooks-parked.js';
import { retiredWebhookSecrets } from './0017-retired-webhook-secrets.js';
import { webhookStart } from './0018-webhook-start.js';
import { idempotencyCanonicalHash } from './0019-idempotency-canonical-hash.js';
import { cascadesDone } from './0020-cascades-done.js';
import type { Migration } from './migration.js';

export type { Migration } from './migration.js';

/** Every step, in the order they are applied. */
export const migrations: readonly Migration[] = [
  eventStore,
  readTables,
  idempotencyKeys,
  projectorLeader,
  claimsHeldByASession,
  appendBatch,
  projectionDeadLetters,
  roomForUpdates,
  recordSnapshots,
  integrity,
  changeFeed,
  webhooks,
  recordCommands,
  appendsMarked,
  webhookHeads,
  disabledWebhooksParked,
  retiredWebhookSecrets,
  webhookStart,
  idempotencyCanonicalHash,
  cascadesDone,
];
