import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { operations } from '../../src/api/operations.js';
import { seededRandom } from '../support/generate.js';
import { startTestService, type TestService } from '../support/service.js';
import { allScopes, jsonHeaders, ok, rawPost } from './helpers.js';

/**
 * Every bad input gets an answer of the contract's table, never a 5xx or a framework's own body:
 * a valid request of each operation, mutated at random (a member replaced by another JSON value,
 * removed, or one added), plus malformed bodies and odd headers, sent by the thousand to the real
 * service. Each answer is checked against the OpenAPI document too (rawPost). The seed is fixed, so
 * a failure repeats; the answers that broke the rule are listed with the request that got them.
 */
const requests = 1500;
const seed = 20261129;

describe('requests mutated at random', () => {
  let service: TestService;
  let token: string;
  const valid: Record<string, Record<string, unknown>> = {};

  beforeAll(async () => {
    service = await startTestService();
    token = await service.token(['org_fuzz', 'org_fuzz_other'], allScopes, 'fuzzer');
    const workspace = await ok(service, token, 'create_workspace', { organization_id: 'org_fuzz', name: 'w', attributes: { a: { b: 1 } } });
    const solution = await ok(service, token, 'create_solution', { workspace_id: workspace.id, name: 's' });
    const webhook = await ok(service, token, 'create_webhook', { organization_id: 'org_fuzz', url: 'https://hooks.example.com/fuzz' });
    const { next: cursor } = await ok(service, token, 'list_changes', {});
    const [ws, sol, wh] = [workspace.id, solution.id, webhook.id];
    Object.assign(valid, {
      get_workspace: { id: ws, as_of: workspace.created_at },
      get_workspace_history: { id: ws, page: 1, size: 10 },
      list_workspaces: { page: 1, size: 10, organization_id: 'org_fuzz' },
      create_workspace: { organization_id: 'org_fuzz', name: 'n', description: 'd', attributes: { k: 'v' } },
      update_workspace: { id: ws, name: 'n', description: 'd', attributes: { k: null } },
      delete_workspace: { id: 'ws_none' },
      get_solution: { id: sol, as_of: solution.created_at },
      get_solution_history: { id: sol, page: 1, size: 10 },
      list_solutions: { page: 1, size: 10, workspace_id: ws, organization_id: 'org_fuzz' },
      create_solution: {
        workspace_id: ws,
        name: 's',
        organization_id: 'org_fuzz',
        documentation: { blocks: [{ type: 'text', content: 'c' }] },
      },
      update_solution: { id: sol, name: 's', description: 'd', documentation: { blocks: [] } },
      delete_solution: { id: 'sol_none' },
      get_workspace_provenance: { id: ws, as_of: workspace.created_at, path: '/attributes' },
      get_solution_provenance: { id: sol, path: '/name' },
      diff_workspace: { id: ws, from: workspace.created_at, to: workspace.created_at },
      diff_solution: { id: sol, from: solution.created_at },
      get_checkpoint: { organization_id: 'org_fuzz', size: 1 },
      get_workspace_proof: { id: ws, size: 1 },
      get_solution_proof: { id: sol },
      get_consistency_proof: { organization_id: 'org_fuzz', from_size: 1, to_size: 2 },
      list_changes: { after: cursor, limit: 5, organization_id: 'org_fuzz', workspace_id: ws, types: ['WorkspaceCreated'], wait_ms: 0 },
      create_webhook: { organization_id: 'org_fuzz', url: 'https://a.example.com/', types: ['WorkspaceCreated'], description: 'd' },
      get_webhook: { id: wh },
      list_webhooks: { page: 1, size: 5, organization_id: 'org_fuzz' },
      update_webhook: { id: wh, url: 'https://b.example.com/', types: ['SolutionCreated'], description: 'd', enabled: true },
      delete_webhook: { id: 'wh_none' },
      rotate_webhook_secret: { id: wh },
      list_webhook_deliveries: { id: wh, page: 1, size: 5, status: 'pending' },
      redeliver_webhook_change: { id: wh, change_id: cursor },
    });
  });
  afterAll(() => service?.close());

  it('has a valid request of every operation to start from', () => {
    expect(Object.keys(valid).sort()).toEqual(Object.keys(operations).sort());
  });

  it('answers each with 200 and data, or an error of the contract with its code, message and request id, never a 5xx', async () => {
    const random = seededRandom(seed);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
    const strings = [
      ...['', ' ', 'a', 'x'.repeat(300), 'x'.repeat(70_000), '\u0000', '\ud800', '😀'.repeat(30), 'ws_', 'sol_', 'wh_', 'org_fuzz_other'],
      ...[
        String(valid.get_workspace!.id),
        String(valid.get_solution!.id),
        String(valid.get_webhook!.id),
        String(valid.list_changes!.after),
      ],
      ...[
        '2026-01-01T00:00:00Z',
        '9999-12-31T23:59:59.999999Z',
        '0000-01-01T00:00:00Z',
        '2026-13-40T25:61:61Z',
        '2026-01-01T00:00:00+23:59',
      ],
      ...[
        '/',
        '~',
        '/attributes/~2',
        '/a/b/c',
        'https://127.0.0.1/',
        'http://x.example.com/',
        'https://[::1]/',
        'https://u:p@x.example.com/',
      ],
      ...['https://169.254.169.254/', 'https://x.example.com:0/', 'WorkspaceCreated', 'pending', '_'.repeat(128), 'A'.repeat(129)],
    ];
    const numbers = [0, -1, 1, 1.5, 2 ** 31, 2 ** 53, 2 ** 53 + 2, -(2 ** 53), 1e308, 1e-300, 100, 101, 1000, 1001, 30_000, 30_001];
    const value = (depth = 0): unknown => {
      const kind = random();
      if (kind < 0.3 || depth >= 4) return pick(strings);
      if (kind < 0.5) return pick(numbers);
      if (kind < 0.55) return pick([true, false, null]);
      if (kind < 0.7) return Array.from({ length: Math.floor(random() * 4) }, () => value(depth + 1));
      const keys = ['a', 'type', 'content', 'blocks', '__proto__', 'constructor', '', 'k'];
      return Object.fromEntries(Array.from({ length: Math.floor(random() * 4) }, () => [pick(keys), value(depth + 1)]));
    };
    const malformed = [
      ...['', '{', 'null', '[]', '"x"', '{"query":1}', '{"query":"get_workspace"}', '{"query":"get_workspace","params":[]}'],
      ...['{"query":"get_workspace","params":{},"extra":1}', '{"query":"get_workspace","params":{"id":1e999}}', '\uFEFF{}'],
      ...[
        '{"query":"get_workspace","params":{"id":"ws_a","id":"ws_b"}}',
        '{"query":"create_workspace","params":{"organization_id":"org_fuzz","name":"\\ud800"}}',
      ],
    ];
    const request = (): { body: string; headers: Record<string, string> } => {
      const headers = jsonHeaders(token);
      if (random() < 0.1) headers['idempotency-key'] = pick(['k1', 'k2', ' ', 'x'.repeat(300), 'é']);
      if (random() < 0.03) headers['content-type'] = pick(['text/plain', 'application/json; charset=latin1', 'application/jsonx']);
      if (random() < 0.08) return { body: pick(malformed), headers };
      const query = random() < 0.05 ? pick(strings) : pick(Object.keys(valid));
      const params: Record<string, unknown> = { ...valid[query] };
      for (let mutations = 1 + Math.floor(random() * 3); mutations > 0; mutations--) {
        const keys = Object.keys(params);
        const how = random();
        if (how < 0.6 && keys.length > 0) params[pick(keys)] = value();
        else if (how < 0.8 && keys.length > 0) delete params[pick(keys)];
        else params[pick(['unknown', 'page', 'size', 'as_of', 'limit', 'after', 'types'])] = value();
      }
      // A valid long poll holds its sender up to 30 s whenever no change comes: long polls are
      // tested in change-feed.e2e; here, one that is valid asks for no wait.
      const waitMs = params.wait_ms;
      if (query === 'list_changes' && typeof waitMs === 'number' && Number.isInteger(waitMs) && waitMs > 0 && waitMs <= 30_000)
        params.wait_ms = 0;
      return { body: JSON.stringify({ query, params }), headers };
    };
    const planned = Array.from({ length: requests }, request);

    const broken: string[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: 6 }, async () => {
        for (let index = next++; index < planned.length; index = next++) {
          const { body, headers } = planned[index]!;
          const answer = await rawPost(service, body, headers);
          const error = (answer.body as { error?: { code?: unknown; message?: unknown; request_id?: unknown } } | undefined)?.error;
          const kept =
            answer.status === 200
              ? typeof answer.body === 'object' && answer.body !== null && 'data' in answer.body
              : answer.status < 500 &&
                typeof error?.code === 'string' &&
                typeof error.message === 'string' &&
                typeof error.request_id === 'string';
          if (!kept) broken.push(`${answer.status} ${answer.text.slice(0, 200)} <- ${JSON.stringify(headers)} ${body.slice(0, 300)}`);
        }
      }),
    );
    expect(broken.slice(0, 10), `${broken.length} of ${requests} answers broke the rule`).toEqual([]);
  });
});
