import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import ts from 'typescript';
import { operationKinds } from '../../src/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fencedBlocks } from '../support/markdown.js';

/**
 * The client as another project gets it: the build (`npm run build`), imported by the package's
 * name through its `exports` entry, type-checked and run by plain Node, without tsx or vitest.
 */
const root = path.resolve(import.meta.dirname, '../..');

describe('the typed client as a package', () => {
  let directory: string;
  let consumer: string;

  beforeAll(() => {
    directory = mkdtempSync(path.join(tmpdir(), 'client-package-'));
    const installed = path.join(directory, 'workspace-solution-api');
    execFileSync(
      process.execPath,
      [path.join(root, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json', '--outDir', path.join(installed, 'dist')],
      {
        cwd: root,
      },
    );
    copyFileSync(path.join(root, 'package.json'), path.join(installed, 'package.json'));
    // The declarations refer to zod's types, a dependency of the package.
    symlinkSync(path.join(root, 'node_modules'), path.join(installed, 'node_modules'));
    consumer = path.join(directory, 'consumer');
    mkdirSync(path.join(consumer, 'node_modules'), { recursive: true });
    symlinkSync(installed, path.join(consumer, 'node_modules/workspace-solution-api'));
    writeFileSync(path.join(consumer, 'package.json'), JSON.stringify({ type: 'module' }));
    for (const [file, text] of consumerFiles) writeFileSync(path.join(consumer, file), text);
  }, 120_000);
  afterAll(() => rmSync(directory, { recursive: true, force: true }));

  /**
   * Every message of TypeScript's strict check of `files` (written into the consumer's folder), as
   * a consumer with the given global types compiles them: those in the package's declarations too.
   */
  const typeErrors = (files: string[], types: string[]) =>
    ts
      .getPreEmitDiagnostics(
        ts.createProgram(
          files.map((file) => path.join(consumer, file)),
          {
            strict: true,
            noEmit: true,
            module: ts.ModuleKind.NodeNext,
            moduleResolution: ts.ModuleResolutionKind.NodeNext,
            target: ts.ScriptTarget.ES2022,
            types,
            typeRoots: [path.join(root, 'node_modules/@types')],
          },
        ),
      )
      .map(
        (diagnostic) =>
          `${diagnostic.file ? `${path.basename(diagnostic.file.fileName)}: ` : ''}${ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n')}`,
      );
  const consumerFiles = new Map<string, string>();
  consumerFiles.set(
    'check.ts',
    `import { createClient, ApiError, type Result } from 'workspace-solution-api/client';
const api = createClient({ baseUrl: 'http://localhost:3000', token: 'token' });
export const workspace: Promise<Result<'get_workspace'>> = api.getWorkspace({ id: 'ws_1' });
export const created = api.createSolution({ workspace_id: 'ws_1', name: 'S' }).then((solution) => solution.documentation.blocks);
// @ts-expect-error a required parameter missing
export const missing = api.updateWorkspace({ id: 'ws_1' });
export const code = (error: ApiError): string => error.code;
`,
  );
  // test/e2e/docs-examples.e2e.test.ts runs them against a service.
  const readmeExamples = fencedBlocks(readFileSync(path.join(root, 'README.md'), 'utf8')).filter((block) => block.info === 'ts');
  for (const example of readmeExamples) consumerFiles.set(`readme-${example.line}.ts`, example.text);

  it("type-checks a consumer against the built declarations, without Node's types", () => {
    expect(typeErrors(['check.ts'], [])).toEqual([]);
  });

  // One program for them all: a program takes seconds to make.
  it("type-checks the README's TypeScript examples, each a module of a consumer's with Node's types, against the built declarations", () => {
    expect(readmeExamples.length).toBeGreaterThan(0);
    expect(
      typeErrors(
        readmeExamples.map((example) => `readme-${example.line}.ts`),
        ['node'],
      ),
    ).toEqual([]);
  });

  it('runs in plain Node, importing nothing of the server', () => {
    const script = path.join(consumer, 'run.mjs');
    writeFileSync(
      script,
      `import { createClient } from 'workspace-solution-api/client';
const api = createClient({ baseUrl: 'http://127.0.0.1:9', token: 'token', retries: 0 });
const outcome = await api.getWorkspace({ id: 'ws_1' }).then(() => 'answered', (error) => error.name);
console.log(JSON.stringify({ outcome, methods: Object.keys(api).length }));
`,
    );
    const output = execFileSync(process.execPath, [script], { cwd: consumer, encoding: 'utf8' });
    // One method per operation, and call, pages, items, changes, streamChanges.
    expect(JSON.parse(output)).toEqual({ outcome: 'ServiceUnreachable', methods: Object.keys(operationKinds).length + 5 });
    // Its types come from the server's schemas; none of the server's code comes with it.
    const built = readFileSync(path.join(directory, 'workspace-solution-api/dist/client/index.js'), 'utf8');
    // It imports only its own modules (dist/client) and the one package it declares, for parsing event streams.
    const imported = [...built.matchAll(/\bfrom\s+'([^']+)'/g)].map((match) => match[1]!);
    expect(imported.filter((specifier) => !/^\.\/[\w-]+\.js$/.test(specifier) && specifier !== 'eventsource-parser')).toEqual([]);
  });
});
