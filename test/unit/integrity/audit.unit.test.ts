import { createHash, generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  auditTree,
  describeBreak,
  emptyLevel,
  levelSizes,
  LogAudit,
  runsWhere,
  storeNode,
  StreamOrderAudit,
  type StoredLeaf,
  type StoredLevel,
} from '../../../src/integrity/audit.js';
import { hashAppended, zeroHash } from '../../../src/integrity/hashes.js';
import type { RecordedEvent } from '../../../src/eventstore/port.js';
import { signCheckpoint, signingKeyFromPem } from '../../../src/integrity/checkpoints.js';
import { appendLeaves, lookupIn, rootHash, type MerkleNode } from '../../../src/integrity/merkle.js';

/** The stored levels of a tree of `size` leaves holding `nodes`, as readStoredLevels reads them from PostgreSQL. */
function storedLevels(size: number, nodes: Iterable<MerkleNode>): StoredLevel[] {
  const levels = levelSizes(size).map(emptyLevel);
  for (const node of nodes) storeNode(levels[node.level], node.index, node.hash);
  return levels;
}

/** Leaves' event hashes as readLeafHashes places them: by index, none where `undefined`. */
function leafLevel(hashes: readonly (string | undefined)[]): StoredLevel {
  const level = emptyLevel(hashes.length);
  hashes.forEach((hash, index) => hash !== undefined && storeNode(level, index, Buffer.from(hash, 'hex')));
  return level;
}

