import { comparePositions, type GlobalPosition, type RecordedEvent } from '../eventstore/port.js';
import { checkpointSignatureValid, type Checkpoint, type PublicJwk } from './checkpoints.js';
import { hashEvent, isChained, storedHashes, zeroHash, type EventHashes } from './hashes.js';
import { leafHashOfBytes, rootHash, writeLeafHash, writeNodeHash, type NodeLookup } from './merkle.js';

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
 * What the audit knows of a stream: its chain (the version a number, as versions are far below
 * 2^53, so that following it allocates nothing), and its leaves by version (as places in
 * LogAudit's list), with the next one its events should meet (they come in order).
 */
type StreamAudit = StreamChain & { leaves: number[]; next: number };

/** What check finds in an event with nothing wrong: shared, as that is nearly every event. */
const noBreaks: readonly Break[] = Object.freeze([]);

/**
 * Follows the log in global order (from EventStoreDB), each stream's events in order, one event
 * at a time, against the trees' leaves. This runs for every event of the log: what it keeps per
 * event is a flag, and an event with nothing wrong allocates little beyond its hashes.
 */
export class LogAudit {
  private readonly leaves: StoredLeaf[];
  /** By place in `leaves`: whether an event of the log met that leaf. */
  private readonly matched: Uint8Array;
  /** One entry per stream, leaves and all: one lookup per event. */
  private readonly streams = new Map<string, StreamAudit>();
  events = 0;

  /** `treeEnd`: how far the trees have read the log; events after it have no leaf yet. */
  constructor(
    leaves: Iterable<StoredLeaf>,
    private readonly treeEnd: GlobalPosition,
  ) {
    this.leaves = [...leaves];
    this.matched = new Uint8Array(this.leaves.length);
    for (const [place, leaf] of this.leaves.entries()) this.stream(leaf.streamName).leaves.push(place);
    const byVersion = (a: number, b: number) => {
      const [first, second] = [this.leaves[a]!.version, this.leaves[b]!.version];
      return first < second ? -1 : first > second ? 1 : 0;
    };
    for (const stream of this.streams.values()) stream.leaves.sort(byVersion);
  }

  private stream(streamName: string): StreamAudit {
    let stream = this.streams.get(streamName);
    if (!stream) {
      stream = { version: 0, head: zeroHash, leaves: [], next: 0 };
      this.streams.set(streamName, stream);
    }
    return stream;
  }

  /** The version of the stream's `index`th leaf. */
  private versionAt(stream: StreamAudit, index: number): bigint | undefined {
    const place = stream.leaves[index];
    return place === undefined ? undefined : this.leaves[place]!.version;
  }

  /** The place of the stream's leaf of `version`: the next one when its events come in order, else found by halves. */
  private leafOf(stream: StreamAudit, version: bigint): number | undefined {
    if (this.versionAt(stream, stream.next) !== version) {
      let [low, high] = [0, stream.leaves.length];
      while (low < high) {
        const middle = (low + high) >>> 1;
        if (this.versionAt(stream, middle)! < version) low = middle + 1;
        else high = middle;
      }
      if (this.versionAt(stream, low) !== version) return undefined;
      stream.next = low;
    }
    return stream.leaves[stream.next++];
  }

  check(event: RecordedEvent): readonly Break[] {
    const stream = this.stream(event.streamName);
    const place = this.leafOf(stream, event.version);
    const leaf = place === undefined ? undefined : this.leaves[place]!;
    const checked = checkEvent(event, stream, leaf, this.treeEnd);
    if (checked.chained) this.events += 1;
    if (checked.metLeaf) this.matched[place!] = 1;
    return checked.breaks;
  }

  /** The leaves no event of the log matched (in the order given), each a break: `leafWithoutEvent`. */
  unmatchedLeaves(): StoredLeaf[] {
    return this.leaves.filter((_, place) => this.matched[place] !== 1);
  }
}

/**
 * Follows the log read stream by stream (each stream's events together, in order), each event
 * with its leaf as the reader found it: only the stream in hand is remembered, and the leaves are
 * never held. Which leaves no event met is for the reader to find: `matched` counts those met.
 */
export class StreamOrderAudit {
  private current: { streamName: string; chain: StreamChain } | undefined;
  events = 0;
  matched = 0;

  constructor(private readonly treeEnd: GlobalPosition) {}

  check(event: RecordedEvent, leaf: StoredLeaf | undefined): readonly Break[] {
    if (this.current?.streamName !== event.streamName)
      this.current = { streamName: event.streamName, chain: { version: 0, head: zeroHash } };
    const checked = checkEvent(event, this.current.chain, leaf, this.treeEnd);
    if (checked.chained) this.events += 1;
    if (checked.metLeaf) this.matched += 1;
    return checked.breaks;
  }
}

/**
 * Where a stream's chain is: the last version seen (any event's), the hash the next chained event
 * must follow (the last chained event's, or the leaf's of an event no longer marked as the
 * service's own), and, read stream by stream, the last event's place in the log.
 */
type StreamChain = { version: number; head: string; position?: GlobalPosition };

/**
 * One event against the one before it in its stream (`chain`, moved on to it) and its leaf:
 * its place in the stream, its hashes, and its leaf's hash, or that it has no leaf though the
 * trees have read past it (`treeEnd`). `chained`: whether the hash chain covers it (the events
 * of another program are only checked for their place, unless the tree holds a leaf for one);
 * `metLeaf`: whether it met its leaf.
 */
function checkEvent(
  event: RecordedEvent,
  chain: StreamChain,
  leaf: StoredLeaf | undefined,
  treeEnd: GlobalPosition,
): { breaks: readonly Break[]; chained: boolean; metLeaf: boolean } {
  const found = new Findings(event, leaf);
  const version = Number(event.version);
  if (version !== chain.version + 1)
    found.add(`follows version ${chain.version}: ${version > chain.version ? 'an event before it is missing' : 'it is out of place'}`);
  // Read stream by stream, versions come in order whatever the log's; an event deleted and put
  // back lies later in the log than the stream's next one.
  if (chain.position !== undefined && comparePositions(event.position, chain.position) < 0)
    found.add(`it lies before version ${chain.version} in the log's order: one of the two was moved`);
  chain.version = version;
  chain.position = event.position;
  if (!isChained(event)) {
    if (!leaf) return { breaks: found.breaks, chained: false, metLeaf: false };
    // The tree took it as the service's own: its metadata was changed since, so that the service
    // reads it as another program's and leaves it out of the record's history. The chain goes on
    // from the hash the tree holds for it, so that the next event is judged on its own.
    found.add(`leaf ${leaf.leafIndex} of the tree holds this event, but its metadata no longer marks it as the service's own (changed)`);
    chain.head = leaf.hash;
    return { breaks: found.breaks, chained: false, metLeaf: true };
  }
  const hash = checkHashes(event, chain.head, found);
  if (leaf) {
    if (leaf.hash !== hash) found.add(`leaf ${leaf.leafIndex} of the tree holds ${leaf.hash}, the event's hash is ${hash}`);
  } else if (comparePositions(event.position, treeEnd) <= 0) found.add('the tree has no leaf for this event');
  chain.head = hash;
  return { breaks: found.breaks, chained: true, metLeaf: leaf !== undefined };
}

/** What is wrong with one event, if anything: the array is made at the first break. */
class Findings {
  breaks: readonly Break[] = noBreaks;

  constructor(
    private readonly event: RecordedEvent,
    private readonly leaf: StoredLeaf | undefined,
  ) {}

  add(message: string): void {
    const { event, leaf } = this;
    const organizationId = leaf?.organizationId ?? (event.data as { organization_id?: string } | null)?.organization_id;
    this.breaks = [...this.breaks, { organizationId, streamName: event.streamName, version: event.version, message }];
  }
}

/**
 * The event's hashes recomputed against those it was stored with, after a chained event whose
 * hash is `head`; returns its hash, as stored or, for an event stored before hashes, as computed.
 * When all three are the ones recomputed, they are hex digests, and need no other check.
 */
function checkHashes(event: RecordedEvent, head: string, found: Findings): string {
  const { data_hash, previous_hash, hash } = (event.metadata ?? {}) as Partial<Record<keyof EventHashes, unknown>>;
  if (previous_hash === head) {
    const recomputed = hashEvent(event, head);
    if (data_hash === recomputed.data_hash && hash === recomputed.hash) return recomputed.hash;
  }
  const stored = storedHashes(event.metadata);
  const recomputed = hashEvent(event, stored?.previous_hash ?? head);
  if (!stored) return recomputed.hash;
  if (stored.data_hash !== recomputed.data_hash)
    found.add(`data_hash is ${stored.data_hash}, the stored data hashes to ${recomputed.data_hash}`);
  if (stored.previous_hash !== head) found.add(`previous_hash is ${stored.previous_hash}, the previous event's hash is ${head}`);
  if (stored.hash !== recomputed.hash)
    found.add(`hash is ${stored.hash}, the event hashes to ${recomputed.hash} (its data, type, actor, time or place changed)`);
  return stored.hash;
}

/** A leaf whose event the log does not hold: it was deleted or moved. */
export const leafWithoutEvent = (leaf: StoredLeaf): Break => ({
  organizationId: leaf.organizationId,
  streamName: leaf.streamName,
  version: leaf.version,
  message: `leaf ${leaf.leafIndex} of the tree has no event in the log: it was deleted or moved`,
});

/**
 * One level of a tree's stored nodes, by index: their hashes back to back, 32 bytes each (zeros
 * where none is stored), `present` marking the indexes stored, and `odd` those whose stored hash
 * is not 32 bytes long, apart. Flat rather than an object per node: a tree of a million leaves has
 * two million nodes, which as objects took a verifier's main thread more time to collect than to hash.
 */
export type StoredLevel = { hashes: Buffer; present: Uint8Array; odd: Map<number, Buffer> };

/** An empty level with room for `size` nodes. */
export const emptyLevel = (size: number): StoredLevel => ({
  hashes: Buffer.alloc(size * 32),
  present: new Uint8Array(size),
  odd: new Map(),
});

/** Puts a stored node into its level; one outside the level's room (a tree holds no such node) is left out. */
export function storeNode(level: StoredLevel | undefined, index: number, hash: Buffer): void {
  if (!level || !Number.isSafeInteger(index) || index < 0 || index >= level.present.length) return;
  level.present[index] = 1;
  if (hash.length === 32) hash.copy(level.hashes, index * 32);
  else level.odd.set(index, hash);
}

/** How many nodes each level of a tree of `size` leaves has: its complete subtrees. */
export const levelSizes = (size: number): number[] => {
  const sizes: number[] = [];
  for (let count = size; count >= 1; count = Math.floor(count / 2)) sizes.push(count);
  return sizes;
};

/**
 * Every complete subtree's hash of the tree of `leaves` (RFC 9162), level by level, 32 bytes
 * per node back to back: at level l, index i, the node over leaves [i·2^l, (i+1)·2^l), as
 * appendLeaves makes them one by one. A leaf missing (a hole, reported apart) counts as its stored
 * node at level 0, so that it does not make every node above it a break too; as zeros when that
 * node is missing or not a hash's length too (the nodes above it are then breaks).
 */
function completeSubtrees(leaves: StoredLevel, storedLeaves: StoredLevel | undefined): Buffer[] {
  const sizes = levelSizes(leaves.present.length);
  const levels = sizes.map((count) => Buffer.alloc(count * 32));
  for (let index = 0; index < leaves.present.length; index++) {
    const odd = leaves.odd.size === 0 ? undefined : leaves.odd.get(index);
    if (odd) leafHashOfBytes(odd).copy(levels[0]!, index * 32);
    else if (leaves.present[index] === 1) writeLeafHash(leaves.hashes, index * 32, levels[0]!, index * 32);
    else if (storedLeaves?.present[index] === 1 && !storedLeaves.odd.has(index))
      storedLeaves.hashes.copy(levels[0]!, index * 32, index * 32, index * 32 + 32);
  }
  for (let level = 1; level < levels.length; level++) {
    const [below, above] = [levels[level - 1]!, levels[level]!];
    for (let index = 0; index < sizes[level]!; index++) writeNodeHash(below, index * 64, above, index * 32);
  }
  return levels;
}

/** Whether every node of `stored` up to `count` is there, 32 bytes long, and equal to `recomputed`: the common case, in one comparison. */
const levelWhole = (stored: StoredLevel, recomputed: Buffer, count: number) =>
  stored.present.length >= count &&
  stored.odd.size === 0 &&
  stored.present.subarray(0, count).every((flag) => flag === 1) &&
  stored.hashes.subarray(0, count * 32).equals(recomputed);

/**
 * One organization's tree against its leaves (their event hashes by index, as a level: not
 * present where a leaf is missing): every stored node and every checkpoint's root recomputed,
 * every checkpoint's signature checked with the published keys.
 */
export function auditTree(
  organizationId: string,
  leaves: StoredLevel,
  storedNodes: readonly StoredLevel[],
  checkpoints: readonly Checkpoint[],
  keys: readonly PublicJwk[],
): Break[] {
  const breaks: Break[] = [];
  const found = (message: string) => breaks.push({ organizationId, message });
  const recomputed = completeSubtrees(leaves, storedNodes[0]);
  for (const [level, nodes] of recomputed.entries()) {
    const count = nodes.length / 32;
    const stored = storedNodes[level] ?? emptyLevel(0);
    if (levelWhole(stored, nodes, count)) continue;
    for (const [first, last] of runsWhere(count, (index) => stored.present[index] !== 1))
      found(
        first === last
          ? `the tree has no node at level ${level}, index ${first}`
          : `the tree has no nodes at level ${level}, indexes ${first} to ${last}`,
      );
    for (let index = 0; index < count; index++) {
      if (stored.present[index] !== 1) continue;
      const node = nodes.subarray(index * 32, index * 32 + 32);
      const hash = stored.odd.get(index) ?? stored.hashes.subarray(index * 32, index * 32 + 32);
      if (!hash.equals(node)) {
        found(`node at level ${level}, index ${index} is ${hash.toString('hex')}, its leaves hash to ${node.toString('hex')}`);
      }
    }
  }
  const lookup: NodeLookup = (level, index) => recomputed[level]!.subarray(index * 32, index * 32 + 32);
  for (const checkpoint of checkpoints) {
    if (checkpoint.size > leaves.present.length) {
      found(`checkpoint of size ${checkpoint.size}: the tree holds only ${leaves.present.length} leaves`);
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

/**
 * The runs of consecutive indexes below `count` where `holds` is true, as [first, last]: a break
 * that spans a million leaves or nodes (a tree's size forged) is one line, not a million.
 */
export function runsWhere(count: number, holds: (index: number) => boolean): [number, number][] {
  const runs: [number, number][] = [];
  for (let index = 0; index < count; index++) {
    if (!holds(index)) continue;
    const last = runs.at(-1);
    if (last && last[1] === index - 1) last[1] = index;
    else runs.push([index, index]);
  }
  return runs;
}

export const describeBreak = (broken: Break) =>
  [
    `organization ${broken.organizationId ?? '(unknown)'}`,
    ...(broken.streamName === undefined ? [] : [`stream ${broken.streamName}`]),
    ...(broken.version === undefined ? [] : [`version ${broken.version}`]),
  ].join(', ') + `: ${broken.message}`;
