import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callApi, startTestService, type TestService } from '../support/service.js';
import {
  envelopeWithRawParams,
  expectError,
  expectOk,
  expectValidation,
  expectValidationUnder,
  jsonHeaders,
  ok,
  rawPost,
} from './helpers.js';

/** Contract §4 (identifiers), §5 (strings), §6 (attributes and documentation). */
describe('validation', () => {
  let service: TestService;
  let token: string;
  let workspace: any;
  let solution: any;

  const org = 'org_valid';
  const emoji = '😀'; // one code point, two UTF-16 units, four UTF-8 bytes

  beforeAll(async () => {
    service = await startTestService();
    token = await service.token([org, `org_${'o'.repeat(64)}`]);
    workspace = await ok(service, token, 'create_workspace', { organization_id: org, name: 'Validation' });
    solution = await ok(service, token, 'create_solution', { workspace_id: workspace.id, name: 'Validation' });
  });
  afterAll(() => service?.close());

  const createWorkspace = (params: Record<string, unknown>) =>
    callApi(service, token, 'create_workspace', { organization_id: org, name: 'W', ...params });
  const createSolution = (params: Record<string, unknown>) =>
    callApi(service, token, 'create_solution', { workspace_id: workspace.id, name: 'S', ...params });
  /** Sends params given as raw JSON text (lone surrogates, NUL, "__proto__" keys survive this way). */
  const raw = (query: string, rawParams: string) => rawPost(service, envelopeWithRawParams(query, rawParams), jsonHeaders(token));

  describe('§4 identifiers', () => {
    const badIds: [string, unknown][] = [
      ['an empty suffix', 'ws_'],
      ['a 65-character suffix', `ws_${'a'.repeat(65)}`],
      ['the wrong prefix', 'sol_abc'],
      ['an upper-case prefix', 'WS_abc'],
      ['no prefix', 'abc'],
      ['an empty string', ''],
      ['a space', 'ws_ab c'],
      ['a dot', 'ws_ab.c'],
      ['a slash', 'ws_ab/c'],
      ['a non-ASCII letter', 'ws_abé'],
      ['a percent sign', 'ws_ab%20'],
      ['a trailing newline', 'ws_abc\n'],
      ['a SQL fragment', "ws_a' OR '1'='1"],
      ['a number', 42],
      ['null', null],
      ['an array', ['ws_abc']],
      ['an object', { id: 'ws_abc' }],
    ];

    it.each(badIds)('rejects a workspace id with %s', async (_what, id) => {
      for (const [query, extra] of [
        ['get_workspace', {}],
        ['update_workspace', { name: 'x' }],
        ['delete_workspace', {}],
      ] as const) {
        expectValidation(await callApi(service, token, query, { id, ...extra }), 'params.id');
      }
      expectValidation(await callApi(service, token, 'create_solution', { workspace_id: id, name: 'x' }), 'params.workspace_id');
      expectValidation(await callApi(service, token, 'list_solutions', { page: 1, size: 1, workspace_id: id }), 'params.workspace_id');
    });

    it.each([
      ['the workspace prefix', 'ws_abc'],
      ['an empty suffix', 'sol_'],
      ['a 65-character suffix', `sol_${'a'.repeat(65)}`],
      ['a colon', 'sol_a:b'],
      ['a number', 7],
    ])('rejects a solution id with %s', async (_what, id) => {
      for (const [query, extra] of [
        ['get_solution', {}],
        ['update_solution', { name: 'x' }],
        ['delete_solution', {}],
      ] as const) {
        expectValidation(await callApi(service, token, query, { id, ...extra }), 'params.id');
      }
    });

    it.each([
      ['an empty suffix', 'org_'],
      ['a 65-character suffix', `org_${'o'.repeat(65)}`],
      ['the wrong prefix', 'organization_x'],
      ['a space', 'org_a b'],
      ['a number', 1],
    ])('rejects an organization id with %s', async (_what, id) => {
      expectValidation(await callApi(service, token, 'create_workspace', { organization_id: id, name: 'x' }), 'params.organization_id');
      expectValidation(
        await callApi(service, token, 'list_workspaces', { page: 1, size: 1, organization_id: id }),
        'params.organization_id',
      );
      expectValidation(
        await callApi(service, token, 'list_solutions', { page: 1, size: 1, organization_id: id }),
        'params.organization_id',
      );
      expectValidation(await createSolution({ organization_id: id }), 'params.organization_id');
    });

    it('accepts well-formed ids at the bounds: unknown ones are 404, not 400', async () => {
      for (const id of [`ws_${'a'.repeat(64)}`, 'ws_a', 'ws_-', 'ws__', 'ws_AZaz09-_']) {
        expectError(await callApi(service, token, 'get_workspace', { id }), 404, 'not_found');
      }
      expectError(await callApi(service, token, 'get_solution', { id: `sol_${'Z'.repeat(64)}` }), 404, 'not_found');
      const longOrg = `org_${'o'.repeat(64)}`;
      const created = await ok(service, token, 'create_workspace', { organization_id: longOrg, name: 'Long org' });
      expect(created.organization_id).toBe(longOrg);
    });

    it('generates ids as the prefix and 21 nanoid characters', async () => {
      expect(workspace.id).toMatch(/^ws_[A-Za-z0-9_-]{21}$/);
      expect(solution.id).toMatch(/^sol_[A-Za-z0-9_-]{21}$/);
    });
  });

  describe('parameters in general', () => {
    it.each([
      ['create_workspace', { organization_id: org }, 'params.name'],
      ['create_workspace', { name: 'x' }, 'params.organization_id'],
      ['update_workspace', { id: 'ws_x' }, 'params.name'],
      ['update_workspace', { name: 'x' }, 'params.id'],
      ['create_solution', { name: 'x' }, 'params.workspace_id'],
      ['update_solution', { id: 'sol_x' }, 'params.name'],
      ['get_workspace', {}, 'params.id'],
      ['get_solution', {}, 'params.id'],
      ['delete_workspace', {}, 'params.id'],
      ['delete_solution', {}, 'params.id'],
      ['list_workspaces', { size: 1 }, 'params.page'],
      ['list_solutions', { page: 1 }, 'params.size'],
    ])('%s without a required parameter names it: %j → %s', async (query, params, path) => {
      expectValidation(await callApi(service, token, query, params), path);
    });

    it.each([
      ['get_workspace', { id: 'ws_x', extra: 1 }, 'params.extra'],
      ['list_workspaces', { page: 1, size: 1, workspace_id: 'ws_x' }, 'params.workspace_id'],
      ['create_workspace', { organization_id: org, name: 'x', documentation: { blocks: [] } }, 'params.documentation'],
      ['create_workspace', { organization_id: org, name: 'x', id: 'ws_chosen' }, 'params.id'],
      ['update_workspace', { id: 'ws_x', name: 'x', organization_id: org }, 'params.organization_id'],
      ['create_solution', { workspace_id: 'ws_x', name: 'x', created_at: '2020-01-01T00:00:00.000000Z' }, 'params.created_at'],
      ['update_solution', { id: 'sol_x', name: 'x', workspace_id: 'ws_x' }, 'params.workspace_id'],
      ['delete_solution', { id: 'sol_x', force: true }, 'params.force'],
    ])('%s rejects a parameter unknown to the operation: %j → %s', async (query, params, path) => {
      expectValidation(await callApi(service, token, query, params), path);
    });

    it('rejects "__proto__" and "constructor" as parameter names', async () => {
      expectValidation(await raw('get_workspace', `{"id":"${workspace.id}","__proto__":{"id":"ws_other"}}`), 'params.__proto__');
      expectValidation(await raw('get_workspace', `{"id":"${workspace.id}","constructor":{"prototype":{}}}`), 'params.constructor');
    });
  });

  describe('§5 name', () => {
    it('counts code points: 50 emoji are accepted and stored exactly, 51 are rejected', async () => {
      const fifty = emoji.repeat(50);
      const created = expectOk(await createWorkspace({ name: fifty }));
      expect(created.name).toBe(fifty);
      expect(expectOk(await createSolution({ name: fifty })).name).toBe(fifty);
      expectValidation(await createWorkspace({ name: emoji.repeat(51) }), 'params.name');
      expectValidation(await createSolution({ name: emoji.repeat(51) }), 'params.name');
    });

    it('accepts 1 and 50 ASCII characters, rejects 0 and 51', async () => {
      expect(expectOk(await createWorkspace({ name: 'a' })).name).toBe('a');
      expect(expectOk(await createWorkspace({ name: 'a'.repeat(50) })).name).toBe('a'.repeat(50));
      expectValidation(await createWorkspace({ name: '' }), 'params.name');
      expectValidation(await createWorkspace({ name: 'a'.repeat(51) }), 'params.name');
    });

    it('counts combining marks as code points (no grapheme counting)', async () => {
      const decomposed = 'e\u0301'; // two code points, one grapheme
      expect(expectOk(await createWorkspace({ name: decomposed.repeat(25) })).name).toBe(decomposed.repeat(25));
      expectValidation(await createWorkspace({ name: decomposed.repeat(26) }), 'params.name');
    });

    it('stores names exactly as given: no trimming, no normalisation', async () => {
      const name = `  Ünïcødé e\u0301 \u00e9 ${emoji}  `;
      const created = expectOk(await createWorkspace({ name }));
      expect(created.name).toBe(name);
      expect((await ok(service, token, 'get_workspace', { id: created.id })).name).toBe(name);
    });

    it('allows two workspaces or two solutions with the same name', async () => {
      const first = expectOk(await createWorkspace({ name: 'Twin' }));
      const second = expectOk(await createWorkspace({ name: 'Twin' }));
      expect(first.id).not.toBe(second.id);
      expectOk(await createSolution({ name: 'Twin' }));
      expectOk(await createSolution({ name: 'Twin' }));
    });

    it.each([
      ['spaces only', '   '],
      ['a tab only', '\t'],
      ['no-break and ideographic spaces only', '\u00a0\u3000\u2003'],
      ['line breaks only', '\n\r\n'],
    ])('rejects a name of %s', async (_what, name) => {
      expectValidation(await createWorkspace({ name }), 'params.name');
      expectValidation(await createSolution({ name }), 'params.name');
      expectValidation(await callApi(service, token, 'update_workspace', { id: workspace.id, name }), 'params.name');
      expectValidation(await callApi(service, token, 'update_solution', { id: solution.id, name }), 'params.name');
    });

    it.each([
      ['NUL', 'a\u0000b'],
      ['BEL', 'a\u0007b'],
      ['ESC', 'a\u001bb'],
      ['DEL', 'a\u007fb'],
      ['NEL (C1)', 'a\u0085b'],
      ['a tab', 'a\tb'],
      ['a line feed', 'a\nb'],
      ['a carriage return', 'a\rb'],
    ])('rejects a name containing a control character: %s', async (_what, name) => {
      expectValidation(await createWorkspace({ name }), 'params.name');
      expectValidation(await createSolution({ name }), 'params.name');
      expectValidation(await callApi(service, token, 'update_workspace', { id: workspace.id, name }), 'params.name');
    });

    it.each([
      ['a lone high surrogate', '"a\\ud800b"'],
      ['a lone low surrogate', '"\\udc00"'],
      ['a reversed pair', '"\\udc00\\ud800"'],
      ['a high surrogate at the end', `"${'a'.repeat(10)}\\ud83d"`],
    ])('rejects a name with %s', async (_what, rawName) => {
      expectValidation(await raw('create_workspace', `{"organization_id":"${org}","name":${rawName}}`), 'params.name');
      expectValidation(await raw('create_solution', `{"workspace_id":"${workspace.id}","name":${rawName}}`), 'params.name');
      expectValidation(await raw('update_workspace', `{"id":"${workspace.id}","name":${rawName}}`), 'params.name');
      expectValidation(await raw('update_solution', `{"id":"${solution.id}","name":${rawName}}`), 'params.name');
    });

    it.each([
      ['a number', 5],
      ['null', null],
      ['an array', ['x']],
      ['an object', { text: 'x' }],
      ['a boolean', true],
    ])('rejects a name that is %s', async (_what, name) => {
      expectValidation(await createWorkspace({ name }), 'params.name');
    });

    it('applies the name rules on update too', async () => {
      expectValidation(await callApi(service, token, 'update_workspace', { id: workspace.id, name: 'a'.repeat(51) }), 'params.name');
      expectValidation(await callApi(service, token, 'update_solution', { id: solution.id, name: emoji.repeat(51) }), 'params.name');
      expectValidation(await callApi(service, token, 'update_solution', { id: solution.id, name: '' }), 'params.name');
      const renamed = await ok(service, token, 'update_solution', { id: solution.id, name: emoji.repeat(50) });
      expect(renamed.name).toBe(emoji.repeat(50));
    });
  });

  describe('§5 description', () => {
    it('defaults to "" and accepts "" explicitly', async () => {
      expect(expectOk(await createWorkspace({})).description).toBe('');
      expect(expectOk(await createSolution({})).description).toBe('');
      expect(expectOk(await createWorkspace({ description: '' })).description).toBe('');
    });

    it('counts code points: 255 emoji are accepted, 256 are rejected', async () => {
      expect(expectOk(await createWorkspace({ description: emoji.repeat(255) })).description).toBe(emoji.repeat(255));
      expectValidation(await createWorkspace({ description: emoji.repeat(256) }), 'params.description');
      expect(expectOk(await createSolution({ description: 'd'.repeat(255) })).description).toBe('d'.repeat(255));
      expectValidation(await createSolution({ description: 'd'.repeat(256) }), 'params.description');
      expectValidation(
        await callApi(service, token, 'update_workspace', { id: workspace.id, name: 'x', description: emoji.repeat(256) }),
        'params.description',
      );
      expectValidation(
        await callApi(service, token, 'update_solution', { id: solution.id, name: 'x', description: 'd'.repeat(256) }),
        'params.description',
      );
      const updated = await ok(service, token, 'update_solution', { id: solution.id, name: solution.name, description: emoji.repeat(255) });
      expect(updated.description).toBe(emoji.repeat(255));
    });

    it('allows tab, line feed and carriage return, and whitespace only, stored exactly', async () => {
      const description = '\tLine one\r\nLine two\n\n  indented\t ';
      const created = expectOk(await createSolution({ description }));
      expect(created.description).toBe(description);
      expect((await ok(service, token, 'get_solution', { id: created.id })).description).toBe(description);
      expect(expectOk(await createWorkspace({ description: '   ' })).description).toBe('   ');
    });

    it.each([
      ['NUL', 'a\u0000'],
      ['BEL', '\u0007'],
      ['vertical tab', 'a\u000bb'],
      ['form feed', 'a\u000cb'],
      ['ESC', '\u001b[31m'],
      ['DEL', 'a\u007f'],
      ['NEL (C1)', 'a\u0085'],
    ])('rejects a description containing %s', async (_what, description) => {
      expectValidation(await createWorkspace({ description }), 'params.description');
      expectValidation(await createSolution({ description }), 'params.description');
      expectValidation(
        await callApi(service, token, 'update_workspace', { id: workspace.id, name: 'x', description }),
        'params.description',
      );
      expectValidation(await callApi(service, token, 'update_solution', { id: solution.id, name: 'x', description }), 'params.description');
    });

    it('rejects lone surrogates in a description', async () => {
      expectValidation(
        await raw('create_workspace', `{"organization_id":"${org}","name":"x","description":"ok \\udfff"}`),
        'params.description',
      );
      expectValidation(await raw('update_solution', `{"id":"${solution.id}","name":"x","description":"\\ud800"}`), 'params.description');
    });

    it.each([
      ['null', null],
      ['a number', 1],
      ['an array', ['x']],
    ])('rejects a description that is %s', async (_what, description) => {
      expectValidation(await createWorkspace({ description }), 'params.description');
      expectValidation(
        await callApi(service, token, 'update_workspace', { id: workspace.id, name: 'x', description }),
        'params.description',
      );
    });
  });

  describe('§6 attributes', () => {
    it('defaults to {} and round-trips any JSON values', async () => {
      expect(expectOk(await createWorkspace({})).attributes).toEqual({});
      expect(expectOk(await createSolution({})).attributes).toEqual({});
      const attributes = {
        text: 'hello',
        unicode: `${emoji} e\u0301`,
        integer: 42,
        negative: -7,
        fraction: 0.125,
        large: 1e300,
        yes: true,
        no: false,
        nothing: null,
        list: [1, 'two', { three: 3 }, [4], null],
        nested: { deeper: { deepest: 'x' } },
        '': 'empty key',
        'key with spaces and ümlauts': 1,
      };
      const created = expectOk(await createWorkspace({ attributes }));
      expect(created.attributes).toEqual(attributes);
      expect((await ok(service, token, 'get_workspace', { id: created.id })).attributes).toEqual(attributes);
      const createdSolution = expectOk(await createSolution({ attributes }));
      expect((await ok(service, token, 'get_solution', { id: createdSolution.id })).attributes).toEqual(attributes);
    });

    it.each([
      ['null', null],
      ['an array', [{ a: 1 }]],
      ['an empty array', []],
      ['a string', '{"a":1}'],
      ['a number', 1],
      ['a boolean', false],
    ])('rejects attributes that are %s', async (_what, attributes) => {
      expectValidation(await createWorkspace({ attributes }), 'params.attributes');
      expectValidation(await createSolution({ attributes }), 'params.attributes');
      expectValidation(await callApi(service, token, 'update_workspace', { id: workspace.id, name: 'x', attributes }), 'params.attributes');
      expectValidation(await callApi(service, token, 'update_solution', { id: solution.id, name: 'x', attributes }), 'params.attributes');
    });

    it('accepts exactly 64 KiB serialized and rejects one byte more', async () => {
      const overhead = JSON.stringify({ k: '' }).length;
      const exact = { k: 'x'.repeat(64 * 1024 - overhead) };
      expect(Buffer.byteLength(JSON.stringify(exact))).toBe(65536);
      expect(expectOk(await createWorkspace({ attributes: exact })).attributes).toEqual(exact);
      const over = { k: 'x'.repeat(64 * 1024 - overhead + 1) };
      expectValidation(await createWorkspace({ attributes: over }), 'params.attributes');
      expectValidation(await createSolution({ attributes: over }), 'params.attributes');
      expectValidation(
        await callApi(service, token, 'update_workspace', { id: workspace.id, name: 'x', attributes: over }),
        'params.attributes',
      );
    });

    it('rejects an update whose merged attributes would exceed 64 KiB', async () => {
      const created = expectOk(await createWorkspace({ attributes: { a: 'x'.repeat(40_000) } }));
      const response = await callApi(service, token, 'update_workspace', {
        id: created.id,
        name: 'W',
        attributes: { b: 'y'.repeat(40_000) },
      });
      expectValidation(response, 'params.attributes');
      expect((await ok(service, token, 'get_workspace', { id: created.id })).attributes).toEqual({ a: 'x'.repeat(40_000) });
      // Replacing the big value instead of adding one fits.
      const replaced = await ok(service, token, 'update_workspace', {
        id: created.id,
        name: 'W',
        attributes: { a: null, b: 'y'.repeat(40_000) },
      });
      expect(replaced.attributes).toEqual({ b: 'y'.repeat(40_000) });
    });

    const nested = (levels: number, leaf: unknown = 'leaf'): unknown => {
      let value: unknown = leaf;
      for (let i = 0; i < levels; i++) value = { d: value };
      return value;
    };

    it('accepts 32 levels of nesting (the attributes object being level 1) and rejects 33', async () => {
      const deepest = nested(32) as Record<string, unknown>;
      expect(expectOk(await createWorkspace({ attributes: deepest })).attributes).toEqual(deepest);
      expectValidationUnder(await createWorkspace({ attributes: nested(33) }), 'params.attributes');
      expectValidationUnder(await createSolution({ attributes: nested(33) }), 'params.attributes');
      // Arrays count as levels too.
      const arrays = { a: JSON.parse('['.repeat(32) + ']'.repeat(32)) };
      expectValidationUnder(await createWorkspace({ attributes: arrays }), 'params.attributes');
    });

    it('rejects extremely deep nesting with a 400, not a 500', async () => {
      for (const levels of [1000, 100_000]) {
        const body = envelopeWithRawParams(
          'create_workspace',
          `{"organization_id":"${org}","name":"deep","attributes":${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}}`,
        );
        expectValidationUnder(await rawPost(service, body, jsonHeaders(token)), 'params.attributes');
        const arrays = envelopeWithRawParams(
          'update_workspace',
          `{"id":"${workspace.id}","name":"deep","attributes":{"a":${'['.repeat(levels)}${']'.repeat(levels)}}}`,
        );
        expectValidationUnder(await rawPost(service, arrays, jsonHeaders(token)), 'params.attributes');
      }
    });

    it.each([
      ['a NUL in a value', '{"k":"a\\u0000b"}'],
      ['a NUL in a key', '{"k\\u0000":1}'],
      ['a NUL in a nested value', '{"k":{"l":["ok","\\u0000"]}}'],
      ['a NUL in a nested key', '{"k":{"\\u0000":1}}'],
      ['a lone surrogate in a value', '{"k":"\\ud800"}'],
      ['a lone surrogate in a key', '{"\\udc00":1}'],
      ['a lone surrogate in a nested array', '{"k":[["\\ud83d"]]}'],
      ['a number beyond the double range (would become null)', '{"k":1e400}'],
      ['a negative number beyond the double range', '{"k":{"l":-1e400}}'],
      ['an out-of-range number in an array', '{"k":[1,1e999]}'],
      ['the key "__proto__"', '{"__proto__":{"polluted":true}}'],
      ['the key "constructor"', '{"constructor":{"prototype":{"polluted":true}}}'],
      ['the key "prototype"', '{"prototype":1}'],
      ['a nested "__proto__"', '{"k":{"__proto__":{"polluted":true}}}'],
      ['a "__proto__" inside an array', '{"k":[{"__proto__":1}]}'],
      ['a nested "constructor"', '{"a":{"b":{"constructor":1}}}'],
    ])('rejects attributes with %s', async (_what, rawAttributes) => {
      const responses = [
        await raw('create_workspace', `{"organization_id":"${org}","name":"x","attributes":${rawAttributes}}`),
        await raw('create_solution', `{"workspace_id":"${workspace.id}","name":"x","attributes":${rawAttributes}}`),
        await raw('update_workspace', `{"id":"${workspace.id}","name":"x","attributes":${rawAttributes}}`),
        await raw('update_solution', `{"id":"${solution.id}","name":"x","attributes":${rawAttributes}}`),
      ];
      for (const response of responses) expectValidationUnder(response, 'params.attributes');
      // The service runs in this process: a "__proto__" key must not have reached any prototype.
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    });

    it('names the forbidden key in the path', async () => {
      const response = await raw('create_workspace', `{"organization_id":"${org}","name":"x","attributes":{"a":{"__proto__":{"x":1}}}}`);
      expectValidation(response, 'params.attributes.a.__proto__');
    });

    it('leaves the record unchanged when an update is rejected', async () => {
      const before = await ok(service, token, 'get_solution', { id: solution.id });
      await raw('update_solution', `{"id":"${solution.id}","name":"changed","attributes":{"__proto__":{}}}`);
      await callApi(service, token, 'update_solution', { id: solution.id, name: 'changed', description: 'a\u0000' });
      expect(await ok(service, token, 'get_solution', { id: solution.id })).toEqual(before);
    });
  });

  describe('§6 documentation', () => {
    const text = (content: string) => ({ type: 'text', content });

    it('defaults to {"blocks": []} and stores text blocks as given', async () => {
      expect(expectOk(await createSolution({})).documentation).toEqual({ blocks: [] });
      const documentation = { blocks: [text('Intro'), text(''), text(`${emoji}\nmulti\tline`)] };
      const created = expectOk(await createSolution({ documentation }));
      expect(created.documentation).toEqual(documentation);
      expect((await ok(service, token, 'get_solution', { id: created.id })).documentation).toEqual(documentation);
    });

    it.each([
      ['null', null, 'params.documentation'],
      ['an array', [text('x')], 'params.documentation'],
      ['a string', 'docs', 'params.documentation'],
      ['an empty object', {}, 'params.documentation.blocks'],
      ['blocks null', { blocks: null }, 'params.documentation.blocks'],
      ['blocks an object', { blocks: { 0: text('x') } }, 'params.documentation.blocks'],
      ['an extra top-level field', { blocks: [], title: 'x' }, 'params.documentation.title'],
      ['a block type other than text', { blocks: [{ type: 'image', content: 'x' }] }, 'params.documentation.blocks.0.type'],
      ['a block type in upper case', { blocks: [text('ok'), { type: 'TEXT', content: 'x' }] }, 'params.documentation.blocks.1.type'],
      ['a block without type', { blocks: [{ content: 'x' }] }, 'params.documentation.blocks.0.type'],
      ['a block without content', { blocks: [{ type: 'text' }] }, 'params.documentation.blocks.0.content'],
      ['a block with numeric content', { blocks: [{ type: 'text', content: 1 }] }, 'params.documentation.blocks.0.content'],
      ['a block with null content', { blocks: [{ type: 'text', content: null }] }, 'params.documentation.blocks.0.content'],
      ['a block with an extra field', { blocks: [{ type: 'text', content: 'x', id: 'b1' }] }, 'params.documentation.blocks.0.id'],
      ['a block that is a string', { blocks: ['x'] }, 'params.documentation.blocks.0'],
      ['a block that is null', { blocks: [null] }, 'params.documentation.blocks.0'],
    ])('rejects documentation that is %s', async (_what, documentation, path) => {
      expectValidation(await createSolution({ documentation }), path);
      expectValidation(await callApi(service, token, 'update_solution', { id: solution.id, name: 'x', documentation }), path);
    });

    it.each([
      ['a NUL in content', '{"blocks":[{"type":"text","content":"a\\u0000b"}]}'],
      ['a lone surrogate in content', '{"blocks":[{"type":"text","content":"\\ud800"}]}'],
      ['a "__proto__" block field', '{"blocks":[{"type":"text","content":"x","__proto__":{"type":"image"}}]}'],
      ['a "__proto__" documentation field', '{"blocks":[],"__proto__":{"blocks":[]}}'],
    ])('rejects documentation with %s', async (_what, rawDocumentation) => {
      const response = await raw('create_solution', `{"workspace_id":"${workspace.id}","name":"x","documentation":${rawDocumentation}}`);
      expectValidationUnder(response, 'params.documentation');
    });

    it('accepts 1000 blocks and rejects 1001', async () => {
      const blocks = (count: number) => ({ blocks: Array.from({ length: count }, (_, i) => text(`block ${i}`)) });
      const created = expectOk(await createSolution({ documentation: blocks(1000) }));
      expect(created.documentation.blocks).toHaveLength(1000);
      expect(created.documentation.blocks[999]).toEqual(text('block 999'));
      expectValidation(await createSolution({ documentation: blocks(1001) }), 'params.documentation.blocks');
      expectValidation(
        await callApi(service, token, 'update_solution', { id: solution.id, name: 'x', documentation: blocks(1001) }),
        'params.documentation.blocks',
      );
    });

    it('accepts exactly 512 KiB serialized and rejects one byte more', async () => {
      const overhead = JSON.stringify({ blocks: [text('')] }).length;
      const exact = { blocks: [text('x'.repeat(512 * 1024 - overhead))] };
      expect(Buffer.byteLength(JSON.stringify(exact))).toBe(512 * 1024);
      const created = expectOk(await createSolution({ documentation: exact }));
      expect(created.documentation).toEqual(exact);
      const over = { blocks: [text('x'.repeat(512 * 1024 - overhead + 1))] };
      expectValidation(await createSolution({ documentation: over }), 'params.documentation');
      expectValidation(
        await callApi(service, token, 'update_solution', { id: solution.id, name: 'x', documentation: over }),
        'params.documentation',
      );
    });
  });

  describe('details', () => {
    it('reports every invalid parameter of a request, each with a message', async () => {
      const response = await callApi(service, token, 'create_solution', {
        workspace_id: 'bad',
        name: '',
        description: 7,
        attributes: [],
        documentation: { blocks: 'x' },
        surprise: 1,
      });
      expectError(response, 400, 'validation_error');
      const paths = [...new Set<string>(response.body.error.details.map((detail: { path: string }) => detail.path))].sort();
      expect(paths).toEqual(
        [
          'params.attributes',
          'params.description',
          'params.documentation.blocks',
          'params.name',
          'params.surprise',
          'params.workspace_id',
        ].sort(),
      );
      for (const detail of response.body.error.details) expect(detail.message.length).toBeGreaterThan(0);
    });

    it("words every detail itself, never in the validation library's words (issue 25)", async () => {
      const response = await callApi(service, token, 'create_solution', {
        workspace_id: 7,
        description: 7,
        attributes: [],
        documentation: { blocks: [{ type: 'text', content: null }], extra: 1 },
        surprise: 1,
      });
      expectError(response, 400, 'validation_error');
      expect(response.body.error.details).toEqual([
        { path: 'params.workspace_id', message: 'must be a string' },
        { path: 'params.name', message: 'is required' },
        { path: 'params.description', message: 'must be a string' },
        { path: 'params.attributes', message: 'must be a JSON object' },
        { path: 'params.documentation.blocks.0.content', message: 'must be a string' },
        { path: 'params.documentation.extra', message: 'is not an allowed member of this object' },
        { path: 'params.surprise', message: 'is not a parameter of this operation' },
      ]);
      const sizes = await callApi(service, token, 'list_workspaces', { page: 0, size: 101 });
      expect(sizes.body.error.details).toEqual([
        { path: 'params.page', message: 'must be between 1 and 9007199254740991' },
        { path: 'params.size', message: 'must be between 1 and 100' },
      ]);
    });

    it('names the limit in the message for a name too long', async () => {
      const response = await createWorkspace({ name: 'n'.repeat(51) });
      expectValidation(response, 'params.name');
      expect(response.body.error.details[0].message).toMatch(/50/);
    });
  });
});
