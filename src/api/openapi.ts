import { z } from 'zod';
import type { ErrorCode } from '../errors.js';
import { scopes } from './auth.js';
import { statusOf } from './errors.js';
import { operations, scopesOf } from './operations.js';
import {
  errorBodySchema,
  idempotencyKeyPattern,
  paramsSchemas,
  requestIdPattern,
  resultSchemas,
  solutionHistoryItemSchema,
  solutionSchema,
  workspaceHistoryItemSchema,
  workspaceSchema,
  type OperationName,
} from './schemas.js';

/**
 * The OpenAPI 3.1 document, built from the zod schemas that validate requests and type the
 * handlers' results, and from the operation table: it cannot disagree with the server.
 *
 * Every operation is `POST /api`; OpenAPI allows one operation per path and method, so each is a
 * path item of its own, `/api#<operation>`. The fragment is never sent (a URL's fragment stays
 * with the client), so a call to any of them reaches `POST /api`, while generators and renderers
 * see one operation with its own request body (`query` a constant, `params` that operation's) and
 * its own result: `openapi-typescript` yields `operations["create_workspace"]` with exact types.
 */

const operationNames = Object.keys(operations) as OperationName[];

const pascal = (name: string) => name.replace(/(^|_)([a-z])/g, (_, _separator: string, letter: string) => letter.toUpperCase());

/** The codes each error status can carry, for every operation (contract §2). */
const commonRefusals: ErrorCode[] = [
  'bad_request',
  'unknown_operation',
  'validation_error',
  'unauthenticated',
  'forbidden',
  'payload_too_large',
  'unsupported_media_type',
  'rate_limited',
  'internal_error',
  'unavailable',
];

function refusalsOf(name: OperationName): ErrorCode[] {
  const operation = operations[name];
  return [
    ...commonRefusals,
    // A keyed retry of a creation answers 404 once the caller has lost access to the record it made.
    ...(operation.namesRecord || operation.kind === 'command' ? (['not_found'] as const) : []),
    ...(operation.kind === 'command' ? (['conflict', 'idempotency_key_reused'] as const) : []),
  ];
}

const whenRefused: Record<ErrorCode, string> = {
  bad_request: 'The body is not a JSON object of exactly `query` and `params`, or a header is malformed.',
  unknown_operation: '`query` names no operation.',
  validation_error: 'A parameter is missing, of the wrong type, out of bounds or unknown; `details` says which.',
  unauthenticated: 'No valid bearer token.',
  forbidden: "The token lacks the operation's scope, or the organization is not the caller's.",
  not_found: 'The record does not exist, was deleted, or is not the caller’s: the three look alike.',
  conflict: 'A request with the same Idempotency-Key is still running; retry later.',
  idempotency_key_reused: 'The Idempotency-Key was used with a different request.',
  payload_too_large: 'The body is over the limit (1 MiB by default).',
  unsupported_media_type: 'The body is not application/json.',
  rate_limited: 'Too many requests from this caller; see Retry-After.',
  internal_error: 'A bug; the body holds no internals. Report the request id.',
  unavailable: 'The event store or the read database cannot be reached; retry (with the same Idempotency-Key for a command).',
};

const statusName: Record<number, string> = {
  400: 'BadRequest',
  401: 'Unauthenticated',
  403: 'Forbidden',
  404: 'NotFound',
  409: 'Conflict',
  413: 'PayloadTooLarge',
  415: 'UnsupportedMediaType',
  422: 'IdempotencyKeyReused',
  429: 'RateLimited',
  500: 'Internal',
  503: 'Unavailable',
};

const byStatus = (codes: readonly ErrorCode[]) => {
  const groups = new Map<number, ErrorCode[]>();
  for (const code of codes) groups.set(statusOf[code], [...(groups.get(statusOf[code]) ?? []), code]);
  return [...groups].sort(([a], [b]) => a - b);
};

const ref = (kind: 'schemas' | 'responses' | 'parameters' | 'headers', id: string) => ({ $ref: `#/components/${kind}/${id}` });

