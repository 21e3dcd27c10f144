import { createHash, generateKeyPairSync, sign } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  canonicalJson,
  verifyConsistency,
  verifyRecord,
  type AuditKeys,
  type Checkpoint,
  type ConsistencyProof,
  type RecordProof,
} from '../../../src/client/verify.js';

const sha256 = (bytes: Buffer | string) => createHash('sha256').update(bytes).digest();

/** A one-event record in a tree of one leaf, its checkpoint signed with a key of its own: what the service would answer. */
function signedRecord(): { proof: RecordProof; checkpoint: Checkpoint; keys: AuditKeys } {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const jwk = { ...publicKey.export({ format: 'jwk' }), kid: 'key-1' } as AuditKeys['keys'][number];
  const stored_data = { id: 'ws_1', organization_id: 'org_1', name: 'One', description: '', attributes: { n: 1.5 } };
  const data_hash = sha256(canonicalJson(stored_data)).toString('hex');
  const previous_hash = '0'.repeat(64);
  const event = {
    stream: 'workspace-ws_1',
    version: 1,
    type: 'WorkspaceCreated',
    schema_version: 2,
    occurred_at: '2026-11-28T00:00:00.000000Z',
    actor: 'alice',
  };
  const hash = sha256(canonicalJson({ ...event, data_hash, previous_hash })).toString('hex');
  const root_hash = sha256(Buffer.concat([Buffer.of(0), Buffer.from(hash, 'hex')])).toString('hex');
  const signed = { organization_id: 'org_1', size: 1, root_hash, timestamp: '2026-11-28T00:00:01.000000Z' };
  const checkpoint: Checkpoint = {
    ...signed,
    key_id: 'key-1',
    signature: sign(null, Buffer.from(canonicalJson(signed)), privateKey).toString('base64url'),
  };
  const proof = {
    checkpoint,
    events: [{ ...event, stored_data, data_hash, previous_hash, hash, leaf_index: 0, inclusion_path: [] }],
    missing_events: [],
  } as RecordProof;
  return { proof, checkpoint, keys: { keys: [jwk] } };
}

/** A copy of `value` with the member at `path` set to `to` (deleted when `to` is undefined). */
function withMember<T>(value: T, path: (string | number)[], to: unknown): T {
  const copy = structuredClone(value) as Record<string | number, unknown>;
  let at = copy;
  for (const step of path.slice(0, -1)) at = at[step] as Record<string | number, unknown>;
  const last = path[path.length - 1]!;
  if (to === undefined) delete at[last];
  else at[last] = to;
  return copy as T;
}

