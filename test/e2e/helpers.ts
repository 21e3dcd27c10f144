import { expect } from 'vitest';
import { fromMicros, toMicros } from '../../src/domain/timestamp.js';
import { createClient, type Client, type OperationName, type Params, type Result } from '../../src/client/index.js';
import { runCli } from '../int/cli-run.js';
import { eventStoreUrlFor, testEventStore } from '../support/event-store.js';
import { conformingFetch } from '../support/openapi-conformance.js';
import { callApi, type ApiResponse, type TestService } from '../support/service.js';

/** Contract §8: `YYYY-MM-DDTHH:MM:SS.ffffffZ`. */
export const timestampPattern = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;

/** The instant one microsecond before `timestamp`: the last one at which a change had not happened yet. */
export const before = (timestamp: string) => fromMicros(toMicros(timestamp) - 1n);

/** Generated ids (contract §4): the prefix and 21 nanoid characters. */
export const generatedId = (prefix: 'ws_' | 'sol_') => new RegExp(`^${prefix}[A-Za-z0-9_-]{21}$`);

export const allScopes = 'workspaces:read workspaces:write solutions:read solutions:write webhooks:manage';

/** POST /api with a raw body string, so tests can send what JSON.stringify never produces. */
export async function rawPost(
  service: Pick<TestService, 'url'>,
  body: string | Uint8Array | undefined,
  headers: Record<string, string> = {},
  path = '/api',
  method = 'POST',
): Promise<ApiResponse & { text: string }> {
  const response = await conformingFetch(`${service.url}${path}`, { method, headers, body });
  const text = await response.text();
  let parsed: unknown;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  return { status: response.status, headers: response.headers, body: parsed, text };
}

export const jsonHeaders = (token?: string): Record<string, string> => ({
  'content-type': 'application/json',
  ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
});

/** Substrings that would betray internals: stack frames, SQL, driver or runtime error text. */
const leaks = [
  /\bat .+:\d+:\d+/,
  /\bSELECT\b/i,
  /\bINSERT\b/i,
  /\brelation\b/i,
  /\bpg\b/,
  /postgres/i,
  /TypeError|RangeError|SyntaxError|ZodError/,
  /node_modules/,
  /\.ts\b/,
  /stack/i,
];

/**
 * Asserts the contract's error body (§2) exactly: nothing but `code`, `message`, `request_id` and
 * optionally `details`; the request id equal to the response's `x-request-id`; no internals.
 */
export function expectError(response: ApiResponse, status: number, code: string): void {
  expect({ status: response.status, code: response.body?.error?.code }).toEqual({ status, code });
  expect(Object.keys(response.body).sort()).toEqual(['error']);
  const error = response.body.error;
  for (const key of Object.keys(error)) expect(['code', 'message', 'request_id', 'details']).toContain(key);
  expect(typeof error.message).toBe('string');
  expect(error.message.length).toBeGreaterThan(0);
  expect(typeof error.request_id).toBe('string');
  expect(error.request_id.length).toBeGreaterThan(0);
  expect(response.headers.get('x-request-id')).toBe(error.request_id);
  if (error.details !== undefined) {
    expect(Array.isArray(error.details)).toBe(true);
    for (const detail of error.details) {
      expect(Object.keys(detail).sort()).toEqual(['message', 'path']);
      expect(typeof detail.path).toBe('string');
      expect(typeof detail.message).toBe('string');
    }
  }
  const serialized = JSON.stringify(response.body);
  for (const leak of leaks) expect(serialized).not.toMatch(leak);
  if (status === 401) expect(response.headers.get('www-authenticate')).toBe('Bearer');
}

/** A 400 `validation_error` whose details name `path` (e.g. "params.name"). */
export function expectValidation(response: ApiResponse, path: string): void {
  expectError(response, 400, 'validation_error');
  const paths = (response.body.error.details ?? []).map((detail: { path: string }) => detail.path);
  expect(paths, JSON.stringify(response.body.error.details)).toContain(path);
}

/** A 400 `validation_error` with a detail at `prefix` or below it (e.g. "params.attributes.a.b"). */
export function expectValidationUnder(response: ApiResponse, prefix: string): void {
  expectError(response, 400, 'validation_error');
  const paths: string[] = (response.body.error.details ?? []).map((detail: { path: string }) => detail.path);
  expect(
    paths.some((path) => path === prefix || path.startsWith(`${prefix}.`)),
    JSON.stringify(response.body.error.details),
  ).toBe(true);
}

export function expectOk(response: ApiResponse): any {
  expect(response.status, JSON.stringify(response.body)).toBe(200);
  expect(Object.keys(response.body)).toEqual(['data']);
  return response.body.data;
}

/**
 * The typed client as the suite's callers use it, every answer checked against the OpenAPI
 * document. It does not retry: a test sees every failure as it happened.
 */
export const clientFor = (service: Pick<TestService, 'url'>, token: string): Client =>
  createClient({ baseUrl: service.url, token, retries: 0, fetch: conformingFetch });

/** Calls an operation that must succeed, through the typed client, and returns its `data`. */
export async function ok<O extends OperationName>(
  service: Pick<TestService, 'url'>,
  token: string,
  query: O,
  params: Params<O>,
): Promise<Result<O>> {
  return clientFor(service, token).call(query, params);
}

/** Serializes `{"query": ..., "params": <raw>}` with params given as raw JSON text. */
export const envelopeWithRawParams = (query: string, rawParams: string) => `{"query":${JSON.stringify(query)},"params":${rawParams}}`;

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The organization's latest signed checkpoint once it covers at least `size` events (contract §16). */
export async function checkpointCovering(
  service: Pick<TestService, 'url'>,
  token: string,
  organizationId: string,
  size: number,
): Promise<Result<'get_checkpoint'>> {
  for (let attempt = 0; attempt < 400; attempt++) {
    const answer = await callApi(service, token, 'get_checkpoint', { organization_id: organizationId });
    if (answer.status === 200 && answer.body.data.size >= size) return answer.body.data;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`no checkpoint of ${organizationId} covers ${size} events`);
}

/**
 * Whether `npm run projections:verify` can check a test file's records: not on a real EventStoreDB
 * server, where the tool folds the whole log, which on a shared server holds other test files'
 * records too. Tests that use it say so in their names, so a run shows what each mode checked.
 */
export const projectionsVerifiable = testEventStore !== 'eventstoredb-server';
/** What a test name adds where `projectionsVerifiable` is false. */
export const unverifiableNote = projectionsVerifiable ? '' : ' (the tools that fold the whole log not run: the real server is shared)';

/** `npm run projections:verify` against the service's stores. */
export const verifyProjections = async (service: Pick<TestService, 'databaseUrl'>) =>
  runCli('src/cli/verify.ts', [], service.databaseUrl, { EVENTSTORE_URL: (await eventStoreUrlFor(service.databaseUrl)) ?? '' });
