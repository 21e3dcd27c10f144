import type { Migration } from './migration.js';

/**
 * Webhooks (contract §15, src/webhooks). A webhook is configuration, not a record of the domain:
 * its rows are its state (no events). `enqueued_*` is how far its deliveries have been taken from
 * the change feed's table; a delivery is one change for one webhook, its attempts leased to one
 * instance at a time (`lease`, `leased_until`) so that no attempt is made twice unless a process
 * dies mid-attempt.
 */
export const webhooks: Migration = {
  version: 12,
  name: 'webhooks',
  when: 'always',
  sql: `
CREATE TABLE webhooks (
  id text PRIMARY KEY,
  organization_id text NOT NULL,
  url text NOT NULL,
  types text[] NOT NULL,
  description text NOT NULL,
  enabled boolean NOT NULL,
  disabled_reason text,
  secret text NOT NULL,
  previous_secret text,
  previous_secret_until timestamptz,
  failing_since timestamptz,
  deleted boolean NOT NULL DEFAULT false,
  enqueued_commit numeric(20) NOT NULL,
  enqueued_prepare numeric(20) NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL
);
CREATE INDEX webhooks_by_organization ON webhooks (organization_id, created_at, id) WHERE NOT deleted;

CREATE TABLE webhook_deliveries (
  webhook_id text NOT NULL,
  commit_position numeric(20) NOT NULL,
  prepare_position numeric(20) NOT NULL,
  organization_id text NOT NULL,
  stream_name text NOT NULL,
  type text NOT NULL,
  status text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
  attempts int NOT NULL DEFAULT 0,
  next_attempt_at timestamptz,
  last_attempt_at timestamptz,
  last_status_code int,
  last_error text,
  lease uuid,
  leased_until timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (webhook_id, commit_position, prepare_position)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_of_record ON webhook_deliveries (webhook_id, stream_name, commit_position, prepare_position)
  WHERE status = 'pending';
CREATE INDEX webhook_deliveries_by_status ON webhook_deliveries (webhook_id, status, commit_position, prepare_position);
`,
};
