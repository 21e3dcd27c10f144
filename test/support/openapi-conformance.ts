import { Ajv2020 } from 'ajv/dist/2020.js';
import { openApiDocument } from '../../src/api/openapi.js';

/**
 * Every answer the end-to-end suite receives from `POST /api` is checked against the OpenAPI
 * document with an independent JSON Schema validator (Ajv, draft 2020-12, the dialect of
 * OpenAPI 3.1): the operation's own schema for its status, or the generic error body when the
 * request named no operation. A status the document does not list for that operation fails too,
 * and so does a header of the service's (a replay, a projection behind, a wait) it lists not.
 */

const document = openApiDocument('conformance');
const base = 'https://conformance.test/openapi.json';
const ajv = new Ajv2020({ allErrors: true, strict: false });
ajv.addSchema({ $id: base, components: document.components });

type ResponseObject = {
  headers?: Record<string, unknown>;
  content?: { 'application/json'?: { schema: { $ref: string } }; 'text/event-stream'?: unknown };
};
const paths = document.paths as Record<string, { post?: { responses: Record<string, ResponseObject> } }>;

export function schemaRefFor(query: string | undefined, status: number): string {
  const responses = query === undefined ? undefined : paths[`/api#${query}`]?.post?.responses;
  if (responses === undefined) {
    if (status === 200) throw new Error(`200 for a request naming no documented operation (${String(query)})`);
    return '#/components/schemas/Error';
  }
  const described = responses[String(status)];
  if (described === undefined) throw new Error(`the document lists no ${status} answer for ${query}`);
  return described.content!['application/json']!.schema.$ref;
}

/** Throws, naming every mismatch, when `body` is not what the document says `query` answers with `status`. */
export function assertConforms(query: string | undefined, status: number, body: unknown): void {
  const ref = schemaRefFor(query, status);
  const validate = ajv.getSchema(`${base}${ref}`);
  if (!validate) throw new Error(`no schema ${ref} in the document`);
  if (!validate(body)) {
    throw new Error(
      `the ${status} answer to ${String(query)} does not match ${ref}: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(body)}`,
    );
  }
}

/** Throws, naming every mismatch, when `body` is not what the document says `GET path` (an operational endpoint) answers with `status`. */
export function assertConformsAt(path: string, status: number, body: unknown): void {
  const described = (
    document.paths as Record<string, { get?: { responses: Record<string, { content?: { 'application/json'?: { schema: object } } }> } }>
  )[path]?.get?.responses[String(status)];
  const schema = described?.content?.['application/json']?.schema;
  if (!schema) throw new Error(`the document lists no ${status} answer for GET ${path}`);
  const validate = ajv.compile(schema);
  if (!validate(body))
    throw new Error(`the ${status} answer to GET ${path} does not match: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(body)}`);
}

/** The headers the service itself sets on some answers: each one sent must be in the document for that status. */
const serviceHeaders = ['idempotent-replayed', 'x-projection-behind', 'retry-after', 'www-authenticate'];

/** Throws when an answer carries one of the service's headers that the document does not declare for its status. */
export function assertHeadersDeclared(query: string | undefined, status: number, headers: Headers): void {
  const described = query === undefined ? undefined : paths[`/api#${query}`]?.post?.responses[String(status)];
  if (described === undefined) return;
  const declared = new Set(Object.keys(described.headers ?? {}).map((name) => name.toLowerCase()));
  const undeclared = serviceHeaders.filter((name) => headers.has(name) && !declared.has(name));
  if (undeclared.length > 0)
    throw new Error(`the ${status} answer to ${query} carries ${undeclared.join(', ')}, which the document does not declare`);
}

/** The operation a request body names, when it is an envelope at all. */
function queryOf(body: unknown): string | undefined {
  if (typeof body !== 'string') return undefined;
  try {
    const parsed = JSON.parse(body) as { query?: unknown };
    return typeof parsed.query === 'string' ? parsed.query : undefined;
  } catch {
    return undefined;
  }
}

/** `fetch`, checking each `/api` answer against the document before handing it on. */
export const conformingFetch: typeof fetch = async (input, init) => {
  const response = await fetch(input, init);
  const url = new URL(input instanceof Request ? input.url : input.toString());
  if (url.pathname !== '/api' || (init?.method ?? 'GET') !== 'POST') return response;
  // A stream (list_changes' Server-Sent Events) is never read to its end here: the document must list it.
  if (response.headers.get('content-type')?.startsWith('text/event-stream')) {
    const query = queryOf(init?.body);
    const content = query === undefined ? undefined : paths[`/api#${query}`]?.post?.responses[String(response.status)]?.content;
    if (!content?.['text/event-stream']) throw new Error(`the document lists no event stream answer for ${String(query)}`);
    return response;
  }
  assertHeadersDeclared(queryOf(init?.body), response.status, response.headers);
  const text = await response.clone().text();
  // An answer the HTTP layer cut short (a connection closed mid-body) has no document to match.
  if (text.length > 0) assertConforms(queryOf(init?.body), response.status, JSON.parse(text));
  return response;
};
