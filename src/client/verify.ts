import type { ResultOf } from '../api/schemas.js';

/**
 * Verification anyone can run (contract §16): from the service's answers alone (a proof, the
 * checkpoints and the JWKS of `/audit-keys`), with WebCrypto, nothing of the server. It recomputes
 * each event's hashes from its stored form, follows the stream's hash chain, climbs the RFC 9162
 * inclusion path to the checkpoint's root, and checks the checkpoint's Ed25519 signature.
 */

export type Checkpoint = ResultOf<'get_checkpoint'>;
export type RecordProof = ResultOf<'get_workspace_proof'> | ResultOf<'get_solution_proof'>;
export type ConsistencyProof = ResultOf<'get_consistency_proof'>;
/** The JWKS `GET /audit-keys` answers. */
export type AuditKeys = { keys: { kty: string; crv?: string; x?: string; kid?: string }[] };

/** What the verification found: `valid` when nothing is wrong; else each problem, with the event's version where it is one event's. */
export type Verification = { valid: boolean; problems: { version?: number; message: string }[] };

const zeroHash = '0'.repeat(64);

/** RFC 8785 canonical JSON of a JSON value (as JSON.parse gives them): keys sorted by UTF-16 code units, ECMAScript number form. */
export function canonicalJson(value: unknown): string {
  if (typeof value === 'number' && !Number.isFinite(value)) throw new TypeError('JSON has no such number');
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const object = value as Record<string, unknown>;
  const members = Object.keys(object)
    .filter((key) => object[key] !== undefined)
    .sort()
    .map((key) => `${JSON.stringify(key)}:${canonicalJson(object[key])}`);
  return `{${members.join(',')}}`;
}

const hex = (bytes: ArrayBuffer | Uint8Array) => Array.from(new Uint8Array(bytes), (byte) => byte.toString(16).padStart(2, '0')).join('');
const fromHex = (text: string) => Uint8Array.from(text.match(/../g) ?? [], (pair) => parseInt(pair, 16));

/**
 * The bytes `text` stands for in base64 (RFC 4648 §4, padded) or base64url (§5, unpadded), only
 * when `text` is exactly how base64 writes those bytes: `atob` also takes whitespace, a missing or
 * added `=` and stray low bits in the last character, so that one value has many spellings, and a
 * signature altered in any of them would still verify.
 */
