import { describe, expect, it } from 'vitest';
import { inexactNumbersOf, parseJsonBody } from '../../../src/api/json-body.js';

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
