import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import {
  attributes,
  description,
  documentation,
  emptyDocumentation,
  limits,
  mergeAttributes,
  name,
  organizationId,
  solutionId,
  timestamp,
  workspaceId,
} from '../../../src/domain/values.js';
import { toServiceError } from '../../../src/api/errors.js';
import { InvalidValue } from '../../../src/domain/errors.js';
import { attributesOfSize, serializedBytes } from '../fixtures.js';

const accepts = (schema: z.ZodType, value: unknown) => schema.safeParse(value).success;

/** The messages of a rejected value, to check that it fails for the expected reason. */
function messages(schema: z.ZodType, value: unknown): string[] {
  const result = schema.safeParse(value);
  expect(result.success, 'expected the value to be rejected').toBe(false);
  return result.error!.issues.map((issue) => issue.message);
}

function paths(schema: z.ZodType, value: unknown): string[] {
  const result = schema.safeParse(value);
  expect(result.success).toBe(false);
  return result.error!.issues.map((issue) => issue.path.join('.'));
}

const emoji = '😀'; // one code point, two UTF-16 units, four UTF-8 bytes
const loneHigh = '\uD800';
const loneLow = '\uDC00';

/** `levels` nested objects: nestedObjects(1) is {}, nestedObjects(2) is {"k":{}}. */
function nestedObjects(levels: number): Record<string, unknown> {
  let value: Record<string, unknown> = {};
  for (let level = 1; level < levels; level++) value = { k: value };
  return value;
}

describe('identifiers (§4)', () => {
  it.each([
    [organizationId, 'org_'],
    [workspaceId, 'ws_'],
    [solutionId, 'sol_'],
  ] as const)('%#: accepts the prefix %s with 1 to 64 of [A-Za-z0-9_-]', (schema, prefix) => {
    expect(accepts(schema, `${prefix}a`)).toBe(true);
    expect(accepts(schema, `${prefix}${'a'.repeat(64)}`)).toBe(true);
    expect(accepts(schema, `${prefix}V1StGXR8_Z5jdHi6B-myT`)).toBe(true); // a nanoid
    expect(accepts(schema, `${prefix}_-_`)).toBe(true);
    expect(accepts(schema, prefix)).toBe(false);
    expect(accepts(schema, `${prefix}${'a'.repeat(65)}`)).toBe(false);
    expect(accepts(schema, `${prefix}a.b`)).toBe(false);
    expect(accepts(schema, `${prefix}a b`)).toBe(false);
    expect(accepts(schema, `${prefix}é`)).toBe(false);
    expect(accepts(schema, `${prefix}a\n`)).toBe(false);
    expect(accepts(schema, ` ${prefix}a`)).toBe(false);
    expect(accepts(schema, `${prefix.toUpperCase()}a`)).toBe(false);
    expect(accepts(schema, 42)).toBe(false);
  });

  it('rejects an id with another prefix', () => {
    expect(accepts(organizationId, 'ws_abc')).toBe(false);
    expect(accepts(workspaceId, 'sol_abc')).toBe(false);
    expect(accepts(solutionId, 'org_abc')).toBe(false);
  });
});

describe('timestamp (§8)', () => {
  it('accepts the contract form and rejects others and impossible dates', () => {
    expect(timestamp.parse('2024-02-29T23:59:59.999999Z')).toBe('2024-02-29T23:59:59.999999Z');
    expect(messages(timestamp, '2024-02-30T00:00:00.000000Z')).toEqual(['must be a timestamp of the form YYYY-MM-DDTHH:MM:SS.ffffffZ']);
    expect(accepts(timestamp, '2024-05-01T10:00:00Z')).toBe(false);
    expect(accepts(timestamp, '2024-05-01T10:00:00.000000+01:00')).toBe(false);
    expect(accepts(timestamp, 1714557600000)).toBe(false);
  });
});

