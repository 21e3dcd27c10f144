import { describe, expect, it } from 'vitest';
import { nextPageSize } from '../../../src/projections/catch-up.js';

const sizes = { min: 500, max: 20_000 };

describe('the projector page size', () => {
  it('given full pages, doubles up to the maximum', () => {
    const grown: number[] = [];
    for (let size = sizes.min, turn = 0; turn < 8; turn += 1) grown.push((size = nextPageSize(size, size, sizes)));
    expect(grown).toEqual([1000, 2000, 4000, 8000, 16_000, 20_000, 20_000, 20_000]);
  });

  it('given a short page (the end of the log), goes back to the minimum', () => {
    expect(nextPageSize(20_000, 19_999, sizes)).toBe(500);
    expect(nextPageSize(500, 0, sizes)).toBe(500);
  });

  it('given a minimum above the default maximum, never reads less than the minimum', () => {
    expect(nextPageSize(50, 50, { min: 50, max: 50 })).toBe(50);
  });
});
