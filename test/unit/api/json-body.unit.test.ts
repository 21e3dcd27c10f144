import { describe, expect, it } from 'vitest';
import { inexactNumbersOf, parseJsonBody } from '../../../src/api/json-body.js';
import type { ServiceError } from '../../../src/errors.js';

const inexact = { path: 'attributes.long', message: 'is a number that cannot be stored exactly as sent; send it as a string' };

describe('number literals of any length in a body', () => {
  // Nearly a whole 1 MiB body: checked in time linear in its length (a regex over the run of zeros
  // took time quadratic in it, minutes for one request, while the event loop served nothing else).
  it('given a literal of a million characters that a double cannot hold, names it', () => {
    const body = parseJsonBody(Buffer.from(`{"attributes":{"long":1.${'0'.repeat(1_000_000)}1}}`));
    expect(inexactNumbersOf(body)).toEqual([inexact]);
  });

  it('given a literal of a million characters that a double holds (trailing zeros), accepts it', () => {
    const body = parseJsonBody(Buffer.from(`{"attributes":{"long":0.${'0'.repeat(1_000_000)}}}`));
    expect(inexactNumbersOf(body)).toEqual([]);
  });
});

describe('a body of many numbers that cannot be stored under a long member name', () => {
  // 150 numbers under a name of 100,000 characters: each named by its whole path made an answer of 10 MB.
  it('names each by a path cut at 200 characters', () => {
    const found = inexactNumbersOf(
      parseJsonBody(Buffer.from(`{"params":{"${'k'.repeat(100_000)}":[${Array(150).fill('1e400').join(',')}]}}`)),
    );
    expect(found).toHaveLength(100);
    for (const { path } of found) expect(path).toBe(`params.${'k'.repeat(193)}…`);
  });
});

describe('a body of many numbers that cannot be stored, nested deep', () => {
  // 5,000 levels and 1,000 such numbers: every one named by its whole path made an answer of about
  // 10 MB, and work quadratic in the body (a 89 KB body: 120 MB and 13 s, while other callers waited).
  const deep = `{"params":{"x":${'['.repeat(5000)}${Array.from({ length: 1000 }, () => '1e400').join(',')}${']'.repeat(5000)}}}`;

  it('given it, names the first 100, each by the first 40 levels of its path', () => {
    const found = inexactNumbersOf(parseJsonBody(Buffer.from(deep)));
    expect(found).toHaveLength(100);
    expect(found[0]!.path).toBe(`params.x.${Array.from({ length: 38 }, () => '0').join('.')}.…`);
    expect(found[99]!.path.split('.')).toHaveLength(41);
  });
});

describe('a member named twice in one object (RFC 7493 §2.3: a receiver cannot know which one the sender meant)', () => {
  const refusal = (text: string) => {
    try {
      parseJsonBody(Buffer.from(text));
    } catch (error) {
      return { code: (error as ServiceError).code, message: (error as ServiceError).message };
    }
    return undefined;
  };

  it('given "query" twice, refuses the body as a bad request naming the member', () => {
    expect(refusal('{"query":"delete_workspace","query":"get_workspace","params":{"id":"ws_1"}}')).toEqual({
      code: 'bad_request',
      message: 'the body names the member "query" twice at its top level: each member may appear once',
    });
  });

  it('given a name written once plainly and once escaped, names the object that holds them', () => {
    expect(refusal('{"query":"q","params":{"attributes":{"list":[{"a":1},{"a":1,"\\u0061":2}]}}}')).toEqual({
      code: 'bad_request',
      message: 'the body names the member "a" twice in params.attributes.list.1: each member may appear once',
    });
  });

  it('given the same name in sibling and nested objects, and strings holding quotes and braces, accepts the body', () => {
    const text = '{"a":{"a":{"a":1}},"b":[{"a":"\\"a\\":{","b":"\\\\"},{"a":2}],"c":"}"}';
    expect(refusal(text)).toBeUndefined();
    expect(parseJsonBody(Buffer.from(text))).toEqual(JSON.parse(text));
  });

  it('given the object holding them a member named "" or a million characters long, names where it is, cut short', () => {
    expect(refusal('{"":{"a":1,"a":2}}')?.message).toBe('the body names the member "a" twice in "": each member may appear once');
    expect(refusal(`{"${'k'.repeat(1_000_000)}":{"a":1,"a":2}}`)?.message).toBe(
      `the body names the member "a" twice in ${'k'.repeat(200)}…: each member may appear once`,
    );
  });

  it('given a name of a million characters twice, names it cut short', () => {
    const name = 'n'.repeat(1_000_000);
    expect(refusal(`{"${name}":1,"${name}":2}`)?.message).toBe(
      `the body names the member "${'n'.repeat(100)}…" twice at its top level: each member may appear once`,
    );
  });
});
