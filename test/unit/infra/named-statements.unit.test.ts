import { describe, expect, it } from 'vitest';
import { named } from '../../../src/infra/postgres.js';

describe('named statements', () => {
  it('gives one text one name, each distinct text its own, and keeps the values', () => {
    const first = named('SELECT $1::int AS a', [1]);
    const again = named('SELECT $1::int AS a', [2]);
    const other = named('SELECT $1::int AS b', [3]);
    expect(first.name).toBeDefined();
    expect(again).toEqual({ name: first.name, text: 'SELECT $1::int AS a', values: [2] });
    expect(other.name).toBeDefined();
    expect(other.name).not.toBe(first.name);
  });

  it('runs texts unnamed once a thousand are named, so that varying texts cannot grow memory without bound', () => {
    const names = new Set<string | undefined>();
    for (let i = 0; i < 1200; i++) names.add(named(`SELECT ${i} AS n`, []).name);
    expect(names.has(undefined)).toBe(true);
    expect(names.size).toBeLessThanOrEqual(1001);
    expect(named('SELECT 1199 AS n', [])).toEqual({ text: 'SELECT 1199 AS n', values: [] });
  });
});
