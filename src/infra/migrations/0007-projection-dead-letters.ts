import type { Migration } from './migration.js';

/**
 * Events of the service's own that the projector could not apply, and what an operator decided
 * (src/projections/dead-letters.ts, `npm run projections:dead-letters`). A row is unresolved while
 * the projector is stopped at it; `resolution` records how it ended: `skipped` by an operator, or
 * `retried` (applied on a retry), with who asked and when.
 */
export const projectionDeadLetters: Migration = {
  version: 7,
  name: 'projection dead letters',
  when: 'always',
  sql: `
CREATE TABLE IF NOT EXISTS projection_dead_letters (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  projector text NOT NULL,
  commit_position numeric(20) NOT NULL,
  prepare_position numeric(20) NOT NULL,
  stream_name text NOT NULL,
  version bigint NOT NULL,
  event_id text NOT NULL,
  event_type text NOT NULL,
  error text NOT NULL,
  attempts int NOT NULL DEFAULT 1,
  first_failed_at timestamptz NOT NULL DEFAULT now(),
  last_failed_at timestamptz NOT NULL DEFAULT now(),
  retry_requested_by text,
  retry_requested_at timestamptz,
  resolution text CHECK (resolution IN ('skipped', 'retried')),
  resolved_by text,
  resolved_at timestamptz,
  note text,
  UNIQUE (projector, commit_position, prepare_position)
);
`,
};
