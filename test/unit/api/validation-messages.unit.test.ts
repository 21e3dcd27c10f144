import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { operations } from '../../../src/api/operations.js';
import { paramsSchemas, type OperationName } from '../../../src/api/schemas.js';
import { validationErrorMap } from '../../../src/api/validation-messages.js';
import { startInMemoryApp, type InMemoryApp } from './in-memory-app.js';

/**
 * No message of the validation library reaches a client (issue 25): every operation's parameters,
 * each given every kind of bad value, through the app on the in-memory event store. Validation
 * answers before any store or query is asked, so none is needed.
 */

/** The library's wording; none of it may appear in a detail. */
const libraryWords = ['Invalid input', 'expected', 'received', 'Too small', 'Too big', 'Invalid', '>=', '<=', 'Unrecognized'];
const english = z.locales.en().localeError;

/** What zod's default English map would say for each issue of this request. */
function libraryDefaults(operation: OperationName, params: unknown): Set<string> {
  const parsed = paramsSchemas[operation].safeParse(params, { reportInput: true });
  const messages = new Set<string>();
  for (const issue of parsed.success ? [] : parsed.error.issues) {
    const message = english(issue as unknown as z.core.$ZodRawIssue);
    if (message) messages.add(typeof message === 'string' ? message : message.message);
  }
  return messages;
}

/** Values each field may hold; the first a field accepts is its value when another field is tested. */
const validSamples: unknown[] = [
  'ws_a',
  'sol_a',
  'wh_a',
  'AAAAAAAAAAAAAAAAAAAAAA',
  'org_unit',
  'Name',
  1,
  '2026-11-22T10:00:00Z',
  {},
  { blocks: [] },
];

const block = (content: unknown = 'c') => ({ type: 'text', content });
const nested = (depth: number): unknown => (depth === 0 ? 1 : { a: nested(depth - 1) });

/** Every kind of bad value; each field is sent those it refuses. */
const badValues: [string, unknown][] = [
  ['a string', 'text'],
  ['a numeric string', '1'],
  ['an empty string', ''],
  ['only whitespace', '   '],
  ['a control character', 'a\u0001b'],
  ['a long string', 'x'.repeat(300)],
  ['a malformed id', 'ws_not valid!'],
  ['an upper-case prefix', 'WS_a'],
  ['an empty id suffix', 'sol_'],
  ['a bad instant', '2026-13-01T00:00:00Z'],
  ['a number', 7],
  ['zero', 0],
  ['a negative number', -1],
  ['a non-integer', 1.5],
  ['101', 101],
  ['2^53', 2 ** 53],
  ['true', true],
  ['false', false],
  ['null', null],
  ['an empty array', []],
  ['an array', [1, 'a']],
  ['an empty object', {}],
  ['an object', { a: 1 }],
  ['blocks that are not an array', { blocks: 'x' }],
  ['blocks that are null', { blocks: null }],
  ['a block that is not an object', { blocks: [5] }],
  ['an empty block', { blocks: [{}] }],
  ['a block of another type', { blocks: [{ type: 'image', content: 'c' }] }],
  ['a block whose type is a number', { blocks: [{ type: 1, content: 'c' }] }],
  ['a block with a numeric content', { blocks: [block(5)] }],
  ['a block with no content', { blocks: [{ type: 'text' }] }],
  ['a block with an unknown member', { blocks: [{ ...block(), extra: 1 }] }],
  ['documentation with an unknown member', { blocks: [], extra: 1 }],
  ['1001 blocks', { blocks: Array.from({ length: 1001 }, () => block('')) }],
  ['a forbidden key', JSON.parse('{"__proto__": 1}')],
  ['a value nested too deeply', nested(40)],
];

type Case = { operation: OperationName; field: string; what: string; params: Record<string, unknown> };

/** Every operation, every field, every bad value it refuses (and missing where the field is required). */
function cases(): Case[] {
  const all: Case[] = [];
  for (const operation of Object.keys(operations) as OperationName[]) {
    const shape = paramsSchemas[operation].shape as Record<string, z.ZodType>;
    const required = Object.keys(shape).filter((field) => !shape[field]!.safeParse(undefined).success);
    const valid = Object.fromEntries(
      required.map((field) => {
        const sample = validSamples.find((value) => shape[field]!.safeParse(value).success);
        if (sample === undefined) throw new Error(`no valid sample for ${operation}.${field}`);
        return [field, sample];
      }),
    );
    expect(paramsSchemas[operation].safeParse(valid).success).toBe(true);
    for (const [field, schema] of Object.entries(shape)) {
      if (required.includes(field)) {
        const { [field]: _left, ...without } = valid;
        all.push({ operation, field, what: 'missing', params: without });
      }
      for (const [what, value] of badValues) {
        if (!schema.safeParse(value).success) all.push({ operation, field, what, params: { ...valid, [field]: value } });
      }
    }
    all.push({ operation, field: 'surprise', what: 'an unknown parameter', params: { ...valid, surprise: 1 } });
    // An operation whose parameters are all optional (list_changes) takes nothing at all.
    if (!paramsSchemas[operation].safeParse({}).success) all.push({ operation, field: '', what: 'nothing at all', params: {} });
  }
  return all;
}

