import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { allScopes, expectOk, expectValidation, ok } from './helpers.js';
import type { Params } from '../../src/client/index.js';

/** Contract §7: updates keep what is omitted, merge attributes (RFC 7396), replace documentation, lose nothing under concurrency. */
describe('updates', () => {
  let service: TestService;
  let token: string;
  let workspaceId: string;
  const org = 'org_updates';

  beforeAll(async () => {
    service = await startTestService();
    token = await service.token([org]);
    workspaceId = (await ok(service, token, 'create_workspace', { organization_id: org, name: 'Parent' })).id;
  });
  afterAll(() => service?.close());

  const newWorkspace = (params: Record<string, unknown> = {}) =>
    ok(service, token, 'create_workspace', { organization_id: org, name: 'W', ...params });
  const newSolution = (params: Record<string, unknown> = {}) =>
    ok(service, token, 'create_solution', { workspace_id: workspaceId, name: 'S', ...params });

  /** Updates and checks that the answer is what a later read returns. */
  async function update(kind: 'workspace' | 'solution', params: Params<'update_workspace'> & Params<'update_solution'>): Promise<any> {
    const updated = await ok(service, token, `update_${kind}`, params);
    expect(await ok(service, token, `get_${kind}`, { id: params.id })).toEqual(updated);
    return updated;
  }

  describe.each(['workspace', 'solution'] as const)('%s', (kind) => {
    const create = (params: Record<string, unknown> = {}) => (kind === 'workspace' ? newWorkspace(params) : newSolution(params));

    it('requires name and replaces it', async () => {
      const record = await create({ name: 'Before' });
      expectValidation(await callApi(service, token, `update_${kind}`, { id: record.id }), 'params.name');
      const updated = await update(kind, { id: record.id, name: 'After' });
      expect(updated.name).toBe('After');
      expect(updated.id).toBe(record.id);
      expect(updated.organization_id).toBe(record.organization_id);
      expect(updated.created_at).toBe(record.created_at);
    });

    it('keeps description and attributes when they are omitted', async () => {
      const record = await create({ description: 'kept', attributes: { a: 1, nested: { b: 2 } } });
      const updated = await update(kind, { id: record.id, name: 'Renamed' });
      expect(updated.description).toBe('kept');
      expect(updated.attributes).toEqual({ a: 1, nested: { b: 2 } });
    });

    it('replaces description when given, "" included', async () => {
      const record = await create({ description: 'old' });
      expect((await update(kind, { id: record.id, name: 'W', description: 'new\ttext' })).description).toBe('new\ttext');
      expect((await update(kind, { id: record.id, name: 'W', description: '' })).description).toBe('');
      expect((await update(kind, { id: record.id, name: 'W' })).description).toBe('');
    });

    it('merges attributes as a JSON Merge Patch (RFC 7396)', async () => {
      const record = await create({
        attributes: {
          keep: 'same',
          replace: 1,
          remove: 'gone soon',
          list: [1, 2, 3],
          nested: { a: 1, b: { c: 2, d: 3 }, drop: true },
          scalarBecomesObject: 5,
          objectBecomesScalar: { x: 1 },
        },
      });
      const updated = await update(kind, {
        id: record.id,
        name: 'W',
        attributes: {
          replace: 'two',
          remove: null,
          list: [9],
          nested: { b: { d: null, e: 4 }, drop: null, added: 'yes' },
          scalarBecomesObject: { y: 2, z: null },
          objectBecomesScalar: 'flat',
          missingRemoved: null,
          brandNew: { deep: { deeper: true } },
        },
      });
      expect(updated.attributes).toEqual({
        keep: 'same',
        replace: 'two',
        list: [9],
        nested: { a: 1, b: { c: 2, e: 4 }, added: 'yes' },
        scalarBecomesObject: { y: 2 },
        objectBecomesScalar: 'flat',
        brandNew: { deep: { deeper: true } },
      });
    });

    it('treats an empty attributes patch as no change and can remove every key', async () => {
      const record = await create({ attributes: { a: 1, b: { c: 2 } } });
      expect((await update(kind, { id: record.id, name: 'W', attributes: {} })).attributes).toEqual({ a: 1, b: { c: 2 } });
      expect((await update(kind, { id: record.id, name: 'W', attributes: { a: null, b: null } })).attributes).toEqual({});
    });

    it('applies successive patches cumulatively', async () => {
      const record = await create();
      await update(kind, { id: record.id, name: 'W', attributes: { a: 1 } });
      await update(kind, { id: record.id, name: 'W', attributes: { b: { c: 1 } } });
      await update(kind, { id: record.id, name: 'W', attributes: { b: { d: 2 } } });
      const last = await update(kind, { id: record.id, name: 'W', attributes: { a: null, b: { c: null } } });
      expect(last.attributes).toEqual({ b: { d: 2 } });
    });

    it('does not remove keys when the patch value is an empty object', async () => {
      const record = await create({ attributes: { obj: { a: 1 } } });
      expect((await update(kind, { id: record.id, name: 'W', attributes: { obj: {} } })).attributes).toEqual({ obj: { a: 1 } });
    });

    it('never loses concurrent changes: ten updates from two clients adding different keys all survive', async () => {
      const record = await create({ attributes: { base: true } });
      const clients = [await service.token([org], allScopes, 'client-a'), await service.token([org], allScopes, 'client-b')];
      const responses = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          callApi(service, clients[i % 2]!, `update_${kind}`, { id: record.id, name: 'W', attributes: { [`key${i}`]: i } }),
        ),
      );
      for (const response of responses) expectOk(response);
      const final = await ok(service, token, `get_${kind}`, { id: record.id });
      const expected: Record<string, unknown> = { base: true };
      for (let i = 0; i < 10; i++) expected[`key${i}`] = i;
      expect(final.attributes).toEqual(expected);
      // Every update was applied on its own: ten distinct update times, all after creation.
      const times = responses.map((response) => response.body.data.updated_at as string);
      expect(new Set(times).size).toBe(10);
      for (const time of times) expect(time > record.created_at).toBe(true);
      expect(final.updated_at).toBe([...times].sort().at(-1));
      // Each answer reflects at least its own key.
      responses.forEach((response, i) => expect(response.body.data.attributes[`key${i}`]).toBe(i));
    });

    it('never loses a concurrent description change to a concurrent attributes change', async () => {
      const record = await create({ description: 'old', attributes: {} });
      const [first, second] = await Promise.all([
        callApi(service, token, `update_${kind}`, { id: record.id, name: 'W', description: 'new' }),
        callApi(service, token, `update_${kind}`, { id: record.id, name: 'W', attributes: { flag: 1 } }),
      ]);
      expectOk(first);
      expectOk(second);
      const final = await ok(service, token, `get_${kind}`, { id: record.id });
      expect(final.description).toBe('new');
      expect(final.attributes).toEqual({ flag: 1 });
    });
  });

  describe('solution documentation', () => {
    const text = (content: string) => ({ type: 'text' as const, content });

    it('replaces the whole documentation when given and keeps it when omitted', async () => {
      const solution = await newSolution({ documentation: { blocks: [text('one'), text('two'), text('three')] } });
      const kept = await update('solution', { id: solution.id, name: 'S2', description: 'x', attributes: { a: 1 } });
      expect(kept.documentation).toEqual({ blocks: [text('one'), text('two'), text('three')] });
      const replaced = await update('solution', { id: solution.id, name: 'S3', documentation: { blocks: [text('only')] } });
      expect(replaced.documentation).toEqual({ blocks: [text('only')] });
      const emptied = await update('solution', { id: solution.id, name: 'S4', documentation: { blocks: [] } });
      expect(emptied.documentation).toEqual({ blocks: [] });
      expect(emptied.attributes).toEqual({ a: 1 });
      expect(emptied.description).toBe('x');
    });

    it('keeps workspace_id and organization_id through updates', async () => {
      const solution = await newSolution();
      const updated = await update('solution', { id: solution.id, name: 'Moved?', attributes: { workspace_id: 'ws_other' } });
      expect(updated.workspace_id).toBe(workspaceId);
      expect(updated.organization_id).toBe(org);
      expect(updated.attributes).toEqual({ workspace_id: 'ws_other' });
    });
  });
});