const newKey = () => signingKeyFromPem(generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' }).toString());
const leaves = Array.from({ length: 11 }, (_, i) => createHash('sha256').update(`event ${i}`).digest('hex'));
const nodes = appendLeaves(0, leaves, lookupIn([]));
const key = newKey();
const checkpointAt = (size: number, signer = key) =>
  signCheckpoint(
    {
      organization_id: 'org_a',
      size,
      root_hash: rootHash(size, lookupIn(nodes)).toString('hex'),
      timestamp: '2026-01-01T00:00:00.000000Z',
    },
    signer,
  );

describe('auditTree', () => {
  it('given a whole tree with checkpoints signed by published keys, finds nothing', () => {
    const rotated = newKey();
    const checkpoints = [checkpointAt(3), checkpointAt(8), checkpointAt(11, rotated)];
    expect(
      auditTree('org_a', leafLevel(leaves), storedLevels(leaves.length, nodes), checkpoints, [key.publicJwk, rotated.publicJwk]),
    ).toEqual([]);
  });

  it('given a changed node, a forged root, an unknown key, a bad signature and a size past the leaves, names each', () => {
    const changed = nodes.map((node) => (node.level === 1 && node.index === 2 ? { ...node, hash: Buffer.alloc(32, 7) } : node));
    const forgedRoot = { ...checkpointAt(8), root_hash: 'a'.repeat(64) };
    const unknownKey = checkpointAt(5, newKey());
    const badSignature = { ...checkpointAt(6), timestamp: '2026-01-02T00:00:00.000000Z' };
    const tooLarge = { ...checkpointAt(11), size: 12 };
    const found = auditTree(
      'org_a',
      leafLevel(leaves),
      storedLevels(leaves.length, changed),
      [forgedRoot, unknownKey, badSignature, tooLarge],
      [key.publicJwk],
    ).map(describeBreak);
    expect(found).toEqual([
      expect.stringMatching(/^organization org_a: node at level 1, index 2 is 0707.*, its leaves hash to [0-9a-f]{64}$/),
      expect.stringMatching(/^organization org_a: checkpoint of size 8: root_hash is a{64}, the leaves give [0-9a-f]{64}$/),
      expect.stringMatching(/^organization org_a: checkpoint of size 8: the signature does not verify/),
      expect.stringMatching(/^organization org_a: checkpoint of size 5: the signature does not verify with key /),
      expect.stringMatching(/^organization org_a: checkpoint of size 6: the signature does not verify/),
      'organization org_a: checkpoint of size 12: the tree holds only 11 leaves',
    ]);
  });

  it('given a node missing, one of another length and one outside the tree, names the first two and ignores the third', () => {
    const kept = nodes.filter((node) => !(node.level === 0 && node.index === 4));
    const odd = kept.map((node) => (node.level === 2 && node.index === 1 ? { ...node, hash: Buffer.alloc(31, 9) } : node));
    const outside = [...odd, { level: 0, index: 11, hash: Buffer.alloc(32) }, { level: 9, index: 0, hash: Buffer.alloc(32) }];
    expect(auditTree('org_a', leafLevel(leaves), storedLevels(leaves.length, outside), [], []).map(describeBreak)).toEqual([
      'organization org_a: the tree has no node at level 0, index 4',
      expect.stringMatching(/^organization org_a: node at level 2, index 1 is (09){31}, its leaves hash to [0-9a-f]{64}$/),
    ]);
  });

  it('given leaves past the nodes stored and a leaf missing, names each run of missing nodes once, and counts the missing leaf as its stored node', () => {
    const longer = [...leaves.slice(0, 4), undefined, ...leaves.slice(5), ...leaves];
    const found = auditTree('org_a', leafLevel(longer), storedLevels(longer.length, nodes), [], []).map(describeBreak);
    expect(found).toEqual([
      'organization org_a: the tree has no nodes at level 0, indexes 11 to 21',
      'organization org_a: the tree has no nodes at level 1, indexes 5 to 10',
      'organization org_a: the tree has no nodes at level 2, indexes 2 to 4',
      'organization org_a: the tree has no node at level 3, index 1',
      'organization org_a: the tree has no node at level 4, index 0',
    ]);
  });
});

describe('auditTree with a leaf not a hash', () => {
  it('given a leaf whose stored hash is not 64 hex digits, when the tree is checked, then its node and the nodes above it are breaks', () => {
    const odd = leafLevel(leaves);
    storeNode(odd, 2, Buffer.from('abcd', 'hex'));
    const found = auditTree('org_a', odd, storedLevels(leaves.length, nodes), [], []).map(describeBreak);
    expect(found).toEqual([
      expect.stringMatching(/^organization org_a: node at level 0, index 2 is [0-9a-f]{64}, its leaves hash to [0-9a-f]{64}$/),
      expect.stringMatching(/^organization org_a: node at level 1, index 1 is /),
      expect.stringMatching(/^organization org_a: node at level 2, index 0 is /),
      expect.stringMatching(/^organization org_a: node at level 3, index 0 is /),
    ]);
  });
});

describe('runsWhere', () => {
  it('given indexes that hold alone, in runs and at both ends, then gives each run once as its first and last', () => {
    const holding = new Set([0, 1, 2, 5, 7, 8, 9]);
    expect(runsWhere(10, (index) => holding.has(index))).toEqual([
      [0, 2],
      [5, 5],
      [7, 9],
    ]);
    expect(runsWhere(3, () => false)).toEqual([]);
  });
});

describe('an event of the service made to look like another program’s', () => {
  const streamName = 'workspace-ws_disowned';
  const metadata = (occurred_at: string) => ({ actor: 'alice', request_id: 'r1', occurred_at, schema_version: 2 });
  const stored = [
    { type: 'WorkspaceCreated', data: { id: 'ws_disowned', organization_id: 'org_a', name: 'A', description: '', attributes: {} } },
    { type: 'WorkspaceDeleted', data: { id: 'ws_disowned' } },
  ].map((event, index) => ({ ...event, streamName, version: BigInt(index + 1), metadata: metadata(`2026-11-0${index + 1}T00:00:00Z`) }));
  const hashes = hashAppended(stored, zeroHash);
  const leaves: StoredLeaf[] = hashes.map(({ hash }, index) => ({
    organizationId: 'org_a',
    leafIndex: index,
    streamName,
    version: BigInt(index + 1),
    hash,
  }));
  const end = { commit: 10n, prepare: 10n };
  const logged = (request_id: boolean): RecordedEvent[] =>
    stored.map((event, index) => {
      const { request_id: _dropped, ...rest } = event.metadata;
      const kept = index === 1 && !request_id ? rest : event.metadata;
      return {
        ...event,
        id: `e${index}`,
        metadata: { ...kept, ...hashes[index] },
        position: { commit: BigInt(index + 1), prepare: BigInt(index + 1) },
      };
    });

  it('given the leaf the tree holds for it, when its metadata no longer marks it as the service’s, then both audits name it and count its leaf as met', () => {
    const inOrder = new LogAudit(leaves, end);
    const byStream = new StreamOrderAudit(end);
    for (const [index, event] of logged(true).entries()) {
      expect(inOrder.check(event)).toEqual([]);
      expect(byStream.check(event, leaves[index])).toEqual([]);
    }
    const disowned = logged(false);
    const again = new LogAudit(leaves, end);
    const againByStream = new StreamOrderAudit(end);
    const breaks = disowned.flatMap((event, index) => [...again.check(event), ...againByStream.check(event, leaves[index])]);
    expect(breaks).toHaveLength(2);
    for (const found of breaks) {
      expect(found).toMatchObject({ organizationId: 'org_a', streamName, version: 2n });
      expect(found.message).toMatch(/^leaf 1 of the tree holds this event, but its metadata no longer marks it as the service's own/);
    }
    expect(again.unmatchedLeaves()).toEqual([]);
    expect(againByStream.matched).toBe(2);
  });
});