describe('validation messages: the service’s words, never the library’s', () => {
  let started: InMemoryApp;
  let token: string;

  beforeAll(async () => {
    started = await startInMemoryApp();
    token = await started.token();
  });
  afterAll(() => started.close());

  const call = async (query: string, params: unknown) => {
    const response = await started.app.inject({
      method: 'POST',
      url: '/api',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      payload: JSON.stringify({ query, params }),
    });
    return { status: response.statusCode, error: response.json().error as { code: string; details: { path: string; message: string }[] } };
  };

  it('walks every operation with every kind of bad value for every field', async () => {
    const all = cases();
    expect(new Set(all.map((c) => c.operation)).size).toBe(Object.keys(operations).length);
    const failures: string[] = [];
    for (const { operation, field, what, params } of all) {
      const { status, error } = await call(operation, params);
      const label = `${operation} ${field || 'params'} = ${what}`;
      if (status !== 400 || error.code !== 'validation_error' || !Array.isArray(error.details) || error.details.length === 0) {
        failures.push(`${label}: answered ${status} ${JSON.stringify(error)}`);
        continue;
      }
      const defaults = libraryDefaults(operation, params);
      for (const { path, message } of error.details) {
        const problems = [
          ...(path.startsWith('params.') ? [] : ['a path outside params']),
          ...(defaults.has(message) ? ["zod's default message"] : []),
          ...libraryWords.filter((word) => message.toLowerCase().includes(word.toLowerCase())).map((word) => `the word "${word}"`),
        ];
        if (problems.length > 0) failures.push(`${label}: ${path} "${message}" has ${problems.join(', ')}`);
      }
      if (field && !error.details.some(({ path }) => path === `params.${field}` || path.startsWith(`params.${field}.`))) {
        failures.push(`${label}: no detail names params.${field}: ${JSON.stringify(error.details)}`);
      }
    }
    expect(failures).toEqual([]);
  });

  it.each([
    ['create_workspace', { organization_id: 'org_unit' }, [{ path: 'params.name', message: 'is required' }]],
    ['create_workspace', { organization_id: 'org_unit', name: null }, [{ path: 'params.name', message: 'must be a string' }]],
    ['create_workspace', { organization_id: 7, name: 'n' }, [{ path: 'params.organization_id', message: 'must be a string' }]],
    [
      'create_workspace',
      { organization_id: 'org_unit', name: 'n', attributes: [] },
      [{ path: 'params.attributes', message: 'must be a JSON object' }],
    ],
    ['list_workspaces', { page: 1, size: 0 }, [{ path: 'params.size', message: 'must be between 1 and 100' }]],
    ['list_workspaces', { page: 1, size: 101 }, [{ path: 'params.size', message: 'must be between 1 and 100' }]],
    ['list_workspaces', { page: 0, size: 1 }, [{ path: 'params.page', message: 'must be between 1 and 9007199254740991' }]],
    ['list_workspaces', { page: 2 ** 53, size: 1 }, [{ path: 'params.page', message: 'must be between 1 and 9007199254740991' }]],
    ['list_workspaces', { page: 1.5, size: 1 }, [{ path: 'params.page', message: 'must be an integer' }]],
    ['list_workspaces', { page: 1, size: '1' }, [{ path: 'params.size', message: 'must be an integer' }]],
    ['list_workspaces', { size: 1 }, [{ path: 'params.page', message: 'is required' }]],
    ['list_workspaces', { page: 1, size: 1, sort: 'name' }, [{ path: 'params.sort', message: 'is not a parameter of this operation' }]],
    ['get_workspace', { id: 'WS_a' }, [{ path: 'params.id', message: 'must be a workspace id: "ws_" and 1 to 64 of A-Z a-z 0-9 _ -' }]],
    ['get_workspace', { id: 'ws_a', as_of: 5 }, [{ path: 'params.as_of', message: 'must be a string' }]],
    ['update_solution', { id: 'sol_a', name: 'n'.repeat(51) }, [{ path: 'params.name', message: 'must be 1 to 50 characters' }]],
    [
      'update_solution',
      { id: 'sol_a', name: 'n', documentation: { blocks: [{ type: 'image', content: 5 }, 'x'] } },
      [
        { path: 'params.documentation.blocks.0.type', message: 'only the block type "text" exists' },
        { path: 'params.documentation.blocks.0.content', message: 'must be a string' },
        { path: 'params.documentation.blocks.1', message: 'must be an object' },
      ],
    ],
    [
      'update_solution',
      { id: 'sol_a', name: 'n', documentation: { blocks: [{ type: 'text', content: 'c', style: 'bold' }], version: 2 } },
      [
        { path: 'params.documentation.blocks.0.style', message: 'is not an allowed member of this object' },
        { path: 'params.documentation.version', message: 'is not an allowed member of this object' },
      ],
    ],
    ['update_solution', { id: 'sol_a', name: 'n', documentation: [] }, [{ path: 'params.documentation', message: 'must be an object' }]],
    ['update_solution', { id: 'sol_a', name: 'n', documentation: {} }, [{ path: 'params.documentation.blocks', message: 'is required' }]],
  ])('%s %j answers %j', async (operation, params, details) => {
    const { status, error } = await call(operation, params);
    expect(status).toBe(400);
    expect(error.details).toEqual(details);
  });
});

