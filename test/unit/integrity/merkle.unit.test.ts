import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { consistencyPathValid, rootFromInclusionPath } from '../../../src/client/verify.js';
import {
  appendLeaves,
  consistencyPath,
  frontier,
  inclusionPath,
  lookupIn,
  nodesRead,
  rootHash,
  type MerkleNode,
} from '../../../src/integrity/merkle.js';

/**
 * An independent reference, written from RFC 9162's text: MTH over the leaves themselves, and the
 * verification algorithms of §2.1.3.2 and §2.1.4.2 with bit operations, as the RFC states them.
 */
const sha = (...parts: Buffer[]) => createHash('sha256').update(Buffer.concat(parts)).digest();
const referenceLeaf = (data: Buffer) => sha(Buffer.from([0]), data);
function referenceRoot(leaves: Buffer[]): Buffer {
  if (leaves.length === 0) return sha();
  if (leaves.length === 1) return referenceLeaf(leaves[0]!);
  let k = 1;
  while (k * 2 < leaves.length) k *= 2;
  return sha(Buffer.from([1]), referenceRoot(leaves.slice(0, k)), referenceRoot(leaves.slice(k)));
}
function referenceVerifyInclusion(index: number, size: number, leaf: Buffer, path: Buffer[], root: Buffer): boolean {
  if (index >= size) return false;
  let fn = index;
  let sn = size - 1;
  let r = referenceLeaf(leaf);
  for (const p of path) {
    if (sn === 0) return false;
    if (fn & 1 || fn === sn) {
      r = sha(Buffer.from([1]), p, r);
      if (!(fn & 1))
        while (!(fn & 1) && fn !== 0) {
          fn >>= 1;
          sn >>= 1;
        }
    } else r = sha(Buffer.from([1]), r, p);
    fn >>= 1;
    sn >>= 1;
  }
  return sn === 0 && r.equals(root);
}
function referenceVerifyConsistency(first: number, second: number, firstHash: Buffer, secondHash: Buffer, proof: Buffer[]): boolean {
  if (first === second) return proof.length === 0 && firstHash.equals(secondHash);
  const path = (first & (first - 1)) === 0 ? [firstHash, ...proof] : proof;
  let fn = first - 1;
  let sn = second - 1;
  while (fn & 1) {
    fn >>= 1;
    sn >>= 1;
  }
  let fr = path[0]!;
  let sr = path[0]!;
  for (const c of path.slice(1)) {
    if (sn === 0) return false;
    if (fn & 1 || fn === sn) {
      fr = sha(Buffer.from([1]), c, fr);
      sr = sha(Buffer.from([1]), c, sr);
      while (!(fn & 1) && fn !== 0) {
        fn >>= 1;
        sn >>= 1;
      }
    } else sr = sha(Buffer.from([1]), sr, c);
    fn >>= 1;
    sn >>= 1;
  }
  return fr.equals(firstHash) && sr.equals(secondHash) && sn === 0;
}

/** A tree grown the way the service grows it: a few leaves at a time, each step reading only the frontier. */
function grow(leaves: string[], step = 3): MerkleNode[] {
  const nodes: MerkleNode[] = [];
  for (let size = 0; size < leaves.length; size += step) {
    const lookup = lookupIn(nodes.filter((node) => frontier(size).some((key) => key.level === node.level && key.index === node.index)));
    nodes.push(...appendLeaves(size, leaves.slice(size, size + step), lookup));
  }
  return nodes;
}

const eventHashes = (count: number) => Array.from({ length: count }, (_, i) => createHash('sha256').update(`event ${i}`).digest('hex'));

