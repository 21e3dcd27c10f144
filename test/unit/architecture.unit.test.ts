import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { stripVTControlCharacters } from 'node:util';
import { fileURLToPath } from 'node:url';
import { cruise, format, type ICruiseOptions, type ICruiseResult } from 'dependency-cruiser';
import extractDepcruiseOptions from 'dependency-cruiser/config-utl/extract-depcruise-options';
import extractTSConfig from 'dependency-cruiser/config-utl/extract-ts-config';
import { beforeAll, describe, expect, it } from 'vitest';

/**
 * The layer rules of .dependency-cruiser.js (docs/architecture.md), which `npm run lint` checks on
 * src/: here each one is shown to catch a planted import, and the checked-in graph to be today's.
 */
const root = fileURLToPath(new URL('../..', import.meta.url));
let options: ICruiseOptions;
let tsConfig: ReturnType<typeof extractTSConfig>;

beforeAll(async () => {
  options = await extractDepcruiseOptions(path.join(root, '.dependency-cruiser.js'));
  tsConfig = extractTSConfig(path.join(root, 'tsconfig.json'));
});

const cruiseFrom = (baseDir: string, outputType?: ICruiseOptions['outputType']) =>
  cruise(['src'], { ...options, baseDir, ...(outputType ? { outputType } : {}) }, {}, { tsConfig });

/** A package's files as the package's name: `../../../node_modules/pg/lib/index.js` is `pg`. */
const packageName = (module: string) => module.replace(/^(\.\.\/)*node_modules\/((@[^/]+\/)?[^/]+)\/.*$/, '$2');

describe('the layer rules', () => {
  // One module per planted import, each in the layer it breaks; beside them, imports the rules allow.
  const fixture = path.join(root, 'test/fixtures/layers');

  it('fail each planted import, naming the rule and both files, and let the allowed ones through', async () => {
    const result = (await cruiseFrom(fixture)).output as ICruiseResult;
    const violations = result.summary.violations.map(({ rule, from, to }) => `${rule.name}: ${from} → ${packageName(to)}`);
    expect(violations.sort()).toEqual(
      [
        'no-circular: src/projections/dead-letters.ts → src/projections/progress.ts',
        'domain-is-pure: src/domain/imports-the-api.ts → src/api/route.ts',
        'domain-is-pure: src/domain/reads-a-file.ts → fs',
        'no-upward-import-from-ground: src/observability/imports-an-api-type.ts → src/api/route.ts',
        'no-upward-import-from-eventstore: src/eventstore/imports-the-write-side.ts → src/write/command.ts',
        'no-upward-import-from-middle: src/write/imports-the-api.ts → src/api/route.ts',
        'read-has-no-domain-code: src/read/imports-the-domain.ts → src/domain/value.ts',
        'capability-pure-part-imports-no-adapters: src/changes/reads-through-its-adapter.ts → src/changes/adapters/postgres.ts',
        'capability-pure-part-imports-no-adapters: src/integrity/queries-postgres.ts → pg',
        'no-upward-import-from-api: src/api/imports-the-start-up.ts → src/runtime/start.ts',
        'client-imports-only-types: src/client/index.ts → src/api/route.ts',
        'module-outside-the-layers: src/stray.ts → src/domain/value.ts',
      ].sort(),
    );
    // Every rule is shown to catch something.
    expect(new Set(result.summary.violations.map(({ rule }) => rule.name))).toEqual(
      new Set(options.ruleSet?.forbidden?.map(({ name }) => name)),
    );
    // Each is an error, which fails `npm run lint` (its exit status is their number), and is printed like this.
    expect(result.summary.error).toBe(violations.length);
    const { output: text } = await format(result, { outputType: 'err' });
    // Coloured where colours are on (a terminal, or CI set, as CI sets it): compared as plain text.
    expect(stripVTControlCharacters(String(text))).toContain('error domain-is-pure: src/domain/imports-the-api.ts → src/api/route.ts');
  });
});

describe('docs/architecture.svg', () => {
  it('is drawn from the graph of today’s src/: docs/architecture.dot is what dependency-cruiser makes of it', async () => {
    const { output, exitCode } = await cruiseFrom(root, 'dot');
    expect(exitCode).toBe(0);
    // Stale after a module or an import was added, moved or removed.
    const stale = 'docs/architecture.dot and .svg are out of date: npm run architecture:graph redraws both';
    expect(output, stale).toBe(await readFile(path.join(root, 'docs/architecture.dot'), 'utf8'));
  });
});
