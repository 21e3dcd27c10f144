import { mkdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openApiDocument } from '../../src/api/openapi.js';
import { operations } from '../../src/api/operations.js';
import { launchChromium } from '../support/browser.js';
import { schemaRefFor } from '../support/openapi-conformance.js';
import { startTestService, type TestService } from '../support/service.js';
import { allScopes, checkpointCovering, expectError, jsonHeaders, ok, rawPost } from './helpers.js';

const screenshots = path.resolve('test-results');
const { version } = JSON.parse(readFileSync('package.json', 'utf8')) as { version: string };

describe('the API document and the docs page', () => {
  let service: TestService;
  beforeAll(async () => {
    service = await startTestService({ env: { AUDIT_CHECKPOINT_INTERVAL_MS: '100' } });
  });
  afterAll(() => service?.close());

  it('serves the OpenAPI document without a token, the one built from the schemas', async () => {
    const response = await fetch(`${service.url}/openapi.json`);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await response.json()).toEqual(JSON.parse(JSON.stringify(openApiDocument(version))));
  });

  it('answers the documentation endpoints with a request id, and an unknown file under /docs with the 404 error body', async () => {
    for (const path of ['/openapi.json', '/docs', '/docs/init.js', '/docs/swagger-ui.css']) {
      const response = await fetch(`${service.url}${path}`, { headers: { 'x-request-id': 'docs-check-1' } });
      expect([path, response.status, response.headers.get('x-request-id')]).toEqual([path, 200, 'docs-check-1']);
    }
    for (const path of ['/docs/swagger-ui.js.map', '/docs/../package.json']) {
      const response = await rawPost(service, undefined, {}, path, 'GET');
      expectError(response, 404, 'not_found');
    }
  });

  it('redirects /docs/ to the page; any other path with a trailing slash is unknown (404)', async () => {
    for (const path of ['/docs/', '/docs/?tab=x']) {
      const response = await fetch(`${service.url}${path}`, { redirect: 'manual', headers: { 'x-request-id': 'docs-slash-1' } });
      expect([path, response.status, response.headers.get('location'), response.headers.get('x-request-id')]).toEqual([
        path,
        302,
        '/docs',
        'docs-slash-1',
      ]);
    }
    const followed = await fetch(`${service.url}/docs/`);
    expect([followed.status, followed.url]).toEqual([200, `${service.url}/docs`]);
    for (const path of ['/docs//', '/docs/init.js/', '/openapi.json/', '/healthz/', '/readyz/']) {
      const response = await rawPost(service, undefined, {}, path, 'GET');
      expectError(response, 404, 'not_found');
    }
  });

  it('describes every answer of every operation: successes and each error kind, as checked by Ajv', async () => {
    const org = 'org_document';
    const token = await service.token([org], allScopes);
    const scopeless = await service.token([org], '');
    const workspace = await ok(service, token, 'create_workspace', { organization_id: org, name: 'Doc' });
    const solution = await ok(service, token, 'create_solution', { workspace_id: workspace.id, name: 'Doc' });
    const signed = await checkpointCovering(service, token, org, 2);
    // Only solution deletions are delivered to it: the tests' own address, refused at connection (not public).
    const hook = { organization_id: org, url: 'https://127.0.0.2.nip.io/hook', types: ['SolutionDeleted' as const] };
    const webhook = await ok(service, token, 'create_webhook', hook);
    // A change it was due, to redeliver: one of its types, committed after its creation.
    const deleted = await ok(service, token, 'create_solution', { workspace_id: workspace.id, name: 'Deleted' });
    await ok(service, token, 'delete_solution', { id: deleted.id });
    const change = (await ok(service, token, 'list_changes', { organization_id: org, types: ['SolutionDeleted'] })).items[0]!;
    const valid: Record<string, Record<string, unknown>> = {
      get_workspace: { id: workspace.id },
      get_workspace_history: { id: workspace.id, page: 1, size: 10 },
      list_workspaces: { page: 1, size: 10 },
      create_workspace: { organization_id: org, name: 'Doc 2' },
      update_workspace: { id: workspace.id, name: 'Doc 3' },
      get_solution: { id: solution.id },
      get_solution_history: { id: solution.id, page: 1, size: 10 },
      list_solutions: { page: 1, size: 10 },
      create_solution: { workspace_id: workspace.id, name: 'Doc 2' },
      update_solution: { id: solution.id, name: 'Doc 3' },
      get_workspace_provenance: { id: workspace.id },
      get_solution_provenance: { id: solution.id },
      diff_workspace: { id: workspace.id, from: workspace.created_at },
      diff_solution: { id: solution.id, from: '2000-01-01T00:00:00Z' },
      get_checkpoint: { organization_id: org },
      get_workspace_proof: { id: workspace.id },
      get_solution_proof: { id: solution.id },
      get_consistency_proof: { organization_id: org, from_size: signed.size, to_size: signed.size },
      list_changes: { limit: 10 },
      create_webhook: hook,
      get_webhook: { id: webhook.id },
      list_webhooks: { page: 1, size: 10 },
      update_webhook: { id: webhook.id, description: 'Doc' },
      rotate_webhook_secret: { id: webhook.id },
      list_webhook_deliveries: { id: webhook.id, page: 1, size: 10 },
      redeliver_webhook_change: { id: webhook.id, change_id: change.id },
      // Last, so the records above stay for the others.
      delete_solution: { id: solution.id },
      delete_workspace: { id: workspace.id },
      delete_webhook: { id: webhook.id },
    };
    const missing: Record<string, Record<string, unknown>> = {
      get_workspace: { id: 'ws_missing' },
      get_workspace_history: { id: 'ws_missing', page: 1, size: 10 },
      update_workspace: { id: 'ws_missing', name: 'x' },
      delete_workspace: { id: 'ws_missing' },
      get_solution: { id: 'sol_missing' },
      get_solution_history: { id: 'sol_missing', page: 1, size: 10 },
      create_solution: { workspace_id: 'ws_missing', name: 'x' },
      update_solution: { id: 'sol_missing', name: 'x' },
      delete_solution: { id: 'sol_missing' },
      get_workspace_provenance: { id: 'ws_missing' },
      get_solution_provenance: { id: 'sol_missing' },
      diff_workspace: { id: 'ws_missing', from: '2000-01-01T00:00:00Z' },
      diff_solution: { id: 'sol_missing', from: '2000-01-01T00:00:00Z' },
      get_checkpoint: { organization_id: 'org_elsewhere' },
      get_workspace_proof: { id: 'ws_missing' },
      get_solution_proof: { id: 'sol_missing' },
      get_consistency_proof: { organization_id: org, from_size: 1, to_size: 999_999 },
      get_webhook: { id: 'wh_missing' },
      update_webhook: { id: 'wh_missing', description: 'x' },
      delete_webhook: { id: 'wh_missing' },
      rotate_webhook_secret: { id: 'wh_missing' },
      list_webhook_deliveries: { id: 'wh_missing', page: 1, size: 10 },
      redeliver_webhook_change: { id: 'wh_missing', change_id: 'AAAAAAAAAAAAAAAAAAAAAA' },
    };
    const send = (query: string, params: unknown, headers: Record<string, string> = jsonHeaders(token), extra = {}) =>
      rawPost(service, JSON.stringify({ query, params, ...extra }), headers);
    expect(Object.keys(valid).sort()).toEqual(Object.keys(operations).sort());

    // rawPost checks each answer against the document (test/support/openapi-conformance.ts).
    for (const [query, params] of Object.entries(valid)) {
      const answers = [
        await send(query, params, jsonHeaders(undefined)),
        await send(query, params, jsonHeaders(scopeless)),
        await send(query, { ...params, unknown_parameter: 1 }),
        await send(query, params, jsonHeaders(token), { extra: true }),
        await send(query, params, { ...jsonHeaders(token), 'content-type': 'text/plain' }),
        await rawPost(service, JSON.stringify({ query, params: { blob: 'x'.repeat(1_100_000) } }), jsonHeaders(token)),
        ...(missing[query] ? [await send(query, missing[query])] : []),
      ];
      if (operations[query as keyof typeof operations].kind === 'command') {
        const headers = { ...jsonHeaders(token), 'idempotency-key': `document-${query}` };
        answers.push(await send(query, params, headers));
        const different =
          'name' in params
            ? { ...params, name: 'Another' }
            : query === 'create_webhook' || query === 'update_webhook'
              ? { ...params, description: 'Another' }
              : { ...params, id: `${String(params.id)}_other` };
        answers.push(await send(query, different, headers));
      } else {
        answers.push(await send(query, params));
      }
      const statuses = answers.map((answer) => answer.status);
      expect(statuses.slice(0, 6), query).toEqual([401, 403, 400, 400, 415, 413]);
      if (missing[query]) expect(statuses[6], query).toBe(404);
      expect(statuses.at(-1), query).toBe(operations[query as keyof typeof operations].kind === 'command' ? 422 : 200);
      for (const answer of answers) expect(() => schemaRefFor(query, answer.status)).not.toThrow();
    }
    const unknown = await send('no_such_operation', {});
    expect(unknown.body.error.code).toBe('unknown_operation');
  });

  describe('in a real headless browser', () => {
    let browser: Browser;
    beforeAll(async () => {
      browser = await launchChromium();
    });
    afterAll(() => browser?.close());

    it('renders every operation at /docs from the service alone, and takes a screenshot', async () => {
      const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      const elsewhere: string[] = [];
      page.on('request', (request) => {
        if (!request.url().startsWith(service.url) && !request.url().startsWith('data:')) elsewhere.push(request.url());
      });
      const failed: string[] = [];
      page.on('requestfailed', (request) => failed.push(request.url()));
      const errors: string[] = [];
      page.on('pageerror', (error) => errors.push(error.message));

      const response = await page.goto(`${service.url}/docs`);
      expect(response?.status()).toBe(200);
      await page.locator('.opblock').first().waitFor({ timeout: 30_000 });
      const listed = await page.locator('.opblock-summary-path').allInnerTexts();
      const names = listed.map((text) => text.replace(/\u200b/g, '').trim());
      for (const name of Object.keys(operations)) expect(names).toContain(`/api#${name}`);
      expect(await page.locator('.opblock-post').count()).toBe(Object.keys(operations).length);

      mkdirSync(screenshots, { recursive: true });
      const file = path.join(screenshots, `docs-page-${process.env.TEST_EVENT_STORE ?? 'postgres'}.png`);
      await page.screenshot({ path: file, fullPage: true });
      expect(statSync(file).size).toBeGreaterThan(10_000);
      expect({ elsewhere, failed, errors }).toEqual({ elsewhere: [], failed: [], errors: [] });
      await page.close();
    });
  });
});
