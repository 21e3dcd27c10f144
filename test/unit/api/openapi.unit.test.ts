import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Validator } from '@seriousme/openapi-schema-validator';
import openapiTS, { astToString } from 'openapi-typescript';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { openApiDocument } from '../../../src/api/openapi.js';
import { scopes } from '../../../src/api/auth.js';
import { operations, scopesOf } from '../../../src/api/operations.js';
import { operationKinds } from '../../../src/client/index.js';

const document = openApiDocument('0.0.0-test');
type Operation = {
  operationId: string;
  security: Record<string, string[]>[];
  parameters: { $ref: string }[];
  responses: Record<string, unknown>;
};
const apiOperation = (name: string) => (document.paths as unknown as Record<string, { post: Operation }>)[`/api#${name}`]!.post;

describe('the OpenAPI document', () => {
  it('is valid OpenAPI 3.1 for an independent validator', async () => {
    const result = await new Validator().validate(document as never);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
  });

  it('has every operation of the table, with its scope, and an Idempotency-Key on commands only', () => {
    for (const [name, operation] of Object.entries(operations)) {
      const documented = apiOperation(name);
      expect(documented.operationId).toBe(name);
      expect(documented.security).toEqual(scopesOf(name as keyof typeof operations).map((scope) => ({ bearerAuth: [scope] })));
      const headers = documented.parameters.map((parameter) => parameter.$ref);
      expect(headers.includes('#/components/parameters/IdempotencyKey')).toBe(operation.kind === 'command');
    }
    // The integrity queries take either read scope: two requirements, any one of which grants them.
    expect(apiOperation('get_checkpoint').security).toEqual([{ bearerAuth: ['workspaces:read'] }, { bearerAuth: ['solutions:read'] }]);
    const documentedOperations = Object.keys(document.paths).filter((key) => key.startsWith('/api#'));
    expect(documentedOperations.sort()).toEqual(
      Object.keys(operations)
        .map((name) => `/api#${name}`)
        .sort(),
    );
  });

  it('names every scope a token may carry in its description of the bearer token', () => {
    const description = (document.components as { securitySchemes: { bearerAuth: { description: string } } }).securitySchemes.bearerAuth
      .description;
    for (const scope of scopes) expect(description).toContain(scope);
  });

  it('lists 404 for operations naming a record and for commands, 409 and 422 for commands only', () => {
    const statuses = (name: string) => Object.keys(apiOperation(name).responses);
    expect(statuses('list_workspaces')).not.toContain('404');
    expect(statuses('list_solutions')).not.toContain('409');
    expect(statuses('get_solution_history')).toContain('404');
    expect(statuses('create_workspace')).toEqual(
      expect.arrayContaining(['200', '400', '401', '403', '404', '409', '413', '415', '422', '429', '500', '503']),
    );
  });

  it("describes list_changes' 200 for both of its forms: the page in `data`, and the event stream, which has no envelope", () => {
    type Answer = { description: string; content: Record<string, { schema: { description?: string } }> };
    const answer = apiOperation('list_changes').responses['200'] as Answer;
    expect(Object.keys(answer.content).sort()).toEqual(['application/json', 'text/event-stream']);
    expect(answer.description).toMatch(/`application\/json`[^.]*`data`/);
    expect(answer.description).toMatch(/`text\/event-stream`[^.]*no `data` envelope/);
    expect(answer.content['text/event-stream']!.schema.description).toMatch(/Server-Sent Events/);
    // An operation with one form keeps the short wording.
    expect((apiOperation('list_workspaces').responses['200'] as Answer).description).toBe('Done; `data` holds the result.');
  });

  it("gives the client the server's command/query split", () => {
    expect(operationKinds).toEqual(Object.fromEntries(Object.entries(operations).map(([name, operation]) => [name, operation.kind])));
  });

  it('yields exact per-operation types through openapi-typescript', async () => {
    // As the README runs it: a parameter with a default stays optional.
    const generated = astToString(await openapiTS(document as never, { defaultNonNullable: false }));
    const directory = mkdtempSync(path.join(tmpdir(), 'openapi-types-'));
    try {
      writeFileSync(path.join(directory, 'api.d.ts'), generated);
      // Each @ts-expect-error fails the compilation when its line type-checks: a generator producing
      // unions of every operation's params or results would accept them.
      writeFileSync(
        path.join(directory, 'check.ts'),
        `import type { operations } from './api';
type Body<O extends keyof operations> = operations[O]['requestBody'] extends { content: { 'application/json': infer B } } ? B : never;
type Data<O extends keyof operations> = operations[O]['responses'][200]['content']['application/json'] extends { data: infer D } ? D : never;

export const create: Body<'create_workspace'> = { query: 'create_workspace', params: { organization_id: 'org_a', name: 'n', attributes: { a: [1] } } };
// @ts-expect-error another operation's query
export const wrongQuery: Body<'create_workspace'> = { query: 'update_workspace', params: { organization_id: 'org_a', name: 'n' } };
// @ts-expect-error a parameter create_workspace does not take
export const extra: Body<'create_workspace'> = { query: 'create_workspace', params: { organization_id: 'org_a', name: 'n', documentation: { blocks: [] } } };
// @ts-expect-error name is required
export const missing: Body<'create_workspace'> = { query: 'create_workspace', params: { organization_id: 'org_a' } };
export const changesByDefault: Body<'list_changes'> = { query: 'list_changes', params: {} };
// @ts-expect-error page is an integer
export const textPage: Body<'list_solutions'> = { query: 'list_solutions', params: { page: '1', size: 10 } };

export const deletedId = (deleted: Data<'delete_workspace'>): string => deleted.id;
// @ts-expect-error a deletion answers the id only
export const deletedName = (deleted: Data<'delete_workspace'>): string => deleted.name;
export const firstBlock = (page: Data<'list_solutions'>): string | undefined => page.items[0]?.documentation.blocks[0]?.content;
// @ts-expect-error workspaces have no documentation
export const workspaceDocumentation = (workspace: Data<'get_workspace'>) => workspace.documentation;
export const reason = (item: Data<'get_solution_history'>['items'][number]): string =>
  item.type === 'SolutionDeleted' ? item.data.reason : item.data.name;
`,
      );
      const program = ts.createProgram([path.join(directory, 'check.ts')], {
        strict: true,
        noEmit: true,
        exactOptionalPropertyTypes: true,
        noUncheckedIndexedAccess: true,
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.ESNext,
        moduleResolution: ts.ModuleResolutionKind.Bundler,
      });
      const diagnostics = ts
        .getPreEmitDiagnostics(program)
        .map((diagnostic) => ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n'));
      expect(diagnostics).toEqual([]);
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  });
});
