import type pg from 'pg';
import type { GlobalPosition } from '../../eventstore/port.js';
import { copyOut, visitCopyRows } from '../../infra/binary-copy.js';
import { rowsWithoutEvent, type LogSnapshot, type RowsBeside, type StreamRange } from '../../eventstore/postgres-stream-order.js';
import { lockKeys } from '../../infra/lock-keys.js';
import type { Pool, PoolClient } from '../../infra/postgres.js';
import type { Checkpoint, PublicJwk } from '../checkpoints.js';
import { emptyLevel, levelSizes, storeNode, type StoredLeaf, type StoredLevel } from '../audit.js';
import { copyBytes, type MerkleNode, type NodeKey } from '../merkle.js';
import type { PlacedLeaf, StreamHead } from '../tree.js';

/** The integrity tables (migration 0010) as the tree, the proofs and `audit:verify` read and write them. */

type Queryable = Pick<PoolClient, 'query'>;

/**
 * Takes the tree's turn, for the rest of the transaction (instances take turns), and reads where
 * the tree stands. An advisory lock rather than a row lock: a transaction takes a transaction id at
 * its first lock of a row or write, and while it holds one the PostgreSQL store hides every append
 * that commits after it from the projector (src/eventstore/postgres.ts); so the keeper reads
 * without one, and writes its batch in one statement (saveTreeBatch).
 */
export async function lockProgress(client: Queryable): Promise<GlobalPosition> {
  await client.query('SELECT pg_advisory_xact_lock($1)', [lockKeys.integrityTree]);
  return readTreeProgress(client);
}

/** A batch of the tree: each organization's new leaves and the nodes they complete, the streams' new heads, and the position read to. */
export type TreeBatch = {
  growth: { organizationId: string; firstIndex: number; leaves: readonly PlacedLeaf[]; nodes: readonly MerkleNode[] }[];
  heads: Map<string, StreamHead>;
  progress: GlobalPosition;
};

/** Writes a batch in one statement (see lockProgress for why one). */
export async function saveTreeBatch(client: Queryable, { growth, heads, progress }: TreeBatch): Promise<void> {
  const leaves = growth.flatMap(({ organizationId, firstIndex, leaves }) =>
    leaves.map((leaf, offset) => ({ organizationId, index: firstIndex + offset, leaf })),
  );
  const nodes = growth.flatMap(({ organizationId, nodes }) => nodes.map((node) => ({ organizationId, node })));
  const entries = [...heads];
  await client.query(
    `WITH leaves AS (
       INSERT INTO integrity_leaves (organization_id, leaf_index, stream_name, version, data_hash, previous_hash, hash)
       SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[])
     ), nodes AS (
       INSERT INTO integrity_nodes (organization_id, level, index, hash)
       SELECT * FROM unnest($8::text[], $9::smallint[], $10::bigint[], $11::bytea[])
     ), trees AS (
       INSERT INTO integrity_trees (organization_id, size) SELECT * FROM unnest($12::text[], $13::bigint[])
       ON CONFLICT (organization_id) DO UPDATE SET size = excluded.size
     ), streams AS (
       INSERT INTO integrity_streams (stream_name, organization_id, head)
       SELECT * FROM unnest($14::text[], $15::text[], $16::text[])
       ON CONFLICT (stream_name) DO UPDATE SET head = excluded.head
     )
     UPDATE integrity_progress SET commit_position = $17, prepare_position = $18`,
    [
      leaves.map(({ organizationId }) => organizationId),
      leaves.map(({ index }) => index),
      leaves.map(({ leaf }) => leaf.streamName),
      leaves.map(({ leaf }) => leaf.version.toString()),
      leaves.map(({ leaf }) => leaf.data_hash),
      leaves.map(({ leaf }) => leaf.previous_hash),
      leaves.map(({ leaf }) => leaf.hash),
      nodes.map(({ organizationId }) => organizationId),
      nodes.map(({ node }) => node.level),
      nodes.map(({ node }) => node.index),
      nodes.map(({ node }) => node.hash),
      growth.map(({ organizationId }) => organizationId),
      growth.map(({ firstIndex, leaves }) => firstIndex + leaves.length),
      entries.map(([name]) => name),
      entries.map(([, head]) => head.organizationId),
      entries.map(([, head]) => head.head),
      progress.commit.toString(),
      progress.prepare.toString(),
    ],
  );
}

