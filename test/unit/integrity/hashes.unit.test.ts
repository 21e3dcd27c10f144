import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';
import { describe, expect, it } from 'vitest';
import { canonicalJson as clientCanonicalJson } from '../../../src/client/verify.js';
import { canonicalJson, chainHashes, chainHead, hashAppended, hashEvent, zeroHash } from '../../../src/integrity/hashes.js';

/** RFC 8785 §3.2.2 and §3.2.3: the specification's own examples, input as JSON text and the canonical form it gives. */
const rfc8785Examples = [
  {
    input:
      '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001], ' +
      '"string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/", "literals": [null, true, false]}',
    canonical:
      '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
  },
  {
    input:
      '{"\\u20ac": "Euro Sign", "\\r": "Carriage Return", "\\ufb33": "Hebrew Letter Dalet With Dagesh", "1": "One", ' +
      '"\\ud83d\\ude00": "Emoji: Grinning Face", "\\u0080": "Control", "\\u00f6": "Latin Small Letter O With Diaeresis"}',
    canonical:
      '{"\\r":"Carriage Return","1":"One","\u0080":"Control","ö":"Latin Small Letter O With Diaeresis","€":"Euro Sign",' +
      '"😀":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}',
  },
];

/** RFC 8785 Appendix B: IEEE 754 values (as hex bits) and their canonical text. */
const rfc8785Numbers: [string, string][] = [
  ['0000000000000000', '0'],
  ['8000000000000000', '0'],
  ['0000000000000001', '5e-324'],
  ['8000000000000001', '-5e-324'],
  ['7fefffffffffffff', '1.7976931348623157e+308'],
  ['ffefffffffffffff', '-1.7976931348623157e+308'],
  ['4340000000000000', '9007199254740992'],
  ['c340000000000000', '-9007199254740992'],
  ['4430000000000000', '295147905179352830000'],
  ['44b52d02c7e14af5', '9.999999999999997e+22'],
  ['44b52d02c7e14af6', '1e+23'],
  ['44b52d02c7e14af7', '1.0000000000000001e+23'],
  ['444b1ae4d6e2ef4e', '999999999999999700000'],
  ['444b1ae4d6e2ef4f', '999999999999999900000'],
  ['444b1ae4d6e2ef50', '1e+21'],
  ['3eb0c6f7a0b5ed8c', '9.999999999999997e-7'],
  ['3eb0c6f7a0b5ed8d', '0.000001'],
  ['41b3de4355555553', '333333333.3333332'],
  ['41b3de4355555554', '333333333.33333325'],
  ['41b3de4355555555', '333333333.3333333'],
  ['41b3de4355555556', '333333333.3333334'],
  ['41b3de4355555557', '333333333.33333343'],
  ['becbf647612f3696', '-0.0000033333333333333333'],
  ['43143ff3c1cb0959', '1424953923781206.2'],
];

const fromBits = (bits: string) => Buffer.from(bits, 'hex').readDoubleBE(0);

describe('canonical JSON (RFC 8785)', () => {
  for (const [name, canonical] of [
    ['the service (canonicalize)', canonicalJson],
    ['the typed client', clientCanonicalJson],
  ] as const) {
    it(`${name}: gives the RFC's canonical form of its examples`, () => {
      for (const example of rfc8785Examples) expect(canonical(JSON.parse(example.input))).toBe(example.canonical);
    });

    it(`${name}: writes numbers as the RFC's Appendix B does`, () => {
      for (const [bits, text] of rfc8785Numbers) expect(canonical(fromBits(bits))).toBe(text);
    });
  }
});

describe('canonical JSON written out by the service', () => {
  it('given values of every JSON kind, gives what the library gives, and refuses what it refuses', () => {
    const values: unknown[] = [
      { b: [1, 2.5, -0, 1e21, 1e-7, 'x', null, true, false], a: { '': {}, é: [], '\u0000': '"\\\n', aa: 1, B: 2 } },
      { '😀': 'surrogate pair', '\uffff': 1, '\ud7ff': 2 },
      {
        plain: 'Workspace 1',
        del: '\u007f',
        separators: '\u2028\u2029',
        control: 'a\u001fb',
        quote: 'a"b',
        backslash: 'a\\b',
        '\u001f': 'key',
      },
      [{ toJSON: 1 }, []],
      { lone: '\ud800' },
      { ['\udc00']: 'lone in a key' },
      { skipped: undefined, kept: 1 },
      [Number.NaN],
      { infinite: Number.POSITIVE_INFINITY },
      { date: new Date(0) },
      Object.create(null) as object,
    ];
    const outcome = (write: () => string | undefined) => {
      try {
        return write();
      } catch {
        return 'refused';
      }
    };
    for (const value of values) expect(outcome(() => canonicalJson(value))).toBe(outcome(() => canonicalize(value)));
    // Every object JSON.parse gives has its own keys only; a key named __proto__ is one of them.
    expect(canonicalJson(JSON.parse('{"__proto__":1,"a":2}'))).toBe('{"__proto__":1,"a":2}');
  });
});

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