describe('name (§5)', () => {
  it('counts code points: 1 to 50, an emoji is one', () => {
    expect(accepts(name, 'a')).toBe(true);
    expect(accepts(name, 'a'.repeat(50))).toBe(true);
    expect(accepts(name, emoji.repeat(50))).toBe(true); // 100 UTF-16 units
    expect(accepts(name, 'é'.repeat(50))).toBe(true); // 100 UTF-8 bytes
    expect(messages(name, 'a'.repeat(51))).toContain('must be 1 to 50 characters');
    expect(messages(name, emoji.repeat(51))).toContain('must be 1 to 50 characters');
    expect(messages(name, '')).toContain('must be 1 to 50 characters');
  });

  it('counts a combining sequence as its code points (no normalisation)', () => {
    const decomposed = 'e\u0301'; // two code points
    expect(accepts(name, decomposed.repeat(25))).toBe(true);
    expect(accepts(name, `${decomposed.repeat(25)}x`)).toBe(false);
  });

  it('needs a non-whitespace character', () => {
    expect(messages(name, ' ')).toContain('must contain a non-whitespace character');
    expect(messages(name, '\u00A0\u2003')).toContain('must contain a non-whitespace character');
    expect(accepts(name, ' a ')).toBe(true);
  });

  it('takes whitespace as Unicode defines it (White_Space): a zero-width no-break space or space is not', () => {
    expect(messages(name, '\u3000\u2028\u205F')).toContain('must contain a non-whitespace character');
    expect(accepts(name, '\uFEFF')).toBe(true);
    expect(accepts(name, '\u200B')).toBe(true);
  });

  it('is stored exactly as given: no trimming', () => {
    expect(name.parse('  Lab  ')).toBe('  Lab  ');
  });

  it.each([
    ['NUL', 'a\u0000'],
    ['tab', 'a\tb'],
    ['line feed', 'a\nb'],
    ['carriage return', 'a\rb'],
    ['escape', 'a\u001Bb'],
    ['DEL', 'a\u007Fb'],
    ['NEL (C1)', 'a\u0085b'],
  ])('rejects the control character %s', (_label, value) => {
    expect(messages(name, value)).toContain('must not contain control characters');
  });

  it('accepts format characters that are not Cc (zero-width joiner in an emoji sequence)', () => {
    expect(accepts(name, '👩\u200D💻 team')).toBe(true);
  });

  it('rejects lone surrogates', () => {
    expect(messages(name, `a${loneHigh}`)).toContain('must be well-formed Unicode (no lone surrogates)');
    expect(messages(name, `${loneLow}a`)).toContain('must be well-formed Unicode (no lone surrogates)');
    expect(accepts(name, `${emoji.split('')[1]}${emoji.split('')[0]}`)).toBe(false); // a reversed pair
  });

  it('rejects non-strings', () => {
    expect(accepts(name, 5)).toBe(false);
    expect(accepts(name, null)).toBe(false);
    expect(accepts(name, undefined)).toBe(false);
  });
});

describe('description (§5)', () => {
  it('is 0 to 255 code points', () => {
    expect(accepts(description, '')).toBe(true);
    expect(accepts(description, 'a'.repeat(255))).toBe(true);
    expect(accepts(description, emoji.repeat(255))).toBe(true);
    expect(messages(description, 'a'.repeat(256))).toContain('must be at most 255 characters');
    expect(messages(description, emoji.repeat(256))).toContain('must be at most 255 characters');
  });

  it('allows whitespace only, tab, line feed and carriage return', () => {
    expect(accepts(description, '   ')).toBe(true);
    expect(description.parse('a\tb\nc\r\nd')).toBe('a\tb\nc\r\nd');
  });

  it.each([
    ['NUL', '\u0000'],
    ['bell', 'a\u0007'],
    ['vertical tab', 'a\u000Bb'],
    ['form feed', 'a\u000Cb'],
    ['escape', '\u001B[31m'],
    ['DEL', '\u007F'],
    ['C1 control', '\u009F'],
  ])('rejects the control character %s', (_label, value) => {
    expect(messages(description, value)).toContain('must not contain control characters other than tab, line feed and carriage return');
  });

  it('rejects lone surrogates', () => {
    expect(messages(description, `ok${loneHigh}`)).toContain('must be well-formed Unicode (no lone surrogates)');
  });
});