export async function readStreamHeads(client: Queryable, streamNames: string[]): Promise<Map<string, StreamHead>> {
  const { rows } = await client.query<{ stream_name: string; organization_id: string; head: string }>(
    'SELECT stream_name, organization_id, head FROM integrity_streams WHERE stream_name = ANY($1)',
    [streamNames],
  );
  return new Map(rows.map((row) => [row.stream_name, { organizationId: row.organization_id, head: row.head }]));
}

/** Which of `events` (stream, version) the trees hold a leaf for already. */
export async function leavesHeld(client: Queryable, events: readonly { streamName: string; version: bigint }[]): Promise<Set<string>> {
  const { rows } = await client.query<{ stream_name: string; version: string }>(
    `SELECT l.stream_name, l.version FROM integrity_leaves l
     JOIN unnest($1::text[], $2::bigint[]) AS e(stream_name, version) ON l.stream_name = e.stream_name AND l.version = e.version`,
    [events.map((event) => event.streamName), events.map((event) => event.version.toString())],
  );
  return new Set(rows.map((row) => leafKey(row.stream_name, BigInt(row.version))));
}

/** A (stream, version) pair as one string, for sets of them. */
export const leafKey = (streamName: string, version: bigint) => `${version}:${streamName}`;

/** The organization the trees hold `streamName` under: set by the stream's first event when the tree read it; undefined for a stream the tree has not read. */
export async function readStreamOrganization(client: Queryable, streamName: string): Promise<string | undefined> {
  const { rows } = await client.query<{ organization_id: string }>('SELECT organization_id FROM integrity_streams WHERE stream_name = $1', [
    streamName,
  ]);
  return rows[0]?.organization_id;
}

export async function treeSizes(client: Queryable, organizationIds: string[]): Promise<Map<string, number>> {
  const { rows } = await client.query<{ organization_id: string; size: string }>(
    'SELECT organization_id, size FROM integrity_trees WHERE organization_id = ANY($1)',
    [organizationIds],
  );
  return new Map(rows.map((row) => [row.organization_id, Number(row.size)]));
}

export async function readNodes(client: Queryable, organizationId: string, keys: readonly NodeKey[]): Promise<MerkleNode[]> {
  if (keys.length === 0) return [];
  const { rows } = await client.query<{ level: number; index: string; hash: Buffer }>(
    `SELECT n.level, n.index, n.hash FROM integrity_nodes n
     JOIN unnest($2::smallint[], $3::bigint[]) AS k(level, index) ON n.level = k.level AND n.index = k.index
     WHERE n.organization_id = $1`,
    [organizationId, keys.map((key) => key.level), keys.map((key) => key.index)],
  );
  return rows.map((row) => ({ level: row.level, index: Number(row.index), hash: row.hash }));
}

/** The nodes at `keys` of several organizations' trees, in one round trip. */
export async function readNodesOfTrees(
  client: Queryable,
  keys: ReadonlyMap<string, readonly NodeKey[]>,
): Promise<Map<string, MerkleNode[]>> {
  const organizations: string[] = [];
  const levels: number[] = [];
  const indexes: number[] = [];
  for (const [organizationId, organizationKeys] of keys) {
    for (const key of organizationKeys) {
      organizations.push(organizationId);
      levels.push(key.level);
      indexes.push(key.index);
    }
  }
  const nodes = new Map<string, MerkleNode[]>([...keys.keys()].map((organizationId) => [organizationId, []]));
  if (organizations.length === 0) return nodes;
  const { rows } = await client.query<{ organization_id: string; level: number; index: string; hash: Buffer }>(
    `SELECT n.organization_id, n.level, n.index, n.hash FROM integrity_nodes n
     JOIN unnest($1::text[], $2::smallint[], $3::bigint[]) AS k(organization_id, level, index)
       ON n.organization_id = k.organization_id AND n.level = k.level AND n.index = k.index`,
    [organizations, levels, indexes],
  );
  for (const row of rows) nodes.get(row.organization_id)!.push({ level: row.level, index: Number(row.index), hash: row.hash });
  return nodes;
}

type CheckpointRow = { organization_id: string; size: string; root_hash: string; timestamp: string; key_id: string; signature: string };
const checkpointColumns = 'organization_id, size, root_hash, timestamp, key_id, signature';
const toCheckpoint = (row: CheckpointRow): Checkpoint => ({ ...row, size: Number(row.size) });

