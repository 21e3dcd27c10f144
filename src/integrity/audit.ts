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

/**
 * What the audit knows of a stream: the last version seen (any event's), the last chained event's
 * hash, and its leaves by version, with the next one its events should meet (they come in order).
 */
type StreamAudit = { version: bigint; head: string; leaves: StoredLeaf[]; next: number };

const byVersion = (a: StoredLeaf, b: StoredLeaf) => (a.version < b.version ? -1 : a.version > b.version ? 1 : 0);

/** Follows the log, each stream's events in order, one event at a time, against the trees' leaves. */
export class LogAudit {
  private readonly leaves: StoredLeaf[];
  private readonly matched = new Set<StoredLeaf>();
  /** One entry per stream, leaves and all: one lookup per event (this runs for every event of the log). */
  private readonly streams = new Map<string, StreamAudit>();
  events = 0;

  /** `treeEnd`: how far the trees have read the log; events after it have no leaf yet. */
  constructor(
    leaves: Iterable<StoredLeaf>,
    private readonly treeEnd: GlobalPosition,
  ) {
    this.leaves = [...leaves];
    for (const leaf of this.leaves) this.stream(leaf.streamName).leaves.push(leaf);
    for (const stream of this.streams.values()) stream.leaves.sort(byVersion);
  }

  private stream(streamName: string): StreamAudit {
    let stream = this.streams.get(streamName);
    if (!stream) {
      stream = { version: 0n, head: zeroHash, leaves: [], next: 0 };
      this.streams.set(streamName, stream);
    }
    return stream;
  }

  /** The stream's leaf of `version`: the next one when its events come in order, else found by halves. */
  private leafOf(stream: StreamAudit, version: bigint): StoredLeaf | undefined {
    const { leaves } = stream;
    let leaf = leaves[stream.next];
    if (leaf?.version !== version) {
      let [low, high] = [0, leaves.length];
      while (low < high) {
        const middle = (low + high) >>> 1;
        if (leaves[middle]!.version < version) low = middle + 1;
        else high = middle;
      }
      leaf = leaves[low];
      if (leaf?.version !== version) return undefined;
      stream.next = low;
    }
    stream.next += 1;
    return leaf;
  }

  check(event: RecordedEvent): Break[] {
    const stream = this.stream(event.streamName);
    const breaks: Break[] = [];
    const leaf = this.leafOf(stream, event.version);
    const organizationId = leaf?.organizationId ?? (event.data as { organization_id?: string } | null)?.organization_id;
    const where = { organizationId, streamName: event.streamName, version: event.version };
    if (event.version !== stream.version + 1n) {
      const why = event.version > stream.version ? 'an event before it is missing' : 'it is out of place';
      breaks.push({ ...where, message: `follows version ${stream.version}: ${why}` });
    }
    stream.version = event.version;
    if (!isChained(event)) return breaks;
    this.events += 1;
    const stored = storedHashes(event.metadata);
    const recomputed = hashEvent(event, stored?.previous_hash ?? stream.head);
    if (stored) {
      if (stored.data_hash !== recomputed.data_hash)
        breaks.push({ ...where, message: `data_hash is ${stored.data_hash}, the stored data hashes to ${recomputed.data_hash}` });
      if (stored.previous_hash !== stream.head)
        breaks.push({ ...where, message: `previous_hash is ${stored.previous_hash}, the previous event's hash is ${stream.head}` });
      if (stored.hash !== recomputed.hash) {
        const message = `hash is ${stored.hash}, the event hashes to ${recomputed.hash} (its data, type, actor, time or place changed)`;
        breaks.push({ ...where, message });
      }
    }
    const hash = stored?.hash ?? recomputed.hash;
    if (leaf) {
      this.matched.add(leaf);
      if (leaf.hash !== hash)
        breaks.push({ ...where, message: `leaf ${leaf.leafIndex} of the tree holds ${leaf.hash}, the event's hash is ${hash}` });
    } else if (comparePositions(event.position, this.treeEnd) <= 0)
      breaks.push({ ...where, message: 'the tree has no leaf for this event' });
    stream.head = hash;
    return breaks;
  }

  /** The leaves no event of the log matched (in the order given), each a break: `leafWithoutEvent`. */
  unmatchedLeaves(): StoredLeaf[] {
    return this.leaves.filter((leaf) => !this.matched.has(leaf));
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
