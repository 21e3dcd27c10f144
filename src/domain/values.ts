import { z } from 'zod';
import { InvalidValue } from './errors.js';
import { mergePatch, type JsonObject } from './merge-patch.js';
import { isTimestamp, parseInstant } from './timestamp.js';

/** The value rules of contract §4–§6, shared by the API's parameter schemas and the deciders. */

const idSuffix = '[A-Za-z0-9_-]{1,64}';
const idSchema = (prefix: string, what: string) =>
  z
    .string()
    .regex(new RegExp(`^${prefix}${idSuffix}$`), `must be ${what} id: "${prefix}" and 1 to 64 of A-Z a-z 0-9 _ -`)
    .meta({
      description: `${what[0]!.toUpperCase()}${what.slice(1).replace(/^an? /, '')} id: "${prefix}" then 1 to 64 of A-Z a-z 0-9 _ -.`,
    });

export const organizationId = idSchema('org_', 'an organization');
export const workspaceId = idSchema('ws_', 'a workspace');
export const solutionId = idSchema('sol_', 'a solution');
export const webhookId = idSchema('wh_', 'a webhook');

/** An instant in the contract's timestamp form (§8). */
export const timestamp = z
  .string()
  .refine(isTimestamp, 'must be a timestamp of the form YYYY-MM-DDTHH:MM:SS.ffffffZ')
  .meta({
    description: 'UTC, exactly six fractional digits: YYYY-MM-DDTHH:MM:SS.ffffffZ.',
    pattern: String.raw`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$`,
    examples: ['2026-11-22T10:00:00.000000Z'],
  });

/** Any RFC 3339 instant (`as_of`, contract §12), read as the §8 form in UTC. */
export const instant = z
  .string()
  .meta({
    description: 'Any RFC 3339 instant: Z or a numeric offset, 0 to 6 fractional digits.',
    pattern: String.raw`^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,6})?([Zz]|[+-]\d{2}:\d{2})$`,
    examples: ['2026-11-22T10:00:00Z'],
  })
  .transform((text, context) => {
    const parsed = parseInstant(text);
    if (parsed === undefined) {
      context.addIssue({
        code: 'custom',
        message: 'must be an RFC 3339 instant, such as 2026-11-22T10:00:00Z or 2026-11-22T11:00:00.5+01:00',
      });
      return z.NEVER;
    }
    return parsed;
  });

const codePoints = (value: string) => [...value].length;

export const wellFormed = (schema: z.ZodString) =>
  schema.refine((value) => value.isWellFormed(), 'must be well-formed Unicode (no lone surrogates)');

/** No control character at all (Unicode category Cc), as names and webhook urls have. */
export const withoutControlCharacters = <Schema extends z.ZodType<string>>(schema: Schema) =>
  schema.refine((value) => !/\p{Cc}/u.test(value), 'must not contain control characters');

export const name = withoutControlCharacters(
  wellFormed(z.string())
    .refine((value) => codePoints(value) >= 1 && codePoints(value) <= 50, 'must be 1 to 50 characters')
    // Whitespace as Unicode defines it (White_Space); JavaScript's \s also counts U+FEFF, which is not.
    .refine((value) => /\P{White_Space}/u.test(value), 'must contain a non-whitespace character'),
)
  // JSON Schema counts a string's length in code points, as the contract does (§5).
  .meta({ minLength: 1, maxLength: 50, description: '1 to 50 code points, not only whitespace, no control characters.' });

export const description = wellFormed(z.string())
  .refine((value) => codePoints(value) <= 255, 'must be at most 255 characters')
  .refine(
    (value) => !/(?![\t\n\r])\p{Cc}/u.test(value),
    'must not contain control characters other than tab, line feed and carriage return',
  )
  .meta({ maxLength: 255, description: 'At most 255 code points; no control characters but tab, line feed and carriage return.' });

export const limits = {
  attributesBytes: 64 * 1024,
  attributesDepth: 32,
  documentationBytes: 512 * 1024,
  documentationBlocks: 1000,
} as const;

