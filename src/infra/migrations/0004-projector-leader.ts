import type { Migration } from './migration.js';

/** The active projector's sign of life, which a standby watches (src/projections/runner.ts). */
export const projectorLeader: Migration = {
  version: 4,
  name: 'projector leader',
  when: 'always',
  sql: `
CREATE TABLE IF NOT EXISTS projector_leader (
  name text PRIMARY KEY,
  pid int NOT NULL,
  backend_start timestamptz NOT NULL,
  renewed_at timestamptz NOT NULL
);
`,
};
