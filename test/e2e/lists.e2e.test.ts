import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { envelopeWithRawParams, expectValidation, jsonHeaders, ok, rawPost, sleep } from './helpers.js';

/** Contract §4.3 and §9: order, paging, bounds, full items, filters, stability under concurrent creation. */
describe('lists', () => {
  let service: TestService;
  let token: string;
  const org = 'org_lists';
  const otherOrg = 'org_lists_other';
  let ordered: any[]; // workspaces of `org`, in creation order
  let parent: any;
  let solutions: any[];

  const byCreation = (a: any, b: any) =>
    a.created_at < b.created_at ? -1 : a.created_at > b.created_at ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0;

  beforeAll(async () => {
    service = await startTestService();
    token = await service.token([org, otherOrg]);
    ordered = [];
    for (let i = 0; i < 7; i++) {
      ordered.push(await ok(service, token, 'create_workspace', { organization_id: org, name: `W${i}`, attributes: { i } }));
    }
    await ok(service, token, 'create_workspace', { organization_id: otherOrg, name: 'Other' });
    parent = ordered[0];
    solutions = [];
    for (let i = 0; i < 4; i++) {
      solutions.push(
        await ok(service, token, 'create_solution', {
          workspace_id: parent.id,
          name: `S${i}`,
          attributes: { i },
          documentation: { blocks: [{ type: 'text', content: `doc ${i}` }] },
        }),
      );
    }
    solutions.push(await ok(service, token, 'create_solution', { workspace_id: ordered[1].id, name: 'Elsewhere' }));
  });
  afterAll(() => service?.close());

  describe('order and paging', () => {
    it('lists workspaces in creation order, as full Workspace Responses equal to get_workspace', async () => {
      const page = await ok(service, token, 'list_workspaces', { page: 1, size: 100, organization_id: org });
      expect(page).toEqual({ total: 7, page: 1, size: 100, items: ordered });
      for (const item of page.items) expect(await ok(service, token, 'get_workspace', { id: item.id })).toEqual(item);
    });

    it('lists solutions in creation order, with attributes and documentation', async () => {
      const page = await ok(service, token, 'list_solutions', { page: 1, size: 100 });
      expect(page).toEqual({ total: 5, page: 1, size: 100, items: solutions });
      expect(page.items[2]!.documentation).toEqual({ blocks: [{ type: 'text', content: 'doc 2' }] });
      expect(page.items[2]!.attributes).toEqual({ i: 2 });
    });

    it('orders concurrently created records by created_at, then id', async () => {
      const token2 = await service.token(['org_lists_burst']);
      await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          ok(service, token2, 'create_workspace', { organization_id: 'org_lists_burst', name: `B${i}` }),
        ),
      );
      const page = await ok(service, token2, 'list_workspaces', { page: 1, size: 100 });
      expect(page.total).toBe(12);
      expect(page.items).toEqual([...page.items].sort(byCreation));
    });

    it('splits into pages that echo page and size, with the true total everywhere', async () => {
      const pages = [];
      for (let number = 1; number <= 4; number++) {
        pages.push(await ok(service, token, 'list_workspaces', { page: number, size: 3, organization_id: org }));
      }
      expect(pages.map((p) => [p.page, p.size, p.total, p.items.length])).toEqual([
        [1, 3, 7, 3],
        [2, 3, 7, 3],
        [3, 3, 7, 1],
        [4, 3, 7, 0],
      ]);
      expect(pages.flatMap((p) => p.items)).toEqual(ordered);
    });

    it('answers a page far past the end with no items and the true total', async () => {
      expect(await ok(service, token, 'list_workspaces', { page: 1000, size: 100, organization_id: org })).toEqual({
        total: 7,
        page: 1000,
        size: 100,
        items: [],
      });
      expect(await ok(service, token, 'list_solutions', { page: Number.MAX_SAFE_INTEGER, size: 100 })).toEqual({
        total: 5,
        page: Number.MAX_SAFE_INTEGER,
        size: 100,
        items: [],
      });
    });

    it('accepts size 1 and size 100', async () => {
      const one = await ok(service, token, 'list_workspaces', { page: 2, size: 1, organization_id: org });
      expect(one.items).toEqual([ordered[1]]);
      expect(one.total).toBe(7);
      const hundred = await ok(service, token, 'list_workspaces', { page: 1, size: 100 });
      expect(hundred.size).toBe(100);
      expect(hundred.total).toBe(8);
    });

    it('pages through more than 100 records without gaps or repeats', async () => {
      const bigToken = await service.token(['org_lists_big']);
      const created: string[] = [];
      for (let batch = 0; batch < 11; batch++) {
        const ids = await Promise.all(
          Array.from({ length: 10 }, (_, i) =>
            ok(service, bigToken, 'create_workspace', { organization_id: 'org_lists_big', name: `N${batch}-${i}` }).then((w) => w.id),
          ),
        );
        created.push(...ids);
      }
      const first = await ok(service, bigToken, 'list_workspaces', { page: 1, size: 100 });
      const second = await ok(service, bigToken, 'list_workspaces', { page: 2, size: 100 });
      expect(first.total).toBe(110);
      expect(second.total).toBe(110);
      expect(first.items).toHaveLength(100);
      expect(second.items).toHaveLength(10);
      const listed = [...first.items, ...second.items];
      expect(listed).toEqual([...listed].sort(byCreation));
      expect(new Set(listed.map((w: any) => w.id))).toEqual(new Set(created));
    });
  });

  describe('page and size bounds', () => {
    it.each([
      ['page 0', { page: 0, size: 10 }, 'params.page'],
      ['page -1', { page: -1, size: 10 }, 'params.page'],
      ['page as the string "1"', { page: '1', size: 10 }, 'params.page'],
      ['page 1.5', { page: 1.5, size: 10 }, 'params.page'],
      ['page null', { page: null, size: 10 }, 'params.page'],
      ['page true', { page: true, size: 10 }, 'params.page'],
      ['page [1]', { page: [1], size: 10 }, 'params.page'],
      ['page beyond 2^53', { page: 2 ** 53, size: 10 }, 'params.page'],
      ['size 0', { page: 1, size: 0 }, 'params.size'],
      ['size 101', { page: 1, size: 101 }, 'params.size'],
      ['size -5', { page: 1, size: -5 }, 'params.size'],
      ['size as the string "1"', { page: 1, size: '1' }, 'params.size'],
      ['size 1.5', { page: 1, size: 1.5 }, 'params.size'],
      ['size 99.99', { page: 1, size: 99.99 }, 'params.size'],
      ['size missing', { page: 1 }, 'params.size'],
      ['page missing', { size: 1 }, 'params.page'],
    ])('rejects %s for both lists', async (_what, params, path) => {
      expectValidation(await callApi(service, token, 'list_workspaces', params), path);
      expectValidation(await callApi(service, token, 'list_solutions', params), path);
    });

    it.each([
      ['an exponent beyond the number range', '{"page":1e400,"size":10}', 'params.page'],
      ['a huge exponent size', '{"page":1,"size":1e3}', 'params.size'],
      ['a negative zero page', '{"page":-0,"size":10}', 'params.page'],
    ])('rejects %s', async (_what, rawParams, path) => {
      const response = await rawPost(service, envelopeWithRawParams('list_workspaces', rawParams), jsonHeaders(token));
      expectValidation(response, path);
    });
  });

  describe('filters', () => {
    it('list_workspaces filters by organization_id', async () => {
      const other = await ok(service, token, 'list_workspaces', { page: 1, size: 100, organization_id: otherOrg });
      expect(other.total).toBe(1);
      expect(other.items.map((w: any) => w.name)).toEqual(['Other']);
      const unknown = await ok(service, token, 'list_workspaces', { page: 1, size: 100, organization_id: 'org_nothing_here' });
      expect(unknown).toEqual({ total: 0, page: 1, size: 100, items: [] });
    });

    it('list_solutions filters by workspace_id, organization_id, or both', async () => {
      const inParent = await ok(service, token, 'list_solutions', { page: 1, size: 100, workspace_id: parent.id });
      expect(inParent).toEqual({ total: 4, page: 1, size: 100, items: solutions.slice(0, 4) });
      const inSecond = await ok(service, token, 'list_solutions', { page: 1, size: 100, workspace_id: ordered[1].id });
      expect(inSecond.items.map((s: any) => s.name)).toEqual(['Elsewhere']);
      expect(inSecond.total).toBe(1);
      const byOrg = await ok(service, token, 'list_solutions', { page: 1, size: 100, organization_id: org });
      expect(byOrg.total).toBe(5);
      const both = await ok(service, token, 'list_solutions', { page: 2, size: 3, workspace_id: parent.id, organization_id: org });
      expect(both).toEqual({ total: 4, page: 2, size: 3, items: solutions.slice(3, 4) });
      const mismatched = await ok(service, token, 'list_solutions', {
        page: 1,
        size: 100,
        workspace_id: parent.id,
        organization_id: otherOrg,
      });
      expect(mismatched).toEqual({ total: 0, page: 1, size: 100, items: [] });
      const empty = await ok(service, token, 'list_solutions', { page: 1, size: 100, workspace_id: ordered[6].id });
      expect(empty).toEqual({ total: 0, page: 1, size: 100, items: [] });
      const missing = await ok(service, token, 'list_solutions', { page: 1, size: 100, workspace_id: 'ws_missing' });
      expect(missing).toEqual({ total: 0, page: 1, size: 100, items: [] });
      const otherOrgSolutions = await ok(service, token, 'list_solutions', { page: 1, size: 100, organization_id: otherOrg });
      expect(otherOrgSolutions).toEqual({ total: 0, page: 1, size: 100, items: [] });
    });
  });

  describe('stability while others create', () => {
    it('never repeats or skips an older record while records are being created', async () => {
      const pagerToken = await service.token(['org_lists_live']);
      const older: string[] = [];
      for (let i = 0; i < 10; i++) {
        older.push((await ok(service, pagerToken, 'create_workspace', { organization_id: 'org_lists_live', name: `Old${i}` })).id);
      }
      let creating = true;
      const acknowledged: string[] = [];
      const creator = (async () => {
        while (creating) {
          acknowledged.push((await ok(service, pagerToken, 'create_workspace', { organization_id: 'org_lists_live', name: 'New' })).id);
        }
      })();
      const seen: any[] = [];
      try {
        for (let number = 1; number <= 50; number++) {
          const page = await ok(service, pagerToken, 'list_workspaces', { page: number, size: 3 });
          seen.push(...page.items);
          if (page.items.length < 3) break;
          await sleep(5);
        }
      } finally {
        creating = false;
        await creator;
      }
      const ids = seen.map((w) => w.id);
      expect(new Set(ids).size).toBe(ids.length); // no repeats at all
      expect(ids.slice(0, older.length)).toEqual(older); // every older record, once, in order
      expect(seen).toEqual([...seen].sort(byCreation));
      expect(acknowledged.length).toBeGreaterThan(0);
      // Every record acknowledged before paging ended sorts after the older ones.
      const all: string[] = [];
      for (let number = 1; ; number++) {
        const page = await ok(service, pagerToken, 'list_workspaces', { page: number, size: 100 });
        all.push(...page.items.map((w: any) => w.id));
        if (page.items.length < 100) break;
      }
      expect(all).toEqual([...older, ...acknowledged]);
    });
  });
});