describe('the Merkle tree (RFC 9162 §2.1)', () => {
  it('gives the Certificate Transparency test vectors for trees of 1 to 8 leaves', () => {
    // certificate-transparency merkle_tree_test.cc: the leaves' data and the roots of each prefix.
    const leaves = ['', '00', '10', '2021', '3031', '40414243', '5051525354555657', '606162636465666768696a6b6c6d6e6f'];
    const roots = [
      '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
      'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125',
      'aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77',
      'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
      '4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4',
      '76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef',
      'ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c',
      '5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328',
    ];
    const lookup = lookupIn(grow(leaves, 1));
    roots.forEach((root, index) => expect(rootHash(index + 1, lookup).toString('hex')).toBe(root));
    expect(rootHash(0, lookup).toString('hex')).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
  });

  it('gives, for every tree of 1 to 70 leaves, inclusion proofs of every leaf that the reference and the client verify', async () => {
    const leaves = eventHashes(70);
    const lookup = lookupIn(grow(leaves));
    for (let size = 1; size <= leaves.length; size++) {
      const root = rootHash(size, lookup);
      expect(root.equals(referenceRoot(leaves.slice(0, size).map((leaf) => Buffer.from(leaf, 'hex'))))).toBe(true);
      for (let index = 0; index < size; index++) {
        const path = inclusionPath(index, size, lookup);
        expect(referenceVerifyInclusion(index, size, Buffer.from(leaves[index]!, 'hex'), path, root)).toBe(true);
        expect(
          await rootFromInclusionPath(
            leaves[index]!,
            index,
            size,
            path.map((hash) => hash.toString('hex')),
          ),
        ).toBe(root.toString('hex'));
      }
    }
  });

  it('gives, between every two sizes up to 40, consistency proofs that the reference and the client verify', async () => {
    const leaves = eventHashes(40);
    const lookup = lookupIn(grow(leaves, 5));
    for (let to = 1; to <= leaves.length; to++) {
      for (let from = 1; from <= to; from++) {
        const path = consistencyPath(from, to, lookup);
        const [fromRoot, toRoot] = [rootHash(from, lookup), rootHash(to, lookup)];
        expect(referenceVerifyConsistency(from, to, fromRoot, toRoot, path)).toBe(true);
        const hex = path.map((hash) => hash.toString('hex'));
        expect(await consistencyPathValid(from, fromRoot.toString('hex'), to, toRoot.toString('hex'), hex)).toBe(true);
      }
    }
  });

  it('rejects a proof for a leaf that changed, and a consistency proof after a leaf was rewritten', async () => {
    const leaves = eventHashes(9);
    const lookup = lookupIn(grow(leaves));
    const path = inclusionPath(3, 9, lookup).map((hash) => hash.toString('hex'));
    const root = rootHash(9, lookup).toString('hex');
    expect(await rootFromInclusionPath(leaves[4]!, 3, 9, path)).not.toBe(root);
    expect(await rootFromInclusionPath(leaves[3]!, 3, 8, path)).not.toBe(root);
    const rewritten = lookupIn(grow([...leaves.slice(0, 2), eventHashes(100)[99]!, ...leaves.slice(3)]));
    const fromRoot = rootHash(7, lookup).toString('hex');
    const forged = consistencyPath(7, 9, rewritten).map((hash) => hash.toString('hex'));
    expect(await consistencyPathValid(7, fromRoot, 9, rootHash(9, rewritten).toString('hex'), forged)).toBe(false);
  });

  it('reads O(log n) stored nodes for a root or a proof in a tree of a million leaves', () => {
    const size = 1_000_003;
    expect(nodesRead((lookup) => rootHash(size, lookup)).length).toBeLessThanOrEqual(20);
    expect(nodesRead((lookup) => inclusionPath(123_456, size, lookup)).length).toBeLessThanOrEqual(2 * 20);
    expect(nodesRead((lookup) => consistencyPath(777_777, size, lookup)).length).toBeLessThanOrEqual(3 * 20);
  });

  it('proves trees of the sizes the issue names (1, 2, 3, 7, 8, 9 and 1,000)', () => {
    const leaves = eventHashes(1000);
    const lookup = lookupIn(grow(leaves, 64));
    for (const size of [1, 2, 3, 7, 8, 9, 1000]) {
      const root = rootHash(size, lookup);
      for (const index of [0, Math.floor(size / 2), size - 1]) {
        expect(referenceVerifyInclusion(index, size, Buffer.from(leaves[index]!, 'hex'), inclusionPath(index, size, lookup), root)).toBe(
          true,
        );
      }
      for (const from of [1, 2, 3, 7, 8, 9].filter((from) => from <= size)) {
        expect(referenceVerifyConsistency(from, size, rootHash(from, lookup), root, consistencyPath(from, size, lookup))).toBe(true);
      }
    }
  });
});