describe("the client's verifiers, given what the service would not answer", () => {
  it('verifies the record as the service answers it', async () => {
    const { proof, checkpoint, keys } = signedRecord();
    expect(await verifyRecord(proof, checkpoint, keys, 'ws_1')).toEqual({ valid: true, problems: [] });
  });

  it.each<[string, (string | number)[], unknown]>([
    ['no events list', ['events'], null],
    ['an event that is not an object', ['events', 0], 'event'],
    ['an inclusion path that is not a list', ['events', 0, 'inclusion_path'], null],
    ['an inclusion path entry of upper-case hex', ['events', 0, 'inclusion_path'], ['AB'.repeat(32)]],
    ['an inclusion path entry with a letter past f', ['events', 0, 'inclusion_path'], [`${'0'.repeat(62)}0g`]],
    ['an inclusion path entry one digit too long', ['events', 0, 'inclusion_path'], [`${'0'.repeat(64)}z`]],
    ['a leaf index that is a fraction', ['events', 0, 'leaf_index'], 0.25],
    ['a leaf index that is a string', ['events', 0, 'leaf_index'], '0'],
    ['stored data holding NaN', ['events', 0, 'stored_data', 'attributes', 'n'], Number.NaN],
    ['missing events that are not a list', ['missing_events'], 5],
    [
      'a missing event whose inclusion path is a number',
      ['missing_events'],
      [{ version: 2, hash: '0'.repeat(64), leaf_index: 1, inclusion_path: 5 }],
    ],
    ["the proof's checkpoint without a size", ['checkpoint', 'size'], undefined],
  ])('refuses a proof with %s as malformed, without throwing', async (_case, path, to) => {
    const { proof, checkpoint, keys } = signedRecord();
    const verdict = await verifyRecord(withMember(proof, path, to), checkpoint, keys, 'ws_1');
    expect(verdict.valid).toBe(false);
    expect(verdict.problems).toEqual([{ message: expect.stringMatching(/^malformed input: /) }]);
  });

  it('refuses a checkpoint whose signature is written otherwise than the service writes it, though its bytes verify', async () => {
    const { proof, checkpoint, keys } = signedRecord();
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    // 64 bytes: 86 characters, the last carrying four spare bits.
    const last = checkpoint.signature.at(-1)!;
    const spareBitSet = alphabet[alphabet.indexOf(last) ^ 1]!;
    for (const signature of [
      `${checkpoint.signature.slice(0, -1)}${spareBitSet}`,
      `${checkpoint.signature}==`,
      `${checkpoint.signature.slice(0, 20)} ${checkpoint.signature.slice(20)}`,
      checkpoint.signature.replace(/-/g, '+').replace(/_/g, '/'),
    ]) {
      if (signature === checkpoint.signature) continue;
      const altered = { ...checkpoint, signature };
      const verdict = await verifyRecord({ ...proof, checkpoint: altered }, altered, keys, 'ws_1');
      expect(verdict.valid, signature).toBe(false);
      const consistency = await verifyConsistency(altered, altered, { from: altered, to: altered, path: [] }, keys);
      expect(consistency.valid, signature).toBe(false);
    }
  });

  it("refuses a proof whose own checkpoint is not the signed one: another timestamp, key or signature than the auditor's", async () => {
    const { proof, checkpoint, keys } = signedRecord();
    for (const [member, value] of [
      ['timestamp', '2026-11-28T00:00:02.000000Z'],
      ['key_id', 'key-2'],
      ['signature', `${checkpoint.signature.startsWith('A') ? 'B' : 'A'}${checkpoint.signature.slice(1)}`],
    ] as const) {
      const forged = { ...checkpoint, [member]: value };
      expect((await verifyRecord({ ...proof, checkpoint: forged }, checkpoint, keys, 'ws_1')).valid, member).toBe(false);
      const consistency = await verifyConsistency(checkpoint, checkpoint, { from: checkpoint, to: forged, path: [] }, keys);
      expect(consistency.valid, member).toBe(false);
      const fromForged = await verifyConsistency(checkpoint, checkpoint, { from: forged, to: checkpoint, path: [] }, keys);
      expect(fromForged.valid, member).toBe(false);
    }
  });

  it('refuses as malformed a checkpoint, keys or record id that are not what the service answers, without throwing', async () => {
    const { proof, checkpoint, keys } = signedRecord();
    const cases: [unknown, unknown, unknown, unknown][] = [
      [null, checkpoint, keys, 'ws_1'],
      [proof, null, keys, 'ws_1'],
      [proof, { ...checkpoint, root_hash: checkpoint.root_hash.toUpperCase() }, keys, 'ws_1'],
      [proof, checkpoint, {}, 'ws_1'],
      [proof, checkpoint, null, 'ws_1'],
      [proof, checkpoint, { keys: [null] }, 'ws_1'],
      [proof, checkpoint, keys, 7],
    ];
    for (const [givenProof, givenCheckpoint, givenKeys, recordId] of cases) {
      const verdict = await verifyRecord(
        givenProof as RecordProof,
        givenCheckpoint as Checkpoint,
        givenKeys as AuditKeys,
        recordId as string,
      );
      expect(verdict.valid).toBe(false);
      expect(verdict.problems[0]!.message).toMatch(/^malformed input: /);
    }
  });

  it('refuses malformed consistency proofs and checkpoints, without throwing', async () => {
    const { checkpoint, keys } = signedRecord();
    const proof: ConsistencyProof = { from: checkpoint, to: checkpoint, path: [] };
    expect(await verifyConsistency(checkpoint, checkpoint, proof, keys)).toEqual({ valid: true, problems: [] });
    const cases: [unknown, unknown, unknown][] = [
      [checkpoint, checkpoint, { ...proof, path: null }],
      [checkpoint, checkpoint, { ...proof, path: [`${'0'.repeat(64)}q`] }],
      [checkpoint, checkpoint, { to: checkpoint, path: [] }],
      [checkpoint, checkpoint, null],
      [null, checkpoint, proof],
      [checkpoint, { ...checkpoint, size: '1' }, proof],
    ];
    for (const [older, newer, given] of cases) {
      const verdict = await verifyConsistency(older as Checkpoint, newer as Checkpoint, given as ConsistencyProof, keys);
      expect(verdict.valid).toBe(false);
      expect(verdict.problems[0]!.message).toMatch(/^malformed input: /);
    }
  });
});
