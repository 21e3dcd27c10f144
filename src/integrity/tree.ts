import type { RecordedEvent } from '../eventstore/port.js';
import { hashEvent, isChained, storedHashes, zeroHash, type EventHashes } from './hashes.js';

/**
 * Where the tree puts the events it reads from the log: each chained event becomes the next leaf
 * of its organization's tree, with the hashes it was stored with, or, for an event stored before
 * hashes existed, the ones computed from the stream's previous hash (contract §16).
 */

/** What the tree knows of a stream: its organization and its last event's hash. */
export type StreamHead = { organizationId: string; head: string };

export type PlacedLeaf = EventHashes & { organizationId: string; streamName: string; version: bigint };

/** An event the tree cannot place: its stream's first event names no organization. */
export type Unplaced = { streamName: string; version: bigint };

const organizationOf = (data: unknown) => {
  const organizationId = (data as { organization_id?: unknown } | null)?.organization_id;
  return typeof organizationId === 'string' ? organizationId : undefined;
};

/**
 * The leaves `events` (in the log's order) add, and the streams' heads after them. `streams` holds
 * the heads of the streams known before, and is not changed.
 */
export function placeEvents(
  events: readonly RecordedEvent[],
  streams: ReadonlyMap<string, StreamHead>,
): { leaves: PlacedLeaf[]; heads: Map<string, StreamHead>; unplaced: Unplaced[] } {
  const heads = new Map<string, StreamHead>();
  const leaves: PlacedLeaf[] = [];
  const unplaced: Unplaced[] = [];
  for (const event of events) {
    if (!isChained(event)) continue;
    const known = heads.get(event.streamName) ?? streams.get(event.streamName);
    const organizationId = known?.organizationId ?? organizationOf(event.data);
    if (organizationId === undefined) {
      unplaced.push({ streamName: event.streamName, version: event.version });
      continue;
    }
    const hashes = storedHashes(event.metadata) ?? hashEvent(event, known?.head ?? zeroHash);
    leaves.push({ ...hashes, organizationId, streamName: event.streamName, version: event.version });
    heads.set(event.streamName, { organizationId, head: hashes.hash });
  }
  return { leaves, heads, unplaced };
}