/** JSON Schemas for every registered zod schema, named as registered and referring to each other. */
function componentSchemas(): Record<string, unknown> {
  const registry = z.registry<{ id: string }>();
  registry.add(workspaceSchema, { id: 'Workspace' });
  registry.add(solutionSchema, { id: 'Solution' });
  registry.add(workspaceHistoryItemSchema, { id: 'WorkspaceHistoryItem' });
  registry.add(solutionHistoryItemSchema, { id: 'SolutionHistoryItem' });
  registry.add(errorBodySchema(), { id: 'Error' });
  for (const [status, codes] of byStatus(commonRefusals.concat('not_found', 'conflict', 'idempotency_key_reused'))) {
    registry.add(errorBodySchema(codes), { id: `${statusName[status]}Error` });
  }
  for (const name of operationNames) {
    const Name = pascal(name);
    registry.add(paramsSchemas[name], { id: `${Name}Params` });
    if (!registry.has(resultSchemas[name])) registry.add(resultSchemas[name], { id: `${Name}Result` });
    registry.add(z.strictObject({ query: z.literal(name), params: paramsSchemas[name] }), { id: `${Name}Request` });
    registry.add(z.strictObject({ data: resultSchemas[name] }), { id: `${Name}Response` });
  }
  const { schemas } = z.toJSONSchema(registry, {
    target: 'draft-2020-12',
    // What a client sends: `as_of` before it is read as an instant.
    io: 'input',
    // attributes and the values checked in code carry their JSON Schema in `.meta()`.
    unrepresentable: 'any',
    uri: (id) => `#/components/schemas/${id}`,
  });
  return Object.fromEntries(
    Object.entries(schemas).map(([id, schema]) => {
      const { $schema: _dialect, $id: _id, ...rest } = schema as Record<string, unknown>;
      return [id, rest];
    }),
  );
}

/** A command's answer kept for its Idempotency-Key and given again: a 200, or the 400, 403 or 404 it ended in. */
const idempotentReplayedHeader = {
  description: 'Present, "true", on a replayed answer: the one kept for this Idempotency-Key, not a new execution.',
  schema: { const: 'true' },
};
/** The statuses besides 200 a command's kept answer may have: its own refusals (a 5xx or a 429 frees the key instead). */
const keptRefusalStatuses = new Set([400, 403, 404]);

const requestIdHeader = {
  description: 'The request id: the x-request-id sent, when valid, else a new one. Also in the logs and in error bodies.',
  schema: { type: 'string' },
};

const tagOf = (name: OperationName) => {
  const scopes = scopesOf(name);
  if (name === 'list_changes') return 'Changes';
  // Operations any read scope grants: the proofs of the history.
  if (scopes.length > 1) return 'Integrity';
  if (scopes[0] === 'webhooks:manage') return 'Webhooks';
  return scopes[0]!.startsWith('workspaces') ? 'Workspaces' : 'Solutions';
};