export function exactBase64Bytes(text: string, alphabet: 'base64' | 'base64url'): Uint8Array | undefined {
  const written = alphabet === 'base64' ? /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/ : /^[A-Za-z0-9_-]*$/;
  if (!written.test(text)) return undefined;
  let binary: string;
  try {
    binary = atob(alphabet === 'base64' ? text : text.replace(/-/g, '+').replace(/_/g, '/'));
  } catch {
    // A length base64 cannot have (one character past a group of four): not base64.
    return undefined;
  }
  const again = btoa(binary);
  if ((alphabet === 'base64' ? again : again.replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')) !== text) return undefined;
  return Uint8Array.from(binary, (char) => char.charCodeAt(0));
}

const sha256 = async (bytes: Uint8Array) => new Uint8Array(await crypto.subtle.digest('SHA-256', bytes));
const sha256Text = async (text: string) => hex(await sha256(new TextEncoder().encode(text)));

const concat = (...parts: Uint8Array[]) => {
  const joined = new Uint8Array(parts.reduce((length, part) => length + part.length, 0));
  let at = 0;
  for (const part of parts) {
    joined.set(part, at);
    at += part.length;
  }
  return joined;
};
const leafHash = (eventHash: string) => sha256(concat(Uint8Array.of(0), fromHex(eventHash)));
const nodeHash = (left: Uint8Array, right: Uint8Array) => sha256(concat(Uint8Array.of(1), left, right));

const isHash = (value: unknown): value is string => typeof value === 'string' && /^[0-9a-f]{64}$/.test(value);
const isCount = (value: unknown): value is number => typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);
const isPath = (value: unknown): value is string[] => Array.isArray(value) && value.every(isHash);
const isJson = (value: unknown) => {
  try {
    canonicalJson(value);
    return true;
  } catch {
    // canonicalJson refuses only what JSON cannot hold (NaN, Infinity): such data is not a stored event's.
    return false;
  }
};

/**
 * The verifiers take what a caller hands them, which may be anything: each input is checked
 * against the shape the service answers with before anything is computed from it, so that a
 * malformed one is reported as a problem rather than thrown, or read leniently (a hash must be
 * exactly 64 lower-case hex digits, as the service writes them).
 */
type Rule = readonly [test: (value: unknown) => boolean, what: string];
const text: Rule = [(value) => typeof value === 'string', 'a string'];
const hash: Rule = [isHash, '64 lower-case hex digits'];
const count: Rule = [isCount, 'a whole number ≥ 0'];
const path: Rule = [isPath, 'a list of hashes of 64 lower-case hex digits'];
const jsonObject: Rule = [(value) => isObject(value) && isJson(value), 'a JSON object'];
type Shape = Record<string, Rule>;
const signature: Rule = [
  (value) => typeof value === 'string' && exactBase64Bytes(value, 'base64url')?.length === 64,
  'an Ed25519 signature in base64url, 86 characters',
];
const checkpointShape: Shape = { organization_id: text, size: count, root_hash: hash, timestamp: text, key_id: text, signature };
const eventShape: Shape = {
  version: count,
  type: text,
  occurred_at: text,
  actor: text,
  stream: text,
  schema_version: count,
  stored_data: jsonObject,
  data_hash: hash,
  previous_hash: hash,
  hash,
  leaf_index: count,
  inclusion_path: path,
};
const missingEventShape: Shape = { version: count, hash, leaf_index: count, inclusion_path: path };

function flawsOf(value: unknown, shape: Shape, name: string): string[] {
  if (!isObject(value)) return [`${name} is not an object`];
  return Object.entries(shape)
    .filter(([field, [test]]) => !test(value[field]))
    .map(([field, [, what]]) => `${name}: ${field} is not ${what}`);
}

function listFlaws(value: unknown, shape: Shape, name: string): string[] {
  if (!Array.isArray(value)) return [`${name} are not a list`];
  return value.flatMap((item, index) => flawsOf(item, shape, `${name.replace(/s$/, '')} ${index}`));
}

const keysFlaws = (keys: unknown) =>
  isObject(keys) && Array.isArray(keys.keys) && keys.keys.every(isObject) ? [] : ['the keys are not a JWKS ({"keys": [...]})'];

/** The answer for inputs that are not what the service gives: nothing was verified. */
const malformed = (flaws: string[]): Verification | undefined =>
  flaws.length === 0 ? undefined : { valid: false, problems: flaws.map((flaw) => ({ message: `malformed input: ${flaw}` })) };

const isOdd = (n: number) => n % 2 === 1;
const half = (n: number) => Math.floor(n / 2);

/** RFC 9162 §2.1.3.2: the root the inclusion path leads to from leaf `index` of a tree of `size`, or undefined when the path cannot fit. */
export async function rootFromInclusionPath(
  eventHash: string,
  index: number,
  size: number,
  path: readonly string[],
): Promise<string | undefined> {
  if (!isCount(index) || !isCount(size) || index >= size || !isHash(eventHash) || !isPath(path)) return undefined;
  let fn = index;
  let sn = size - 1;
  let r = await leafHash(eventHash);
  for (const sibling of path.map(fromHex)) {
    if (sn === 0) return undefined;
    if (isOdd(fn) || fn === sn) {
      r = await nodeHash(sibling, r);
      while (!isOdd(fn) && fn !== 0) [fn, sn] = [half(fn), half(sn)];
    } else r = await nodeHash(r, sibling);
    [fn, sn] = [half(fn), half(sn)];
  }
  return sn === 0 ? hex(r) : undefined;
}

/** RFC 9162 §2.1.4.2: whether `path` proves the tree of `fromSize` with root `fromRoot` a prefix of the tree of `toSize` with root `toRoot`. */
export async function consistencyPathValid(
  fromSize: number,
  fromRoot: string,
  toSize: number,
  toRoot: string,
  path: readonly string[],
): Promise<boolean> {
  if (!isCount(fromSize) || !isCount(toSize) || fromSize === 0 || fromSize > toSize) return false;
  if (!isHash(fromRoot) || !isHash(toRoot) || !isPath(path)) return false;
  if (fromSize === toSize) return path.length === 0 && fromRoot === toRoot;
  // A tree whose size is a power of two is a node of the larger one: the path leaves out its root, known already.
  const nodes = Number.isInteger(Math.log2(fromSize)) ? [fromRoot, ...path] : [...path];
  if (nodes.length === 0) return false;
  let fn = fromSize - 1;
  let sn = toSize - 1;
  while (isOdd(fn)) [fn, sn] = [half(fn), half(sn)];
  let fr = fromHex(nodes[0]!);
  let sr = fr;
  for (const c of nodes.slice(1).map(fromHex)) {
    if (sn === 0) return false;
    if (isOdd(fn) || fn === sn) {
      fr = await nodeHash(c, fr);
      sr = await nodeHash(c, sr);
      while (!isOdd(fn) && fn !== 0) [fn, sn] = [half(fn), half(sn)];
    } else sr = await nodeHash(sr, c);
    [fn, sn] = [half(fn), half(sn)];
  }
  return hex(fr) === fromRoot && hex(sr) === toRoot && sn === 0;
}

/** Whether the checkpoint carries a valid Ed25519 signature by its key in `keys`. */
export async function checkpointSignatureValid(checkpoint: Checkpoint, keys: AuditKeys): Promise<boolean> {
  if (keysFlaws(keys).length > 0 || flawsOf(checkpoint, checkpointShape, 'checkpoint').length > 0) return false;
  const jwk = keys.keys.find((key) => key.kid === checkpoint.key_id);
  if (!jwk || jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519' || !jwk.x) return false;
  const { organization_id, size, root_hash, timestamp } = checkpoint;
  try {
    const key = await crypto.subtle.importKey('jwk', { kty: 'OKP', crv: 'Ed25519', x: jwk.x }, { name: 'Ed25519' }, false, ['verify']);
    const signed = new TextEncoder().encode(canonicalJson({ organization_id, size, root_hash, timestamp }));
    return await crypto.subtle.verify({ name: 'Ed25519' }, key, exactBase64Bytes(checkpoint.signature, 'base64url')!, signed);
  } catch {
    // A malformed key or signature verifies nothing: the answer is that it is not valid.
    return false;
  }
}

const sameTree = (a: Checkpoint, b: Checkpoint) =>
  a.organization_id === b.organization_id && a.size === b.size && a.root_hash === b.root_hash;

/**
 * Whether a checkpoint in a proof is one the service signed: the one the auditor holds (verified
 * on its own), or else carrying a signature of its own that verifies. A caller may keep what a
 * verified proof holds; nothing in it may be unsigned.
 */
const signedAsWell = async (inProof: Checkpoint, held: Checkpoint, keys: AuditKeys) =>
  (inProof.timestamp === held.timestamp && inProof.key_id === held.key_id && inProof.signature === held.signature) ||
  (await checkpointSignatureValid(inProof, keys));

/** The stream a record's events are in, by its id's prefix (contract §4); undefined for an id of neither kind. */
function streamOf(recordId: string): string | undefined {
  if (recordId.startsWith('ws_')) return `workspace-${recordId}`;
  if (recordId.startsWith('sol_')) return `solution-${recordId}`;
  return undefined;
}

/**
 * Verifies a record's proof (`get_workspace_proof` / `get_solution_proof`) against a checkpoint
 * the auditor holds and the service's keys: every event's hashes recomputed from its stored form,
 * the stream's chain unbroken from its first event, each event in the checkpoint's tree, and the
 * checkpoint signed. Ask for the proof with the checkpoint's `size`, and give the record's id: a
 * proof of another record is refused then. What it cannot show is that the service left out none
 * of the record's newest events: compare their number with the history you have seen.
 */
export async function verifyRecord(
  proof: RecordProof,
  checkpoint: Checkpoint,
  keys: AuditKeys,
  /** The record the proof was asked for: its events must be that record's stream's (a proof of another record is refused). */
  recordId?: string,
): Promise<Verification> {
  const refused = malformed([
    ...flawsOf(checkpoint, checkpointShape, 'the checkpoint'),
    ...keysFlaws(keys),
    ...(isObject(proof)
      ? [
          ...flawsOf(proof.checkpoint, checkpointShape, "the proof's checkpoint"),
          ...listFlaws(proof.events, eventShape, "the proof's events"),
          ...(proof.missing_events === undefined ? [] : listFlaws(proof.missing_events, missingEventShape, "the proof's missing_events")),
        ]
      : ['the proof is not an object']),
    ...(recordId === undefined || typeof recordId === 'string' ? [] : ['the record id is not a string']),
  ]);
  if (refused) return refused;
  const problems: Verification['problems'] = [];
  if (!(await checkpointSignatureValid(checkpoint, keys)))
    problems.push({ message: `checkpoint of size ${checkpoint.size}: the signature does not verify` });
  if (!sameTree(proof.checkpoint, checkpoint)) {
    problems.push({
      message: `the proof is for the tree of size ${proof.checkpoint.size} (${proof.checkpoint.root_hash}), not the checkpoint's`,
    });
  } else if (!(await signedAsWell(proof.checkpoint, checkpoint, keys))) {
    problems.push({ message: "the proof's checkpoint is not the one given, and its own signature does not verify" });
  }
  if (proof.events.length === 0) {
    problems.push({
      message:
        "the proof holds no event: the checkpoint covers none of the record's events (a record newer than it is in the next checkpoint)",
    });
  }
  const stream = recordId === undefined ? proof.events[0]?.stream : streamOf(recordId);
  if (recordId !== undefined && stream === undefined) problems.push({ message: `${recordId} is not a workspace or solution id` });
  let previous = zeroHash;
  let previousVersion = 0;
  for (const [index, event] of proof.events.entries()) {
    const at = (message: string) => problems.push({ version: event.version, message });
    // The record begins its stream; after that, versions only rise. They may skip the versions of
    // another program's events, which the chain does not cover: a missing event of the record's
    // own breaks the chain (previous_hash) instead.
    if (stream !== undefined && event.stream !== stream) at(`the event is in the stream ${event.stream}, not the record's ${stream}`);
    if (index === 0 && event.version !== 1) at("expected version 1: the record's first event is missing");
    if (index > 0 && event.version <= previousVersion) at(`expected a version after ${previousVersion}: the event is out of place`);
    previousVersion = event.version;
    const dataHash = await sha256Text(canonicalJson(event.stored_data));
    if (dataHash !== event.data_hash) at(`data_hash is ${event.data_hash}, the stored data hashes to ${dataHash}`);
    if (event.previous_hash !== previous) at(`previous_hash is ${event.previous_hash}, the previous event's hash is ${previous}`);
    const hash = await sha256Text(
      canonicalJson({
        stream: event.stream,
        version: event.version,
        type: event.type,
        schema_version: event.schema_version,
        occurred_at: event.occurred_at,
        actor: event.actor,
        data_hash: dataHash,
        previous_hash: previous,
      }),
    );
    if (hash !== event.hash) at(`hash is ${event.hash}, the event hashes to ${hash}`);
    const root = await rootFromInclusionPath(event.hash, event.leaf_index, checkpoint.size, event.inclusion_path);
    if (root !== checkpoint.root_hash)
      at(`leaf ${event.leaf_index} is not in the checkpoint's tree: its inclusion path leads to ${root ?? 'no root'}`);
    previous = event.hash;
  }
  // An event the tree holds but the service no longer has: a deleted last event leaves the chain
  // above whole, so only its leaf shows it.
  for (const missing of proof.missing_events ?? []) {
    const root = await rootFromInclusionPath(missing.hash, missing.leaf_index, checkpoint.size, missing.inclusion_path);
    problems.push({
      version: missing.version,
      message:
        root === checkpoint.root_hash
          ? `leaf ${missing.leaf_index} of the checkpoint's tree holds this event of the record, which the service no longer has`
          : `the proof says this event is missing, but leaf ${missing.leaf_index} is not in the checkpoint's tree: its inclusion path leads to ${root ?? 'no root'}`,
    });
  }
  return { valid: problems.length === 0, problems };
}

/**
 * Verifies that the tree of `newer` extends the tree of `older`, both signed: the log was only
 * appended to between them (`get_consistency_proof` from `older.size` to `newer.size`).
 */
export async function verifyConsistency(
  older: Checkpoint,
  newer: Checkpoint,
  proof: ConsistencyProof,
  keys: AuditKeys,
): Promise<Verification> {
  const refused = malformed([
    ...flawsOf(older, checkpointShape, 'the older checkpoint'),
    ...flawsOf(newer, checkpointShape, 'the newer checkpoint'),
    ...keysFlaws(keys),
    ...(isObject(proof)
      ? [
          ...flawsOf(proof.from, checkpointShape, "the proof's from"),
          ...flawsOf(proof.to, checkpointShape, "the proof's to"),
          ...(isPath(proof.path) ? [] : [`the proof's path is not ${path[1]}`]),
        ]
      : ['the proof is not an object']),
  ]);
  if (refused) return refused;
  const problems: Verification['problems'] = [];
  for (const checkpoint of [older, newer]) {
    if (!(await checkpointSignatureValid(checkpoint, keys)))
      problems.push({ message: `checkpoint of size ${checkpoint.size}: the signature does not verify` });
  }
  if (older.organization_id !== newer.organization_id) problems.push({ message: 'the checkpoints are of different organizations' });
  if (!sameTree(proof.from, older) || !sameTree(proof.to, newer)) problems.push({ message: 'the proof is between other checkpoints' });
  else if (!(await signedAsWell(proof.from, older, keys)) || !(await signedAsWell(proof.to, newer, keys))) {
    problems.push({ message: 'a checkpoint of the proof is not the one given, and its own signature does not verify' });
  }
  if (!(await consistencyPathValid(older.size, older.root_hash, newer.size, newer.root_hash, proof.path))) {
    problems.push({ message: `the tree of size ${newer.size} does not extend the tree of size ${older.size}: the log was rewritten` });
  }
  return { valid: problems.length === 0, problems };
}