/** The organization's latest checkpoint, or the one of `size`. */
export async function readCheckpoint(pool: Queryable, organizationId: string, size?: number): Promise<Checkpoint | undefined> {
  const { rows } = await pool.query<CheckpointRow>(
    size === undefined
      ? `SELECT ${checkpointColumns} FROM integrity_checkpoints WHERE organization_id = $1 ORDER BY size DESC LIMIT 1`
      : `SELECT ${checkpointColumns} FROM integrity_checkpoints WHERE organization_id = $1 AND size = $2`,
    size === undefined ? [organizationId] : [organizationId, size],
  );
  return rows[0] && toCheckpoint(rows[0]);
}

export async function readCheckpoints(pool: Queryable, organizationId: string): Promise<Checkpoint[]> {
  const { rows } = await pool.query<CheckpointRow>(
    `SELECT ${checkpointColumns} FROM integrity_checkpoints WHERE organization_id = $1 ORDER BY size`,
    [organizationId],
  );
  return rows.map(toCheckpoint);
}

export async function saveCheckpoint(pool: Queryable, checkpoint: Checkpoint): Promise<void> {
  await pool.query(`INSERT INTO integrity_checkpoints (${checkpointColumns}) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`, [
    checkpoint.organization_id,
    checkpoint.size,
    checkpoint.root_hash,
    checkpoint.timestamp,
    checkpoint.key_id,
    checkpoint.signature,
  ]);
}

/** The trees whose newest events no checkpoint covers, and whose last checkpoint is at or before `signedBefore` (or that have none). */
export async function treesDueForCheckpoint(pool: Queryable, signedBefore: string): Promise<{ organizationId: string; size: number }[]> {
  const { rows } = await pool.query<{ organization_id: string; size: string }>(
    `SELECT t.organization_id, t.size FROM integrity_trees t
     LEFT JOIN LATERAL (
       SELECT c.size, c.timestamp FROM integrity_checkpoints c WHERE c.organization_id = t.organization_id ORDER BY c.size DESC LIMIT 1
     ) last ON true
     WHERE last.size IS NULL OR (last.size < t.size AND last.timestamp <= $1)`,
    [signedBefore],
  );
  return rows.map((row) => ({ organizationId: row.organization_id, size: Number(row.size) }));
}

/** Records the key that signs from now on; the others stay, marked retired. */
export async function registerSigningKey(pool: Pool, jwk: PublicJwk): Promise<void> {
  await pool.query('INSERT INTO integrity_keys (key_id, public_jwk) VALUES ($1, $2) ON CONFLICT (key_id) DO UPDATE SET retired_at = NULL', [
    jwk.kid,
    JSON.stringify(jwk),
  ]);
  await pool.query('UPDATE integrity_keys SET retired_at = now() WHERE key_id <> $1 AND retired_at IS NULL', [jwk.kid]);
}

export async function readPublicKeys(pool: Queryable): Promise<PublicJwk[]> {
  const { rows } = await pool.query<{ public_jwk: PublicJwk }>('SELECT public_jwk FROM integrity_keys ORDER BY added_at, key_id');
  return rows.map((row) => row.public_jwk);
}

export type LeafRow = { organizationId: string; leafIndex: number; streamName: string; version: bigint } & Pick<
  PlacedLeaf,
  'data_hash' | 'previous_hash' | 'hash'
>;

type LeafRecord = {
  organization_id: string;
  leaf_index: string;
  stream_name: string;
  version: string;
  data_hash: string;
  previous_hash: string;
  hash: string;
};
const toLeaf = (row: LeafRecord): LeafRow => ({
  organizationId: row.organization_id,
  leafIndex: Number(row.leaf_index),
  streamName: row.stream_name,
  version: BigInt(row.version),
  data_hash: row.data_hash,
  previous_hash: row.previous_hash,
  hash: row.hash,
});

/**
 * A stream's leaves in its organization's tree, by version: found by the stream's index alone.
 * Left to choose, the planner may also scan the organization's part of the primary key (the whole
 * tree) and intersect the two, while the table's statistics lag behind its growth (seen at 100,000
 * leaves: 30 ms instead of 1).
 */
export async function readStreamLeaves(pool: Queryable, organizationId: string, streamName: string): Promise<LeafRow[]> {
  const { rows } = await pool.query<LeafRecord>(
    `WITH stream_leaves AS MATERIALIZED (SELECT * FROM integrity_leaves WHERE stream_name = $2)
     SELECT * FROM stream_leaves l WHERE l.organization_id = $1 ORDER BY l.version`,
    [organizationId, streamName],
  );
  return rows.map(toLeaf);
}

