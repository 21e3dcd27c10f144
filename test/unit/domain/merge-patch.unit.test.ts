import { describe, expect, it } from 'vitest';
import { mergePatch, type JsonObject } from '../../../src/domain/merge-patch.js';

describe('mergePatch (RFC 7396)', () => {
  // RFC 7396 Appendix A, the examples whose target and patch are both objects.
  const appendixA: [target: JsonObject, patch: JsonObject, result: JsonObject][] = [
    [{ a: 'b' }, { a: 'c' }, { a: 'c' }],
    [{ a: 'b' }, { b: 'c' }, { a: 'b', b: 'c' }],
    [{ a: 'b' }, { a: null }, {}],
    [{ a: 'b', b: 'c' }, { a: null }, { b: 'c' }],
    [{ a: ['b'] }, { a: 'c' }, { a: 'c' }],
    [{ a: 'c' }, { a: ['b'] }, { a: ['b'] }],
    [{ a: { b: 'c' } }, { a: { b: 'd', c: null } }, { a: { b: 'd' } }],
    [{ a: [{ b: 'c' }] }, { a: [1] }, { a: [1] }],
    [{ e: null }, { a: 1 }, { e: null, a: 1 }],
    [{}, { a: { bb: { ccc: null } } }, { a: { bb: {} } }],
  ];

  it.each(appendixA)('merges %j with %j into %j', (target, patch, result) => {
    expect(mergePatch(target, patch)).toEqual(result);
  });

  // Appendix A rows whose target or patch is not an object, one level down (mergePatch takes objects).
  it.each([
    [{ x: ['a', 'b'] }, { x: ['c', 'd'] }, { x: ['c', 'd'] }],
    [{ x: { a: 'b' } }, { x: ['c'] }, { x: ['c'] }],
    [{ x: { a: 'foo' } }, { x: 'bar' }, { x: 'bar' }],
    [{ x: [1, 2] }, { x: { a: 'b', c: null } }, { x: { a: 'b' } }],
    [{ x: 'scalar' }, { x: { a: { b: null, c: 1 } } }, { x: { a: { c: 1 } } }],
  ] as [JsonObject, JsonObject, JsonObject][])('nested: merges %j with %j into %j', (target, patch, result) => {
    expect(mergePatch(target, patch)).toEqual(result);
  });

  it('merges the example of RFC 7396 section 3', () => {
    const target = {
      title: 'Goodbye!',
      author: { givenName: 'John', familyName: 'Doe' },
      tags: ['example', 'sample'],
      content: 'This will be unchanged',
    };
    const patch = { title: 'Hello!', phoneNumber: '+01-123-456-7890', author: { familyName: null }, tags: ['example'] };
    expect(mergePatch(target, patch)).toEqual({
      title: 'Hello!',
      author: { givenName: 'John' },
      tags: ['example'],
      content: 'This will be unchanged',
      phoneNumber: '+01-123-456-7890',
    });
  });

  it('removing a key that is not there changes nothing', () => {
    expect(mergePatch({ a: 1 }, { missing: null })).toEqual({ a: 1 });
  });

  it('an empty patch gives an equal copy', () => {
    const target = { a: { b: 1 } };
    const result = mergePatch(target, {});
    expect(result).toEqual(target);
    expect(result).not.toBe(target);
  });

  it('keeps falsy values that are not null: false, 0, "" replace', () => {
    expect(mergePatch({ a: 1, b: 2, c: 3 }, { a: false, b: 0, c: '' })).toEqual({ a: false, b: 0, c: '' });
  });

  it('mutates neither the target nor the patch', () => {
    const target = { a: { b: 'c', keep: true }, list: [1] };
    const patch = { a: { b: null, d: { e: null, f: 1 } }, list: [2] };
    const targetCopy = structuredClone(target);
    const patchCopy = structuredClone(patch);
    const result = mergePatch(target, patch);
    expect(result).toEqual({ a: { keep: true, d: { f: 1 } }, list: [2] });
    expect(target).toEqual(targetCopy);
    expect(patch).toEqual(patchCopy);
    (result.a as JsonObject).keep = false;
    expect(target.a.keep).toBe(true);
  });
});