function pathItem(name: OperationName) {
  const operation = operations[name];
  const Name = pascal(name);
  const errorResponses = {
    ...Object.fromEntries(
      byStatus(refusalsOf(name)).map(([status, codes]) => [
        String(status),
        {
          description: codes.map((code) => `\`${code}\`: ${whenRefused[code]}`).join('\n\n'),
          headers: {
            'x-request-id': ref('headers', 'RequestId'),
            ...(status === 401 ? { 'WWW-Authenticate': { schema: { type: 'string', const: 'Bearer' } } } : {}),
            ...(status === 429 ? { 'Retry-After': { description: 'Seconds to wait.', schema: { type: 'integer' } } } : {}),
            ...(operation.kind === 'command' && keptRefusalStatuses.has(status)
              ? { 'idempotent-replayed': ref('headers', 'IdempotentReplayed') }
              : {}),
          },
          content: { 'application/json': { schema: ref('schemas', `${statusName[status]}Error`) } },
        },
      ]),
    ),
    // Not a code of its own: the contract's bad_request, with the status HTTP gives headers too large.
    431: {
      description: "`bad_request`: the request headers are over the server's limit (16 KiB), or more than 128; refused before routing.",
      headers: { 'x-request-id': ref('headers', 'RequestId') },
      content: { 'application/json': { schema: ref('schemas', 'BadRequestError') } },
    },
  };
  return {
    post: {
      operationId: name,
      summary: operation.summary,
      description: `Scope ${scopesOf(name)
        .map((scope) => `\`${scope}\``)
        .join(' or ')}. A ${operation.kind}: sends \`{"query": "${name}", "params": {...}}\` to \`POST /api\`.`,
      tags: [tagOf(name)],
      security: scopesOf(name).map((scope) => ({ bearerAuth: [scope] })),
      parameters: [
        ref('parameters', 'RequestId'),
        ...(operation.kind === 'command' ? [ref('parameters', 'IdempotencyKey')] : []),
        ...(name === 'list_changes' ? [ref('parameters', 'Accept'), ref('parameters', 'LastEventId')] : []),
      ],
      requestBody: { required: true, content: { 'application/json': { schema: ref('schemas', `${Name}Request`) } } },
      responses: {
        '200': {
          description:
            name === 'list_changes'
              ? 'Done. As `application/json`, one page: `data` holds the result. As `text/event-stream` (asked for with ' +
                '`Accept`), the changes as Server-Sent Events, with no `data` envelope: each event carries one change as its ' +
                '`data:` line, and the stream goes on until the token stops being accepted or the instance stops.'
              : 'Done; `data` holds the result.',
          headers: {
            'x-request-id': ref('headers', 'RequestId'),
            ...(operation.kind === 'command'
              ? {
                  'idempotent-replayed': ref('headers', 'IdempotentReplayed'),
                  'x-projection-behind': {
                    description:
                      'Present, "true", when the command answered before the read side showed its effect: the projection did not ' +
                      'catch up within PROJECTION_WAIT_MS, or its projector is stopped at an event it cannot apply (then at once). ' +
                      'The change is stored; reads may not show it yet.',
                    schema: { const: 'true' },
                  },
                }
              : {}),
          },
          content: {
            'application/json': { schema: ref('schemas', `${Name}Response`) },
            ...(name === 'list_changes' ? { 'text/event-stream': changeStream } : {}),
          },
        },
        ...errorResponses,
      },
    },
  };
}

/** The JWKS of GET /audit-keys (contract §13). */
const auditKeysSchema = {
  type: 'object',
  required: ['keys'],
  additionalProperties: false,
  properties: {
    keys: {
      type: 'array',
      items: {
        type: 'object',
        required: ['kty', 'crv', 'x', 'kid'],
        properties: {
          kty: { const: 'OKP' },
          crv: { const: 'Ed25519' },
          x: { type: 'string', description: 'The public key, base64url.' },
          kid: { type: 'string', description: 'The key id checkpoints name in `key_id` (its RFC 7638 thumbprint).' },
          alg: { const: 'EdDSA' },
          use: { const: 'sig' },
        },
      },
    },
  },
};

/** list_changes with `Accept: text/event-stream` (contract §14). */
const changeStream = {
  schema: {
    type: 'string',
    description:
      'Server-Sent Events, not JSON: first the comment `: change stream`, then one event per change: `id:` the change id (a cursor), ' +
      '`event:` its type, `data:` the Change as one JSON line (an item of the schema `ListChangesResult`, without the ' +
      '`{"data": ...}` envelope). A comment line (`: keep-alive`) at least every 15 s while no change comes. ' +
      'The stream ends when the token stops being accepted (`exp` plus the 30 s clock tolerance) ' +
      'or the instance stops; reconnect with `Last-Event-ID` to continue exactly after the last change received.',
  },
  example: 'id: AAAAAAAAuzEAAAAAAAAABA\nevent: WorkspaceCreated\ndata: {"id":"AAAAAAAAuzEAAAAAAAAABA","type":"WorkspaceCreated",...}\n\n',
};

const readinessSchema = {
  type: 'object',
  required: ['status', 'checks'],
  additionalProperties: false,
  properties: {
    status: { enum: ['ready', 'not_ready'] },
    checks: {
      type: 'object',
      description:
        'One entry per check: "ok" (the projection: "caught_up") or what is wrong; a projection "behind" comes with its two figures.',
      properties: {
        projection_backlog_events: {
          type: 'integer',
          minimum: 0,
          description: 'The events between the projection and the end of the log, as the event store estimates it.',
        },
        projection_catch_up_seconds: {
          type: ['integer', 'null'],
          minimum: 0,
          description: "How long they take at the projection's recent rate, rounded up; null while there is no such rate.",
        },
      },
      additionalProperties: { type: 'string' },
    },
  },
};

