import type { Migration } from './migration.js';

/** An idempotency claim belongs to its holder's database session instead of a heartbeat (src/api/idempotency.ts). */
export const claimsHeldByASession: Migration = {
  version: 5,
  name: 'idempotency claims held by a session',
  when: 'always',
  sql: `
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS holder_pid int;
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS holder_started timestamptz;
ALTER TABLE idempotency_keys DROP COLUMN IF EXISTS heartbeat_at;
`,
};
