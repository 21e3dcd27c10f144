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
