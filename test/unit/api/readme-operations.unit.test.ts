import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { operations } from '../../../src/api/operations.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

/** test/e2e/docs-examples.e2e.test.ts runs these examples; this checks that none of the operations is left out of them. */
describe("the README's section 'Every operation with curl'", () => {
  it('calls every operation of the table, and no other', () => {
    const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
    const start = readme.indexOf('## Every operation with curl');
    const section = readme.slice(start, readme.indexOf('\n## ', start + 1));
    const called = new Set([...section.matchAll(/^api '\{"query":"([a-z_]+)"/gm)].map((match) => match[1]!));
    expect([...called].sort()).toEqual(Object.keys(operations).sort());
  });
});
