import type { RecordKind } from '../../audit/history.js';
import { readRecord } from '../../eventstore/event-log.js';
import { solutionStream, workspaceStream } from '../../eventstore/stream-names.js';
import { invalid, notFound } from '../../errors.js';
import type { EventStore } from '../../eventstore/port.js';
import type { Pool } from '../../infra/postgres.js';
import type { Checkpoint, PublicJwk } from '../checkpoints.js';
import { storedHashes } from '../hashes.js';
import { consistencyPath, inclusionPath, lookupIn, nodesRead, type NodeKey } from '../merkle.js';
import { readCheckpoint, readNodes, readPublicKeys, readStreamLeaves, readStreamOrganization } from './tables.js';

/**
 * The proof queries (contract §16). Each reads O(log n) of the tree's stored nodes: which ones is
 * worked out first (merkle.ts `nodesRead`), then fetched in one query.
 */

export type ProofEvent = {
  version: number;
  type: string;
  occurred_at: string;
  actor: string;
  stream: string;
  schema_version: number;
  stored_data: Record<string, unknown>;
  data_hash: string;
  previous_hash: string;
  hash: string;
  leaf_index: number;
  inclusion_path: string[];
};

/** A leaf of the record whose event the store no longer has. */
export type MissingEvent = Pick<ProofEvent, 'version' | 'hash' | 'leaf_index' | 'inclusion_path'>;

export type RecordProof = { checkpoint: Checkpoint; events: ProofEvent[]; missing_events: MissingEvent[] };

const hex = (hashes: Buffer[]) => hashes.map((hash) => hash.toString('hex'));

async function signedCheckpoint(pool: Pool, organizationId: string, size: number | undefined): Promise<Checkpoint> {
  const checkpoint = await readCheckpoint(pool, organizationId, size);
  if (!checkpoint) throw notFound(size === undefined ? 'checkpoint' : `checkpoint of size ${size}`);
  return checkpoint;
}

export async function getCheckpoint(
  pool: Pool,
  organizationId: string,
  organizations: ReadonlySet<string>,
  size?: number,
): Promise<Checkpoint> {
  if (!organizations.has(organizationId)) throw notFound('organization');
  return signedCheckpoint(pool, organizationId, size);
}

/**
 * A record's events that the checkpoint covers, each as stored with its hashes and inclusion path.
 * The hashes are those stored with the event; an event stored before hashes existed shows the
 * ones the tree computed when it read it.
 */
export async function recordProof(
  pool: Pool,
  store: EventStore,
  kind: RecordKind,
  id: string,
  organizations: ReadonlySet<string>,
  size?: number,
): Promise<RecordProof> {
  const streamName = kind === 'workspace' ? workspaceStream(id) : solutionStream(id);
  const [treeOrganization, { events: logged }] = await Promise.all([
    readStreamOrganization(pool, streamName),
    readRecord(store, streamName),
  ]);
  // The organization the tree took the stream under decides, not the stream's first event as the
  // store has it now: the proof of a record whose first event was deleted under the service must
  // still show that leaf as missing. The first event decides only for a stream the tree has not read yet.
  const created = logged[0]?.event;
  const organizationId = treeOrganization ?? (created && 'organization_id' in created.data ? created.data.organization_id : undefined);
  if (organizationId === undefined || !organizations.has(organizationId)) throw notFound(kind);
  const [checkpoint, streamLeaves] = await Promise.all([
    signedCheckpoint(pool, organizationId, size),
    readStreamLeaves(pool, organizationId, streamName),
  ]);
  const leaves = streamLeaves.filter((leaf) => leaf.leafIndex < checkpoint.size);
  const byVersion = new Map(logged.map((entry) => [entry.version, entry.stored]));
  // A leaf whose event the service no longer reads as its own (its metadata was changed since the
  // tree took it) is shown with the event as stored, for the verifier to judge: left out, it would
  // hide that event (a deletion, say) from anyone checking the record.
  for (const leaf of leaves) {
    if (byVersion.has(leaf.version)) continue;
    const [stored] = await store.readStream(leaf.streamName, { from: leaf.version, limit: 1 });
    if (stored?.version === leaf.version) byVersion.set(leaf.version, stored);
  }
  // A leaf whose event the store no longer has (deleted under the service) is shown as missing:
  // left out, a deleted last event would leave a chain that is whole but short.
  const covered = leaves.filter((leaf) => byVersion.has(leaf.version));
  const missing = leaves.filter((leaf) => !byVersion.has(leaf.version));
  const paths = (lookup: Parameters<typeof inclusionPath>[2]) =>
    [...covered, ...missing].map((leaf) => inclusionPath(leaf.leafIndex, checkpoint.size, lookup));
  const lookup = lookupIn(await readNodes(pool, organizationId, nodesRead(paths)));
  const inclusionPaths = paths(lookup);
  const events = covered.map((leaf, index): ProofEvent => {
    const stored = byVersion.get(leaf.version)!;
    // Metadata changed under the service may lack what the hash covers (or be no object at all):
    // the proof then shows it as empty, and the verifier's recomputed hash names the event.
    const metadata = (stored.metadata ?? {}) as Partial<{ occurred_at: string; actor: string; schema_version: number }>;
    const hashes = storedHashes(stored.metadata) ?? leaf;
    return {
      version: Number(stored.version),
      type: stored.type,
      occurred_at: typeof metadata.occurred_at === 'string' ? metadata.occurred_at : '',
      actor: typeof metadata.actor === 'string' ? metadata.actor : '',
      stream: stored.streamName,
      schema_version: typeof metadata.schema_version === 'number' ? metadata.schema_version : 0,
      stored_data: stored.data as Record<string, unknown>,
      data_hash: hashes.data_hash,
      previous_hash: hashes.previous_hash,
      hash: hashes.hash,
      leaf_index: leaf.leafIndex,
      inclusion_path: hex(inclusionPaths[index]!),
    };
  });
  const missing_events = missing.map((leaf, index): MissingEvent => ({
    version: Number(leaf.version),
    hash: leaf.hash,
    leaf_index: leaf.leafIndex,
    inclusion_path: hex(inclusionPaths[covered.length + index]!),
  }));
  return { checkpoint, events, missing_events };
}

export async function consistencyProof(
  pool: Pool,
  organizationId: string,
  organizations: ReadonlySet<string>,
  fromSize: number,
  toSize: number,
): Promise<{ from: Checkpoint; to: Checkpoint; path: string[] }> {
  if (fromSize > toSize) {
    throw invalid('params.from_size', 'must not be greater than to_size');
  }
  if (!organizations.has(organizationId)) throw notFound('organization');
  const from = await signedCheckpoint(pool, organizationId, fromSize);
  const to = await signedCheckpoint(pool, organizationId, toSize);
  const keys: NodeKey[] = nodesRead((lookup) => consistencyPath(fromSize, toSize, lookup));
  return { from, to, path: hex(consistencyPath(fromSize, toSize, lookupIn(await readNodes(pool, organizationId, keys)))) };
}

/** The JWKS of `GET /audit-keys`: every key that signed, retired ones included. */
export async function auditKeys(pool: Pool): Promise<{ keys: PublicJwk[] }> {
  return { keys: await readPublicKeys(pool) };
}