const forbiddenKeys = new Set(['__proto__', 'constructor', 'prototype']);

/** The first problem in a JSON value's strings and keys, as a path suffix and a message; null when clean. */
function jsonProblem(value: unknown, depth: number, maxDepth: number): { path: string[]; message: string } | null {
  if (typeof value === 'string') {
    if (!value.isWellFormed()) return { path: [], message: 'strings must be well-formed Unicode' };
    if (value.includes('\u0000')) return { path: [], message: 'strings must not contain NUL (\\u0000)' };
    return null;
  }
  // JSON text like 1e400 parses to Infinity, which would silently be stored as null.
  if (typeof value === 'number' && !Number.isFinite(value))
    return { path: [], message: 'numbers must be within the double-precision range' };
  if (typeof value !== 'object' || value === null) return null;
  if (depth > maxDepth) return { path: [], message: `must be at most ${maxDepth} levels deep` };
  const entries = Array.isArray(value) ? value.map((item, index) => [String(index), item] as const) : Object.entries(value);
  for (const [key, item] of entries) {
    if (!Array.isArray(value)) {
      if (forbiddenKeys.has(key)) return { path: [key], message: `the key "${key}" is not allowed` };
      if (!key.isWellFormed() || key.includes('\u0000')) {
        return { path: [], message: 'keys must be well-formed Unicode without NUL (\\u0000)' };
      }
    }
    const problem = jsonProblem(item, depth + 1, maxDepth);
    if (problem) return { path: [key, ...problem.path], message: problem.message };
  }
  return null;
}

const serializedBytes = (value: unknown) => Buffer.byteLength(JSON.stringify(value), 'utf8');

function attributesProblem(value: JsonObject): string | null {
  return serializedBytes(value) > limits.attributesBytes ? `must be at most ${limits.attributesBytes} bytes serialized` : null;
}

/** Applies an update's merge patch; the result must itself stay within the size limit. */
export function mergeAttributes(current: JsonObject, patch: JsonObject): JsonObject {
  const merged = mergePatch(current, patch);
  const problem = attributesProblem(merged);
  if (problem) throw new InvalidValue('attributes', `after merging, attributes ${problem}`);
  return merged;
}

/**
 * A JSON object (not null, not an array) within the size, depth, key and string rules of §6.
 * Checked on the raw value: a record schema would copy the object and could drop a `__proto__` key unseen.
 */
export const attributes = z
  .custom<JsonObject>()
  .superRefine((value, ctx) => {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      ctx.addIssue({ code: 'custom', message: 'must be a JSON object' });
      return;
    }
    const problem = jsonProblem(value, 1, limits.attributesDepth);
    if (problem) {
      // Stop here: serializing a value nested too deeply would overflow the stack (a 500, not a 400).
      ctx.addIssue({ code: 'custom', path: problem.path, message: problem.message });
      return;
    }
    const sizeProblem = attributesProblem(value);
    if (sizeProblem) ctx.addIssue({ code: 'custom', message: sizeProblem });
  })
  .meta({
    type: 'object',
    additionalProperties: {},
    description: `Any JSON object: at most ${limits.attributesBytes / 1024} KiB serialized and ${limits.attributesDepth} levels deep; no NUL; no keys __proto__, constructor, prototype.`,
  });

const block = z.strictObject({
  type: z.literal('text', { error: 'only the block type "text" exists' }),
  content: wellFormed(z.string()).refine((value) => !value.includes('\u0000'), 'must not contain NUL (\\u0000)'),
});

export const documentation = z
  .strictObject({ blocks: z.array(block).max(limits.documentationBlocks, `at most ${limits.documentationBlocks} blocks`) })
  .refine((value) => serializedBytes(value) <= limits.documentationBytes, `must be at most ${limits.documentationBytes} bytes serialized`)
  .meta({
    description: `Text blocks: at most ${limits.documentationBlocks} blocks and ${limits.documentationBytes / 1024} KiB serialized.`,
  });

export type Documentation = z.infer<typeof documentation>;

export const emptyDocumentation = (): Documentation => ({ blocks: [] });
