import type { Migration } from './migration.js';

/** Idempotency keys as first released: claims renewed by a heartbeat (replaced in step 5). */
export const idempotencyKeys: Migration = {
  version: 3,
  name: 'idempotency keys',
  when: 'always',
  sql: `
CREATE TABLE IF NOT EXISTS idempotency_keys (
  subject text NOT NULL,
  key text NOT NULL,
  request_hash text NOT NULL,
  claim uuid NOT NULL,
  heartbeat_at timestamptz NOT NULL DEFAULT now(),
  response_status int,
  -- json, not jsonb: a replay keeps the field order of the first answer.
  response_body json,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (subject, key)
);
CREATE INDEX IF NOT EXISTS idempotency_keys_by_age ON idempotency_keys (created_at);
`,
};