describe('attributes (§6)', () => {
  it('accepts any JSON values in an object', () => {
    const value = { s: 'x', n: 1.5, b: false, z: null, list: [1, 'two', { three: [3] }], nested: { deep: {} }, emoji };
    expect(attributes.parse(value)).toEqual(value);
    expect(accepts(attributes, {})).toBe(true);
  });

  it.each([
    ['null', null],
    ['an array', [1, 2]],
    ['a string', '{}'],
    ['a number', 3],
    ['undefined', undefined],
  ])('must be an object, not %s', (_label, value) => {
    expect(messages(attributes, value)).toContain('must be a JSON object');
  });

  it('is at most 32 levels deep', () => {
    expect(accepts(attributes, nestedObjects(32))).toBe(true);
    expect(messages(attributes, nestedObjects(33))).toContain('must be at most 32 levels deep');
  });

  it('rejects absurdly deep nesting as a validation issue, not a stack overflow', () => {
    let deep: unknown = {};
    for (let level = 0; level < 200_000; level++) deep = { k: deep };
    expect(messages(attributes, deep)).toEqual(['must be at most 32 levels deep']);
  });

  it('counts arrays as levels too', () => {
    const withArrays = (levels: number) => {
      let value: unknown = [];
      for (let level = 2; level < levels; level++) value = level % 2 ? [value] : { k: value };
      return { root: value };
    };
    expect(accepts(attributes, withArrays(32))).toBe(true);
    expect(accepts(attributes, withArrays(33))).toBe(false);
  });

  it('allows scalars inside the 32nd level', () => {
    let value: Record<string, unknown> = { leaf: 'x', n: 1 };
    for (let level = 1; level < 32; level++) value = { k: value };
    expect(accepts(attributes, value)).toBe(true);
  });

  it('is at most 64 KiB serialized, counted in UTF-8 bytes', () => {
    expect(accepts(attributes, attributesOfSize(64 * 1024))).toBe(true);
    expect(messages(attributes, attributesOfSize(64 * 1024 + 1))).toContain('must be at most 65536 bytes serialized');
    const euros = { a: '€'.repeat(21_000) }; // 21,000 code points but 63,000 bytes
    expect(accepts(attributes, euros)).toBe(true);
    const moreEuros = { a: '€'.repeat(22_000) }; // 22,000 UTF-16 units but 66,000 bytes
    expect(serializedBytes(moreEuros)).toBeGreaterThan(limits.attributesBytes);
    expect(accepts(attributes, moreEuros)).toBe(false);
  });

  it.each(['__proto__', 'constructor', 'prototype'])('rejects the key %s, nested too', (key) => {
    expect(messages(attributes, JSON.parse(`{"${key}": 1}`))).toContain(`the key "${key}" is not allowed`);
    expect(paths(attributes, JSON.parse(`{"outer": {"list": [{"${key}": {}}]}}`))).toContain(`outer.list.0.${key}`);
  });

  it('rejects an own "__proto__" key from JSON.parse, which an object literal would not create', () => {
    const parsed = JSON.parse('{"__proto__": {"polluted": true}}') as object;
    expect(Object.keys(parsed)).toEqual(['__proto__']);
    expect(paths(attributes, parsed)).toContain('__proto__');
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('accepts keys that merely contain a forbidden word', () => {
    expect(accepts(attributes, { proto: 1, constructors: 2, my_prototype: 3, __proto: 4 })).toBe(true);
  });

  it('rejects NUL in a string or a key, at any depth', () => {
    expect(messages(attributes, { a: 'x\u0000y' })).toContain('strings must not contain NUL (\\u0000)');
    expect(paths(attributes, { a: { b: ['ok', '\u0000'] } })).toContain('a.b.1');
    expect(messages(attributes, { 'k\u0000': 1 })).toContain('keys must be well-formed Unicode without NUL (\\u0000)');
    expect(accepts(attributes, { a: { 'nested\u0000key': true } })).toBe(false);
  });

  it('rejects lone surrogates in strings and keys', () => {
    expect(messages(attributes, { a: loneHigh })).toContain('strings must be well-formed Unicode');
    expect(accepts(attributes, { list: [`x${loneLow}`] })).toBe(false);
    expect(accepts(attributes, { [loneHigh]: 1 })).toBe(false);
  });

  it('accepts other control characters and emoji in strings and keys', () => {
    expect(accepts(attributes, { '\t': '\u0001\u001F', [emoji]: emoji })).toBe(true);
  });

  it('keeps the object it was given (no copy that could drop keys)', () => {
    const value = { a: 1 };
    expect(attributes.parse(value)).toBe(value);
  });
});

describe('mergeAttributes', () => {
  it('returns the merge patch result', () => {
    expect(mergeAttributes({ a: 1, b: { c: 2 } }, { a: null, b: { d: 3 } })).toEqual({ b: { c: 2, d: 3 } });
  });

  it('accepts a result of exactly 64 KiB and rejects one byte more as a validation_error', () => {
    expect(mergeAttributes({}, attributesOfSize(64 * 1024))).toEqual(attributesOfSize(64 * 1024));
    const current = attributesOfSize(40_000, 'a');
    // {"a":"…"} and {"b":"…"} merge into {"a":"…","b":"…"}: one byte less than their sum.
    const patch = attributesOfSize(64 * 1024 - 40_000 + 2, 'b');
    expect(serializedBytes({ ...current, ...patch })).toBe(64 * 1024 + 1);
    let caught: unknown;
    try {
      mergeAttributes(current, patch);
    } catch (error) {
      caught = error;
    }
    // Refused in domain terms; the API's one handler makes the contract's error of it.
    expect(caught).toBeInstanceOf(InvalidValue);
    expect(toServiceError(caught).code).toBe('validation_error');
    expect(toServiceError(caught).details).toEqual([
      { path: 'params.attributes', message: 'after merging, attributes must be at most 65536 bytes serialized' },
    ]);
  });
});

describe('documentation (§6)', () => {
  const block = (content: string) => ({ type: 'text', content });

  it('is blocks of type text', () => {
    const value = { blocks: [block('Hello'), block(''), block(`multi\nline ${emoji}`)] };
    expect(documentation.parse(value)).toEqual(value);
    expect(accepts(documentation, emptyDocumentation())).toBe(true);
    expect(emptyDocumentation()).toEqual({ blocks: [] });
  });

  it('has at most 1000 blocks', () => {
    expect(accepts(documentation, { blocks: Array.from({ length: 1000 }, () => block('x')) })).toBe(true);
    expect(messages(documentation, { blocks: Array.from({ length: 1001 }, () => block('x')) })).toContain('at most 1000 blocks');
  });

  it('is at most 512 KiB serialized', () => {
    const overhead = serializedBytes({ blocks: [block('')] });
    const exact = { blocks: [block('x'.repeat(512 * 1024 - overhead))] };
    expect(serializedBytes(exact)).toBe(512 * 1024);
    expect(accepts(documentation, exact)).toBe(true);
    const over = { blocks: [block('x'.repeat(512 * 1024 - overhead + 1))] };
    expect(messages(documentation, over)).toContain('must be at most 524288 bytes serialized');
  });

  it('rejects other block types and other block fields', () => {
    expect(messages(documentation, { blocks: [{ type: 'image', content: 'x' }] })).toContain('only the block type "text" exists');
    expect(accepts(documentation, { blocks: [{ type: 'text', content: 'x', style: 'bold' }] })).toBe(false);
    expect(accepts(documentation, { blocks: [{ type: 'text' }] })).toBe(false);
    expect(accepts(documentation, { blocks: [{ content: 'x' }] })).toBe(false);
    expect(accepts(documentation, { blocks: [{ type: 'text', content: 5 }] })).toBe(false);
  });

  it('rejects other top-level fields and a missing or wrong blocks', () => {
    expect(accepts(documentation, { blocks: [], version: 2 })).toBe(false);
    expect(accepts(documentation, {})).toBe(false);
    expect(accepts(documentation, { blocks: {} })).toBe(false);
    expect(accepts(documentation, null)).toBe(false);
    expect(accepts(documentation, [])).toBe(false);
  });

  it('rejects NUL and lone surrogates in content', () => {
    expect(messages(documentation, { blocks: [block('a\u0000')] })).toContain('must not contain NUL (\\u0000)');
    expect(messages(documentation, { blocks: [block(loneHigh)] })).toContain('must be well-formed Unicode (no lone surrogates)');
  });

  it('points the issue at the offending block', () => {
    expect(paths(documentation, { blocks: [block('ok'), { type: 'video', content: '' }] })).toContain('blocks.1.type');
  });
});