const created = {
  streamName: 'workspace-ws_1',
  version: 1n,
  type: 'WorkspaceCreated',
  data: { name: 'W', id: 'ws_1', organization_id: 'org_1', description: '', attributes: { b: 1, a: [1.5, 'x'] } },
  metadata: { actor: 'alice', request_id: 'r1', occurred_at: '2026-01-01T00:00:00.000000Z', schema_version: 2 },
};
const updated = { ...created, version: 2n, type: 'WorkspaceUpdated', data: { id: 'ws_1', name: 'V' } };

describe('event hashes (contract §16)', () => {
  it('given an event, hashes its data and the listed fields, chained to the previous hash', () => {
    const hashes = hashEvent(created, zeroHash);
    const dataHash = sha256('{"attributes":{"a":[1.5,"x"],"b":1},"description":"","id":"ws_1","name":"W","organization_id":"org_1"}');
    expect(hashes.data_hash).toBe(dataHash);
    expect(hashes.previous_hash).toBe(zeroHash);
    expect(hashes.hash).toBe(
      sha256(
        `{"actor":"alice","data_hash":"${dataHash}","occurred_at":"2026-01-01T00:00:00.000000Z","previous_hash":"${zeroHash}",` +
          '"schema_version":2,"stream":"workspace-ws_1","type":"WorkspaceCreated","version":1}',
      ),
    );
  });

  it('given events appended one after the other, chains each to the one before', () => {
    const [first, second] = hashAppended([created, updated], zeroHash);
    expect(second!.previous_hash).toBe(first!.hash);
    expect(second).toEqual(hashEvent(updated, first!.hash));
  });

  it('given a stream stored before hashes existed, computes its chain; stored hashes are taken as they are', () => {
    const computed = chainHashes([created, updated]);
    expect(computed).toEqual(hashAppended([created, updated], zeroHash));
    expect(chainHead([created, updated])).toBe(computed[1]!.hash);
    const storedWith = { ...created, metadata: { ...created.metadata, ...computed[0]!, hash: 'f'.repeat(64) } };
    expect(chainHashes([storedWith, updated])[1]!.previous_hash).toBe('f'.repeat(64));
    expect(chainHead([])).toBe(zeroHash);
  });

  it('given covered fields of any kind, hashes their RFC 8785 form, whether written out or through the library', () => {
    const odd = [
      { streamName: 'workspace-"quoted"\\', type: 'Wörk\u0000space', metadata: { ...created.metadata, actor: '€\n😀' } },
      { type: 'lone \ud800 surrogate' },
      { metadata: { ...created.metadata, schema_version: 2.5 } },
      { metadata: { ...created.metadata, schema_version: '2', actor: { name: 'mallory' } } },
      { metadata: { ...created.metadata, occurred_at: null } },
      { version: 2n ** 60n },
    ];
    for (const changes of odd) {
      const event = { ...created, ...changes };
      const dataHash = sha256(canonicalJson(event.data));
      const { schema_version, occurred_at, actor } = event.metadata as Record<string, unknown>;
      const fields = { stream: event.streamName, version: Number(event.version), type: event.type, schema_version, occurred_at, actor };
      const outcome = (hash: () => string) => {
        try {
          return hash();
        } catch (error) {
          return (error as Error).message;
        }
      };
      expect(outcome(() => hashEvent(event, zeroHash).hash)).toBe(
        outcome(() => sha256(canonicalJson({ ...fields, data_hash: dataHash, previous_hash: zeroHash }))),
      );
    }
  });

  it('given any change to a covered field, the hash changes', () => {
    const base = hashEvent(created, zeroHash).hash;
    const changes = [
      { ...created, streamName: 'workspace-ws_2' },
      { ...created, version: 2n },
      { ...created, type: 'WorkspaceUpdated' },
      { ...created, data: { ...created.data, name: 'X' } },
      { ...created, metadata: { ...created.metadata, actor: 'mallory' } },
      { ...created, metadata: { ...created.metadata, occurred_at: '2026-01-01T00:00:00.000001Z' } },
      { ...created, metadata: { ...created.metadata, schema_version: 1 } },
    ];
    for (const changed of changes) expect(hashEvent(changed, zeroHash).hash).not.toBe(base);
    expect(hashEvent(created, 'a'.repeat(64)).hash).not.toBe(base);
  });
});