describe('validationErrorMap: every kind of issue the library raises', () => {
  const message = (schema: z.ZodType, input: unknown) => {
    const parsed = schema.safeParse(input, { error: validationErrorMap });
    if (parsed.success) throw new Error('expected a failure');
    return parsed.error.issues.map((issue) => issue.message);
  };

  it.each<[string, z.ZodType, unknown, string]>([
    ['missing', z.string(), undefined, 'is required'],
    ['a string wanted', z.string(), 1, 'must be a string'],
    ['a number wanted', z.number(), 'x', 'must be a number'],
    ['an integer wanted, a string given', z.number().int(), 'x', 'must be an integer'],
    ['an integer wanted, a fraction given', z.int(), 1.5, 'must be an integer'],
    ['a boolean wanted', z.boolean(), 0, 'must be a boolean'],
    ['an object wanted', z.object({}), [], 'must be an object'],
    ['a record wanted', z.record(z.string(), z.string()), 'x', 'must be an object'],
    ['an array wanted', z.array(z.string()), {}, 'must be an array'],
    ['null wanted', z.null(), 0, 'must be null'],
    ['a number in range', z.number().min(1).max(100), 0, 'must be between 1 and 100'],
    ['a number with a minimum only', z.number().min(1), 0, 'must be at least 1'],
    ['a number with a maximum only', z.number().max(10), 11, 'must be at most 10'],
    ['a number over an exclusive bound', z.number().gt(0), 0, 'must be greater than 0'],
    ['a number under an exclusive bound', z.number().lt(5), 5, 'must be less than 5'],
    ['a string of bounded length', z.string().min(2).max(5), 'x', 'must be 2 to 5 characters'],
    ['a non-empty string', z.string().min(1), '', 'must not be empty'],
    ['a short string', z.string().max(3), 'xxxx', 'must be at most 3 characters'],
    ['a string of exact length', z.string().length(4), 'x', 'must be exactly 4 characters'],
    ['a short array', z.array(z.number()).min(2), [1], 'must have at least 2 items'],
    ['a long array', z.array(z.number()).max(1), [1, 2], 'must have at most 1 item'],
    ['an empty array', z.array(z.number()).min(1), [], 'must have at least 1 item'],
    ['one literal', z.literal('text'), 'image', 'must be "text"'],
    ['an enum', z.enum(['a', 'b']), 'c', 'must be one of "a", "b"'],
    ['a regex', z.string().regex(/^x+$/), 'y', 'must match the pattern /^x+$/'],
    ['a prefix', z.string().startsWith('ws_'), 'x', 'must start with "ws_"'],
    ['a suffix', z.string().endsWith('.json'), 'x', 'must end with ".json"'],
    ['a substring', z.string().includes('@'), 'x', 'must contain "@"'],
    ['an email', z.email(), 'x', 'must be an email address'],
    ['a UUID', z.uuid(), 'x', 'must be a UUID'],
    ['a datetime', z.iso.datetime(), 'x', 'must be an ISO 8601 date and time'],
    ['a multiple', z.number().multipleOf(5), 7, 'must be a multiple of 5'],
    ['a union', z.union([z.string(), z.number()]), true, 'does not match any allowed form'],
    [
      'a discriminator',
      z.discriminatedUnion('type', [z.object({ type: z.literal('a') }), z.object({ type: z.literal('b') })]),
      { type: 'c' },
      'must be one of "a", "b"',
    ],
    ['a record key', z.record(z.string().regex(/^a/), z.number()), { b: 1 }, 'has a key that is not allowed'],
    ['a map entry under an object key', z.map(z.object({}), z.number()), new Map([[{}, 'x']]), 'has an entry that is not allowed'],
    ['a refinement with no message', z.string().refine(() => false), 'x', 'is not an allowed value'],
    ['an unknown member', z.strictObject({}), { x: 1 }, 'is not a parameter of this operation'],
    ['a nested unknown member', z.strictObject({ a: z.strictObject({}) }), { a: { x: 1 } }, 'is not an allowed member of this object'],
  ])('%s', (_what, schema, input, expected) => {
    const messages = message(schema, input);
    expect(messages).toContain(expected);
    for (const text of messages) for (const word of libraryWords) expect(text.toLowerCase()).not.toContain(word.toLowerCase());
  });

  it('keeps the messages the schemas set themselves', () => {
    expect(message(z.string().min(3, 'must be long enough'), 'x')).toEqual(['must be long enough']);
    expect(message(z.literal('text', { error: 'only text' }), 'x')).toEqual(['only text']);
    expect(message(paramsSchemas.create_workspace, { organization_id: 'org_', name: ' ' })).toEqual([
      'must be an organization id: "org_" and 1 to 64 of A-Z a-z 0-9 _ -',
      'must contain a non-whitespace character',
    ]);
  });
});
