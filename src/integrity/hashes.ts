import { hash as digest } from 'node:crypto';
import canonicalize from 'canonicalize';
import { isServiceEvent, type StoredEvent } from '../domain/upcast.js';

/**
 * The event hashes of contract §16: each event's `hash` covers where it sits, what it is, who
 * caused it and when, its data (through `data_hash`) and the hash of the event before it in its
 * stream (`previous_hash`), all over RFC 8785 canonical JSON of the stored form, before upcasting.
 */

/** `previous_hash` of a stream's first event. */
export const zeroHash = '0'.repeat(64);

export type EventHashes = { data_hash: string; previous_hash: string; hash: string };

/** An event as stored, with where it sits: what the hashes cover. */
export type StoredForm = StoredEvent & { streamName: string; version: bigint };

/** A string JSON.stringify writes as it is, between quotes: no quote, backslash, control character or surrogate. */
// eslint-disable-next-line no-control-regex -- the control characters are what JSON escapes, and so what this looks for
const writtenAsItIs = /^[^"\\\u0000-\u001f\ud800-\udfff]*$/;

/**
 * A string as RFC 8785 writes it, which is as JSON.stringify does, unless it holds a lone
 * surrogate: JSON.stringify escapes one as \ud…, and the library refuses it. Undefined then, and
 * for anything not a string. Most strings need no escape: quoted directly, in half the time
 * JSON.stringify takes (audit:verify writes about ten per event).
 */
function canonicalString(value: unknown): string | undefined {
  if (typeof value !== 'string') return undefined;
  if (writtenAsItIs.test(value)) return `"${value}"`;
  return value.isWellFormed() ? JSON.stringify(value) : undefined;
}

/**
 * The canonical JSON of a value as JSON.parse gives them, written out in one pass: keys sorted by
 * UTF-16 code units (what Array#sort does), strings as JSON.stringify writes them and numbers in
 * ECMAScript form, which is what RFC 8785 prescribes. Undefined when the value holds anything else
 * (a lone surrogate, a number JSON lacks, an object not plain), for the library to write or refuse: this
 * runs for every event audit:verify hashes, where the library's checks cost more than the hash.
 */
function plainCanonicalJson(value: unknown): string | undefined {
  if (typeof value === 'string') return canonicalString(value);
  if (typeof value === 'number') return Number.isFinite(value) ? JSON.stringify(value) : undefined;
  if (typeof value === 'boolean' || value === null) return String(value);
  if (typeof value !== 'object') return undefined;
  let text: string;
  if (Array.isArray(value)) {
    text = '[';
    for (let index = 0; index < value.length; index++) {
      const item = plainCanonicalJson(value[index]);
      if (item === undefined) return undefined;
      text += index === 0 ? item : `,${item}`;
    }
    return `${text}]`;
  }
  if (Object.getPrototypeOf(value) !== Object.prototype) return undefined;
  const object = value as Record<string, unknown>;
  const keys = Object.keys(object).sort();
  text = '{';
  for (let index = 0; index < keys.length; index++) {
    const key = canonicalString(keys[index]);
    const member = plainCanonicalJson(object[keys[index]!]);
    if (member === undefined || key === undefined) return undefined;
    text += `${index === 0 ? '' : ','}${key}:${member}`;
  }
  return `${text}}`;
}

/** RFC 8785 (JCS) canonical JSON of a JSON value. */
export function canonicalJson(value: unknown): string {
  const text = plainCanonicalJson(value) ?? canonicalize(value);
  if (text === undefined) throw new TypeError('only JSON values have a canonical form');
  return text;
}

/** SHA-256 in one call: no Hash object per event. */
export const sha256Hex = (bytes: string | Uint8Array) => digest('sha256', bytes);

/** The service's metadata fields the hash covers; an event of the service's own always has them (src/domain/upcast.ts). */
function coveredMetadata(metadata: unknown): { schema_version: number; occurred_at: string; actor: string } {
  const { schema_version, occurred_at, actor } = metadata as Record<string, unknown>;
  return { schema_version: schema_version as number, occurred_at: occurred_at as string, actor: actor as string };
}

type HashedFields = ReturnType<typeof coveredMetadata> & {
  stream: string;
  version: number;
  type: string;
  data_hash: string;
  previous_hash: string;
};

/**
 * The canonical JSON of the fields an event's hash covers. Written out when they are the strings
 * and whole numbers an event of the service has: the keys in RFC 8785's order (they are ASCII),
 * strings as JSON.stringify writes them and whole numbers as their digits, which is what RFC 8785
 * prescribes (§3.2.2), without walking an object for every event audit:verify hashes. Anything
 * else (a tampered event's metadata) goes through the library.
 */
function canonicalHashedFields(fields: HashedFields): string {
  const { schema_version, version } = fields;
  const actor = canonicalString(fields.actor);
  // A digest hashEvent has just made: 64 hex digits, which RFC 8785 writes as they are.
  const dataHash = `"${fields.data_hash}"`;
  const occurredAt = canonicalString(fields.occurred_at);
  const previousHash = canonicalString(fields.previous_hash);
  const stream = canonicalString(fields.stream);
  const type = canonicalString(fields.type);
  const strings = actor && dataHash && occurredAt && previousHash && stream && type;
  if (strings === undefined || !Number.isSafeInteger(schema_version) || !Number.isSafeInteger(version)) return canonicalJson(fields);
  return (
    `{"actor":${actor},"data_hash":${dataHash},"occurred_at":${occurredAt},"previous_hash":${previousHash},` +
    `"schema_version":${schema_version},"stream":${stream},"type":${type},"version":${version}}`
  );
}

/** The hashes of `event` after an event whose hash is `previousHash`. */
export function hashEvent(event: StoredForm, previousHash: string): EventHashes {
  const data_hash = sha256Hex(canonicalJson(event.data));
  const hash = sha256Hex(
    canonicalHashedFields({
      stream: event.streamName,
      version: Number(event.version),
      type: event.type,
      ...coveredMetadata(event.metadata),
      data_hash,
      previous_hash: previousHash,
    }),
  );
  return { data_hash, previous_hash: previousHash, hash };
}

const hexHash = /^[0-9a-f]{64}$/;

/** The hashes an event was stored with (its metadata), if it was written since they exist. */
export function storedHashes(metadata: unknown): EventHashes | undefined {
  const { data_hash, previous_hash, hash } = (metadata ?? {}) as Record<string, unknown>;
  const all = [data_hash, previous_hash, hash];
  if (!all.every((value) => typeof value === 'string' && hexHash.test(value))) return undefined;
  return { data_hash, previous_hash, hash } as EventHashes;
}

/** Whether the hash chain covers the event: every event with the service's metadata, not another program's. */
export const isChained: (event: StoredEvent) => boolean = isServiceEvent;

/**
 * The hashes of a stream's chained events as stored (oldest first): those it was stored with, or,
 * for an event stored before hashes existed, the ones computed as the tree does when it first reads it.
 */
export function chainHashes(events: readonly StoredForm[]): EventHashes[] {
  let head = zeroHash;
  return events.map((event) => {
    const hashes = storedHashes(event.metadata) ?? hashEvent(event, head);
    head = hashes.hash;
    return hashes;
  });
}

/** The hash of the last of a stream's chained events: the `previous_hash` of the next event appended. */
export const chainHead = (events: readonly StoredForm[]) => chainHashes(events).at(-1)?.hash ?? zeroHash;

/** The hashes of events about to be appended, one after the other, after `previousHash`. */
export function hashAppended(events: readonly StoredForm[], previousHash: string): EventHashes[] {
  let previous = previousHash;
  return events.map((event) => {
    const hashes = hashEvent(event, previous);
    previous = hashes.hash;
    return hashes;
  });
}
