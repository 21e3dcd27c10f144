import { comparePositions, type GlobalPosition, type RecordedEvent } from '../eventstore/port.js';
import { checkpointSignatureValid, type Checkpoint, type PublicJwk } from './checkpoints.js';
import { hashEvent, isChained, storedHashes, zeroHash } from './hashes.js';
import { leafHash, nodeHash, rootHash, type MerkleNode, type NodeLookup } from './merkle.js';

/**
 * What `npm run audit:verify` checks (contract §16), as functions of what it reads: every event's
 * hashes recomputed and its stream's chain followed, each event against its leaf, and each tree's
 * nodes, roots and checkpoint signatures recomputed from its leaves.
 */

/** One thing found wrong, with where: the organization, stream and version when it is one event's. */
export type Break = { organizationId?: string | undefined; streamName?: string; version?: bigint; message: string };

/** A leaf of a tree as stored. */
export type StoredLeaf = { organizationId: string; leafIndex: number; streamName: string; version: bigint; hash: string };

const leafKey = (streamName: string, version: bigint) => `${streamName}@${version}`;

/** Follows the log in global order, one event at a time, against the trees' leaves. */
export class LogAudit {
  private readonly leaves = new Map<string, StoredLeaf>();
  private readonly matched = new Set<string>();
  /** Per stream: the last version seen (any event's), and the last chained event's hash. */
  private readonly streams = new Map<string, { version: bigint; head: string }>();
  events = 0;

  /** `treeEnd`: how far the trees have read the log; events after it have no leaf yet. */
  constructor(
    leaves: Iterable<StoredLeaf>,
    private readonly treeEnd: GlobalPosition,
  ) {
    for (const leaf of leaves) this.leaves.set(leafKey(leaf.streamName, leaf.version), leaf);
  }

  check(event: RecordedEvent): Break[] {
    const stream = this.streams.get(event.streamName) ?? { version: 0n, head: zeroHash };
    const breaks: Break[] = [];
    const key = leafKey(event.streamName, event.version);
    const leaf = this.leaves.get(key);
    const organizationId = leaf?.organizationId ?? (event.data as { organization_id?: string } | null)?.organization_id;
    const found = (message: string) => breaks.push({ organizationId, streamName: event.streamName, version: event.version, message });
    if (event.version !== stream.version + 1n) {
      found(
        `follows version ${stream.version}: ${event.version > stream.version ? 'an event before it is missing' : 'it is out of place'}`,
      );
    }
    stream.version = event.version;
    if (!isChained(event)) {
      this.streams.set(event.streamName, stream);
      return breaks;
    }
    this.events += 1;
    const stored = storedHashes(event.metadata);
    const recomputed = hashEvent(event, stored?.previous_hash ?? stream.head);
    if (stored) {
      if (stored.data_hash !== recomputed.data_hash)
        found(`data_hash is ${stored.data_hash}, the stored data hashes to ${recomputed.data_hash}`);
      if (stored.previous_hash !== stream.head)
        found(`previous_hash is ${stored.previous_hash}, the previous event's hash is ${stream.head}`);
      if (stored.hash !== recomputed.hash) {
        found(`hash is ${stored.hash}, the event hashes to ${recomputed.hash} (its data, type, actor, time or place changed)`);
      }
    }
    const hash = stored?.hash ?? recomputed.hash;
    if (leaf) {
      this.matched.add(key);
      if (leaf.hash !== hash) found(`leaf ${leaf.leafIndex} of the tree holds ${leaf.hash}, the event's hash is ${hash}`);
    } else if (comparePositions(event.position, this.treeEnd) <= 0) found('the tree has no leaf for this event');
    this.streams.set(event.streamName, { version: event.version, head: hash });
    return breaks;
  }

  /** The leaves no event of the log matched (in the order given), each a break: `leafWithoutEvent`. */
  unmatchedLeaves(): StoredLeaf[] {
    return [...this.leaves].filter(([key]) => !this.matched.has(key)).map(([, leaf]) => leaf);
  }
}

/** A leaf whose event the log does not hold: it was deleted or moved. */
export const leafWithoutEvent = (leaf: StoredLeaf): Break => ({
  organizationId: leaf.organizationId,
  streamName: leaf.streamName,
  version: leaf.version,
  message: `leaf ${leaf.leafIndex} of the tree has no event in the log: it was deleted or moved`,
});

/**
 * Every complete subtree's hash of the tree of `leafHashes` (RFC 9162): at [level][index], the
 * node over leaves [index·2^level, (index+1)·2^level), as appendLeaves makes them one by one.
 */
function completeSubtrees(leafHashes: readonly string[]): Buffer[][] {
  const levels: Buffer[][] = [leafHashes.map(leafHash)];
  for (let below = levels[0]!; below.length > 1;) {
    const above: Buffer[] = [];
    for (let index = 0; index + 1 < below.length; index += 2) above.push(nodeHash(below[index]!, below[index + 1]!));
    levels.push(above);
    below = above;
  }
  return levels;
}

/**
 * One organization's tree against its leaves: every stored node and every checkpoint's root
 * recomputed, every checkpoint's signature checked with the published keys.
 */
export function auditTree(
  organizationId: string,
  leafHashes: readonly string[],
  storedNodes: readonly MerkleNode[],
  checkpoints: readonly Checkpoint[],
  keys: readonly PublicJwk[],
): Break[] {
  const breaks: Break[] = [];
  const found = (message: string) => breaks.push({ organizationId, message });
  // Level by level, in arrays indexed as the nodes are: a tree of a million leaves has two million nodes.
  const recomputed = completeSubtrees(leafHashes);
  const stored: Buffer[][] = recomputed.map(() => []);
  for (const node of storedNodes) if (node.level < stored.length) stored[node.level]![node.index] = node.hash;
  for (const [level, nodes] of recomputed.entries()) {
    for (const [index, node] of nodes.entries()) {
      const hash = stored[level]![index];
      if (!hash) found(`the tree has no node at level ${level}, index ${index}`);
      else if (!hash.equals(node)) {
        found(`node at level ${level}, index ${index} is ${hash.toString('hex')}, its leaves hash to ${node.toString('hex')}`);
      }
    }
  }
  const lookup: NodeLookup = (level, index) => recomputed[level]![index]!;
  for (const checkpoint of checkpoints) {
    if (checkpoint.size > leafHashes.length) {
      found(`checkpoint of size ${checkpoint.size}: the tree holds only ${leafHashes.length} leaves`);
      continue;
    }
    const root = rootHash(checkpoint.size, lookup).toString('hex');
    if (root !== checkpoint.root_hash)
      found(`checkpoint of size ${checkpoint.size}: root_hash is ${checkpoint.root_hash}, the leaves give ${root}`);
    if (!checkpointSignatureValid(checkpoint, keys))
      found(`checkpoint of size ${checkpoint.size}: the signature does not verify with key ${checkpoint.key_id}`);
  }
  return breaks;
}

export const describeBreak = (broken: Break) =>
  [
    `organization ${broken.organizationId ?? '(unknown)'}`,
    ...(broken.streamName === undefined ? [] : [`stream ${broken.streamName}`]),
    ...(broken.version === undefined ? [] : [`version ${broken.version}`]),
  ].join(', ') + `: ${broken.message}`;