/** What `readLeafHashes` found of a tree's leaves. */
export type TreeLeaves = {
  /**
   * By index, up to the tree's size or the last leaf stored, whichever is less: each leaf's event
   * hash as bytes, not present where the table lacks a leaf, and in `odd` (as its hex digits give
   * it) where the stored hash is not 64 of them.
   */
  hashes: StoredLevel;
  /** The index of the last leaf stored at or past 0 (-1 for none). */
  lastStored: number;
  /** Up to `outsideShown` indexes (as stored, in order) of leaves outside [0, size), and how many there are. */
  outside: { indexes: string[]; count: number };
};

/**
 * The hashes of the leaves of an organization's tree of `size` (as its row says), placed by index,
 * through a binary COPY in the order its scan gives: no page sorted or skipped to in PostgreSQL,
 * whose plan for that, without statistics on the table, sorted every leaf after a page's start
 * for each page (minutes of CPU for a tree of a few million leaves); and no row object or string
 * kept per leaf. Only up to the last leaf stored: a size changed to billions must be one break to
 * report, not an array the audit cannot hold.
 */
export async function readLeafHashes(client: pg.ClientBase, organizationId: string, size: number): Promise<TreeLeaves> {
  const { rows: last } = await client.query<{ last: string | null }>(
    'SELECT max(leaf_index) AS last FROM integrity_leaves WHERE organization_id = $1 AND leaf_index >= 0',
    [organizationId],
  );
  const lastStored = Number(last[0]?.last ?? -1);
  const hashes = emptyLevel(Math.max(0, Math.min(size, lastStored + 1)));
  const copy = copyOut(
    client,
    `SELECT leaf_index, hash FROM integrity_leaves
     WHERE organization_id = ${client.escapeLiteral(organizationId)} AND leaf_index >= 0 AND leaf_index < ${hashes.present.length}`,
  );
  // Fields: leaf_index (int8: length 4 bytes, then 8), hash (text: 4, then its bytes).
  await visitCopyRows(copy, 2, (buffer, at) => {
    const index = signed64(buffer, at + 4);
    const length = buffer.readInt32BE(at + 12);
    if (index < 0 || index >= hashes.present.length) return;
    if (length === 64 && hexDigestInto(buffer, at + 16, hashes.hashes, index * 32)) hashes.present[index] = 1;
    else {
      hashes.hashes.fill(0, index * 32, index * 32 + 32);
      storeNode(hashes, index, Buffer.from(buffer.toString('utf8', at + 16, at + 16 + Math.max(0, length)), 'hex'));
    }
  });
  const { rows } = await client.query<{ leaf_index: string; count: string }>(
    `SELECT leaf_index::text, count(*) OVER () AS count FROM integrity_leaves
     WHERE organization_id = $1 AND (leaf_index < 0 OR leaf_index >= $2) ORDER BY leaf_index LIMIT ${outsideShown}`,
    [organizationId, Math.max(0, size)],
  );
  return { hashes, lastStored, outside: { indexes: rows.map((row) => row.leaf_index), count: Number(rows[0]?.count ?? 0) } };
}

const outsideShown = 100;

/**
 * Every leaf of every tree: what audit:verify matches the events of an EventStoreDB log with, as
 * it reads them in global order (with events in PostgreSQL, each event comes with its leaf instead:
 * `leavesBeside`).
 */
export async function readAllLeaves(client: Queryable): Promise<StoredLeaf[]> {
  const { rows } = await client.query<Pick<LeafRecord, 'organization_id' | 'leaf_index' | 'stream_name' | 'version' | 'hash'>>(
    'SELECT organization_id, leaf_index, stream_name, version, hash FROM integrity_leaves',
  );
  return rows.map((row) => ({
    organizationId: row.organization_id,
    leafIndex: Number(row.leaf_index),
    streamName: row.stream_name,
    version: BigInt(row.version),
    hash: row.hash,
  }));
}

/** The leaves as audit:verify's log reader takes them beside the events (readLogPart). */
export const leavesBeside: RowsBeside = { table: 'integrity_leaves', columns: ['organization_id', 'leaf_index', 'hash'] };

