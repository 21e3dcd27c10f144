import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { configurationVariables, parseConfig } from '../../src/config.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const example = Object.fromEntries(
  readFileSync(path.join(root, '.env.example'), 'utf8')
    .split('\n')
    .filter((line) => /^[A-Z_]+=/.test(line))
    .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
);

describe('.env.example', () => {
  it('names every variable the service reads, and nothing else', () => {
    expect(Object.keys(example).sort()).toEqual([...configurationVariables].sort());
  });

  it('gives each its default: as it stands it configures exactly what an empty environment does', () => {
    expect(parseConfig({ ...example, AUTH_JWT_SECRET: 'x'.repeat(32) })).toEqual(parseConfig({ AUTH_JWT_SECRET: 'x'.repeat(32) }));
  });
});

describe("the README's configuration table", () => {
  it('names every variable the service reads, and nothing else', () => {
    const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
    const section = readme.slice(readme.indexOf('## Configuration'), readme.indexOf('\n## ', readme.indexOf('## Configuration') + 1));
    const rows = section.split('\n').filter((line) => line.startsWith('| `'));
    const named = rows.flatMap((row) => [...row.split('|')[1]!.matchAll(/`([A-Z_]+)`/g)].map((match) => match[1]!));
    expect(named.sort()).toEqual([...configurationVariables].sort());
  });
});
