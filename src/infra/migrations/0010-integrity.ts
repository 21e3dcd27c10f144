import type { Migration } from './migration.js';

/**
 * The tamper-evident history (contract §16, src/integrity): each organization's Merkle tree, kept
 * as its complete subtrees (`integrity_nodes`, level 0 the leaves), the event each leaf stands for
 * (`integrity_leaves`), each stream's organization and last hash (`integrity_streams`), how far the
 * tree has read the log (`integrity_progress`), the signed checkpoints, and every key that signed
 * one (`integrity_keys`: retired keys stay, so old checkpoints keep verifying). Append-only: no
 * rebuild truncates these tables.
 */
export const integrity: Migration = {
  version: 10,
  name: 'integrity',
  when: 'always',
  sql: `
CREATE TABLE integrity_progress (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  commit_position numeric(20) NOT NULL,
  prepare_position numeric(20) NOT NULL
);
INSERT INTO integrity_progress (commit_position, prepare_position) VALUES (0, 0);
CREATE TABLE integrity_streams (
  stream_name text PRIMARY KEY,
  organization_id text NOT NULL,
  head text NOT NULL
);
CREATE TABLE integrity_trees (
  organization_id text PRIMARY KEY,
  size bigint NOT NULL
);
CREATE TABLE integrity_leaves (
  organization_id text NOT NULL,
  leaf_index bigint NOT NULL,
  stream_name text NOT NULL,
  version bigint NOT NULL,
  data_hash text NOT NULL,
  previous_hash text NOT NULL,
  hash text NOT NULL,
  PRIMARY KEY (organization_id, leaf_index),
  UNIQUE (stream_name, version)
);
CREATE TABLE integrity_nodes (
  organization_id text NOT NULL,
  level smallint NOT NULL,
  index bigint NOT NULL,
  hash bytea NOT NULL,
  PRIMARY KEY (organization_id, level, index)
);
CREATE TABLE integrity_checkpoints (
  organization_id text NOT NULL,
  size bigint NOT NULL,
  root_hash text NOT NULL,
  timestamp text NOT NULL,
  key_id text NOT NULL,
  signature text NOT NULL,
  PRIMARY KEY (organization_id, size)
);
CREATE TABLE integrity_keys (
  key_id text PRIMARY KEY,
  public_jwk jsonb NOT NULL,
  added_at timestamptz NOT NULL DEFAULT now(),
  retired_at timestamptz
);
`,
};