/** The leaf of `event` from its row of `leavesBeside`, if it has one. */
export function leafBeside(
  event: { streamName: string; version: bigint },
  [organizationId, leafIndex, hash]: (string | null)[],
): StoredLeaf | undefined {
  if (organizationId == null || leafIndex == null || hash == null) return undefined;
  return { organizationId, leafIndex: Number(leafIndex), streamName: event.streamName, version: event.version, hash };
}

/** The leaves of `range` no event of the log's snapshot has, given that `matched` of the events read met one (rowsWithoutEvent). */
export async function leavesWithoutEvent(
  client: pg.ClientBase,
  log: LogSnapshot,
  range: StreamRange,
  matched: number,
): Promise<StoredLeaf[]> {
  const rows = await rowsWithoutEvent(client, log, range, leavesBeside, matched);
  return rows.map(({ streamName, version, row: [organizationId, leafIndex, hash] }) => ({
    organizationId: organizationId ?? '',
    leafIndex: Number(leafIndex),
    streamName,
    version: BigInt(version),
    hash: hash ?? '',
  }));
}

export async function readTrees(pool: Queryable): Promise<{ organizationId: string; size: number }[]> {
  const { rows } = await pool.query<{ organization_id: string; size: string }>(
    'SELECT organization_id, size FROM integrity_trees ORDER BY organization_id',
  );
  return rows.map((row) => ({ organizationId: row.organization_id, size: Number(row.size) }));
}

/** How far the trees have read the log, without waiting for a batch in progress. */
export async function readTreeProgress(client: Queryable): Promise<GlobalPosition> {
  const { rows } = await client.query<{ commit_position: string; prepare_position: string }>(
    'SELECT commit_position, prepare_position FROM integrity_progress',
  );
  return { commit: BigInt(rows[0]!.commit_position), prepare: BigInt(rows[0]!.prepare_position) };
}

/**
 * Every stored node of an organization's tree of `size` leaves, level by level (nodes outside the
 * tree's room are left out). Through a binary COPY, each hash copied from the bytes received into
 * its level: a tree of a million leaves has two million nodes, and a row object, a hex parse and
 * a buffer each cost more than hashing them.
 */
export async function readStoredLevels(client: pg.ClientBase, organizationId: string, size: number): Promise<StoredLevel[]> {
  const levels = levelSizes(size).map(emptyLevel);
  const copy = copyOut(
    client,
    `SELECT level, index, hash FROM integrity_nodes WHERE organization_id = ${client.escapeLiteral(organizationId)}`,
  );
  // Fields: level (int2: length 4 bytes, then 2), index (int8: 4, then 8), hash (bytea: 4, then its bytes).
  await visitCopyRows(copy, 3, (buffer, at) => {
    const level = levels[buffer.readInt16BE(at + 4)];
    const index = signed64(buffer, at + 10);
    const length = buffer.readInt32BE(at + 18);
    if (!level || length < 0) return;
    if (length === 32 && index >= 0 && index < level.present.length) {
      copyBytes(buffer, at + 22, level.hashes, index * 32, 32);
      level.present[index] = 1;
    } else storeNode(level, index, Buffer.from(buffer.subarray(at + 22, at + 22 + length)));
  });
  return levels;
}

/** Each byte's value as a hex digit (either case, as Buffer's 'hex' reads them), -1 for any other byte. */
const hexDigitValues = Int8Array.from({ length: 256 }, (_, byte) => {
  const digit = String.fromCharCode(byte);
  return /^[0-9a-fA-F]$/.test(digit) ? parseInt(digit, 16) : -1;
});

/**
 * Decodes the 64 hex digits at `offset` in `source` into the 32 bytes at `targetOffset` in
 * `target`; false, with the bytes written so far left, if any is not a hex digit. From the COPY's
 * bytes, with no string made per leaf: audit:verify reads a million leaves.
 */
function hexDigestInto(source: Buffer, offset: number, target: Buffer, targetOffset: number): boolean {
  for (let byte = 0; byte < 32; byte++) {
    const high = hexDigitValues[source[offset + 2 * byte]!]!;
    const low = hexDigitValues[source[offset + 2 * byte + 1]!]!;
    if (high < 0 || low < 0) return false;
    target[targetOffset + byte] = (high << 4) | low;
  }
  return true;
}

/** A 64-bit integer of a binary COPY, as a Number: leaf and node indexes are far below 2^53. */
const signed64 = (buffer: Buffer, at: number) => buffer.readInt32BE(at) * 0x100000000 + buffer.readUInt32BE(at + 4);