export function openApiDocument(version: string) {
  return {
    openapi: '3.1.1',
    info: {
      title: 'Workspace & Solution API',
      version,
      description:
        'Every operation is `POST /api` with `{"query": <operation>, "params": {...}}`; each appears here as `/api#<operation>` ' +
        '(the fragment is never sent). Success is 200 with `{"data": ...}`; every failure has the error body of `Error`. ' +
        'Commands take an optional `Idempotency-Key`, and answer only once the read side shows their effect.',
    },
    servers: [{ url: '/' }],
    tags: [
      { name: 'Workspaces', description: 'Workspaces and their history.' },
      { name: 'Solutions', description: 'Solutions, inside workspaces, and their history.' },
      { name: 'Integrity', description: 'Signed checkpoints and proofs of the tamper-evident history (any read scope).' },
      { name: 'Changes', description: 'The change feed: every change the caller may read, paged, long-polled or streamed.' },
      {
        name: 'Webhooks',
        description:
          "Webhooks that push the change feed to an endpoint (scope `webhooks:manage`). Its holder receives every change of the organization's chosen types, with the change's data, through the webhooks it creates: give it only to callers who may read those records.",
      },
      { name: 'Operations', description: 'Liveness and readiness, without a token.' },
    ],
    paths: {
      ...Object.fromEntries(operationNames.map((name) => [`/api#${name}`, pathItem(name)])),
      '/healthz': {
        get: {
          operationId: 'healthz',
          summary: 'Liveness: 200 while the process runs.',
          tags: ['Operations'],
          security: [],
          responses: {
            '200': {
              description: 'Alive.',
              content: {
                'application/json': {
                  schema: { type: 'object', required: ['status'], additionalProperties: false, properties: { status: { const: 'ok' } } },
                },
              },
            },
          },
        },
      },
      '/audit-keys': {
        get: {
          operationId: 'audit_keys',
          summary: 'The public keys that sign checkpoints, retired ones included, as a JWKS (RFC 7517, Ed25519).',
          tags: ['Integrity'],
          security: [],
          responses: { '200': { description: 'The keys.', content: { 'application/json': { schema: auditKeysSchema } } } },
        },
      },
      '/readyz': {
        get: {
          operationId: 'readyz',
          summary: 'Readiness: the stores answer and the projection is caught up.',
          tags: ['Operations'],
          security: [],
          responses: {
            '200': { description: 'Ready.', content: { 'application/json': { schema: readinessSchema } } },
            '503': { description: 'Not ready; `checks` says why.', content: { 'application/json': { schema: readinessSchema } } },
          },
        },
      },
    },
    components: {
      schemas: componentSchemas(),
      securitySchemes: {
        bearerAuth: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'JWT',
          description:
            'A JWT with `sub` (the caller, recorded as the actor), `orgs` (the organizations it may access), `scope` ' +
            `(space-separated: ${scopes.join(' ')}) and \`exp\`. ` +
            'Each operation lists the scope it needs.',
        },
      },
      parameters: {
        RequestId: {
          name: 'x-request-id',
          in: 'header',
          required: false,
          ...requestIdHeader,
          schema: { type: 'string', pattern: requestIdPattern.source },
        },
        Accept: {
          name: 'Accept',
          in: 'header',
          required: false,
          description: '`text/event-stream` streams the changes as Server-Sent Events instead of answering one page.',
          schema: { type: 'string' },
        },
        LastEventId: {
          name: 'Last-Event-ID',
          in: 'header',
          required: false,
          description: 'With the stream: continue after this change id (it takes the place of `after`).',
          schema: { type: 'string', pattern: '^[A-Za-z0-9_-]{1,128}$' },
        },
        IdempotencyKey: {
          name: 'Idempotency-Key',
          in: 'header',
          required: false,
          description:
            'Makes a retry safe: the same key and request answer what the first execution did, without doing it again. ' +
            'Keys belong to the caller; reused with a different request, 422.',
          schema: { type: 'string', pattern: idempotencyKeyPattern.source },
        },
      },
      headers: { RequestId: requestIdHeader, IdempotentReplayed: idempotentReplayedHeader },
    },
  };
}
