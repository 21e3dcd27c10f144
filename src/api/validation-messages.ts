import { z } from 'zod';
import type { ErrorDetail } from '../errors.js';

/**
 * What a client reads in a `validation_error`'s details (contract §2), in the service's own words.
 * The validation library's default English messages ("Invalid input: expected string, received
 * undefined", "Too small: expected number to be >=1") never reach a client: every parameter
 * schema is parsed with `validationErrorMap`, which names the rule a value broke. Messages a schema
 * sets itself (the value rules of src/domain/values.ts) take precedence over this map and are kept.
 */

type Issue = z.core.$ZodRawIssue;

const quoted = (value: unknown) =>
  typeof value === 'string' ? JSON.stringify(value) : typeof value === 'bigint' ? `${value}` : String(value);

const listOf = (values: readonly unknown[]) => values.map(quoted).join(', ');

/** "must be a string", "must be an object"... by the type the schema wanted. */
const typeRules: Record<string, string> = {
  string: 'must be a string',
  number: 'must be a number',
  int: 'must be an integer',
  bigint: 'must be an integer',
  boolean: 'must be a boolean',
  object: 'must be an object',
  record: 'must be an object',
  array: 'must be an array',
  tuple: 'must be an array',
  null: 'must be null',
  date: 'must be a date',
  nan: 'must be NaN',
  never: 'is not allowed here',
  undefined: 'must be left out',
  void: 'must be left out',
};

/** String formats the library checks, as the service names them ("must be a UUID"). */
const formats: Record<string, string> = {
  email: 'an email address',
  url: 'a URL',
  uuid: 'a UUID',
  uuidv4: 'a version 4 UUID',
  uuidv6: 'a version 6 UUID',
  uuidv7: 'a version 7 UUID',
  guid: 'a GUID',
  datetime: 'an ISO 8601 date and time',
  date: 'an ISO 8601 date',
  time: 'an ISO 8601 time',
  duration: 'an ISO 8601 duration',
  ipv4: 'an IPv4 address',
  ipv6: 'an IPv6 address',
  cidrv4: 'an IPv4 range',
  cidrv6: 'an IPv6 range',
  base64: 'base64-encoded',
  base64url: 'base64url-encoded',
  json_string: 'a JSON string',
  e164: 'an E.164 phone number',
  jwt: 'a JWT',
  emoji: 'an emoji',
};

/** The bounds of the number or string schema that owns an issue, when it has both: "between 1 and 100". */
function bothBounds(issue: Issue): { min: number; max: number } | undefined {
  const { schema } = issue;
  if (schema instanceof z.ZodNumber && schema.minValue !== null && schema.maxValue !== null) {
    const [min, max] = [schema.minValue, schema.maxValue];
    return Number.isFinite(min) && Number.isFinite(max) ? { min, max } : undefined;
  }
  if (schema instanceof z.ZodString && schema.minLength !== null && schema.maxLength !== null) {
    return { min: schema.minLength, max: schema.maxLength };
  }
  return undefined;
}

/** too_small and too_big: the whole allowed range where the schema has one, else the bound broken. */
function sizeRule(issue: Issue & { code: 'too_small' | 'too_big' }): string {
  const bound = issue.code === 'too_small' ? issue.minimum : issue.maximum;
  const units = issue.origin === 'string' ? 'characters' : issue.origin === 'array' || issue.origin === 'set' ? 'items' : undefined;
  const verb = units === 'items' ? 'must have' : 'must be';
  const amount = (value: number | bigint) => (units ? `${value} ${Number(value) === 1 ? units.slice(0, -1) : units}` : `${value}`);
  if (issue.exact) return `${verb} exactly ${amount(bound)}`;
  const bounds = issue.inclusive === false ? undefined : bothBounds(issue);
  if (bounds) {
    return units ? `${verb} ${bounds.min} to ${amount(bounds.max)}` : `must be between ${bounds.min} and ${bounds.max}`;
  }
  if (issue.code === 'too_small') {
    if (units === 'characters' && Number(bound) === 1 && issue.inclusive !== false) return 'must not be empty';
    return issue.inclusive === false ? `must be greater than ${bound}` : `${verb} at least ${amount(bound)}`;
  }
  return issue.inclusive === false ? `must be less than ${bound}` : `${verb} at most ${amount(bound)}`;
}

function typeRule(issue: Issue & { code: 'invalid_type' }): string {
  // JSON has no undefined: the input is undefined only where the member is missing.
  if (issue.input === undefined || issue.expected === 'nonoptional') return 'is required';
  if (issue.expected === 'number' && issue.schema instanceof z.ZodNumber && issue.schema.isInt) return 'must be an integer';
  return Object.hasOwn(typeRules, issue.expected) ? typeRules[issue.expected]! : `must be of type ${issue.expected}`;
}

function formatRule(issue: Issue & { code: 'invalid_format' }): string {
  switch (issue.format) {
    case 'starts_with':
      return `must start with ${quoted(issue.prefix)}`;
    case 'ends_with':
      return `must end with ${quoted(issue.suffix)}`;
    case 'includes':
      return `must contain ${quoted(issue.includes)}`;
    case 'regex':
      return `must match the pattern ${issue.pattern}`;
    default: {
      const format = Object.hasOwn(formats, issue.format) ? formats[issue.format] : undefined;
      return format ? `must be ${format}` : `must be in the ${issue.format} format`;
    }
  }
}

/** For an unknown member: a parameter at the top of `params`, a member of an object inside one. */
const unknownMemberRule = (path: readonly PropertyKey[]) =>
  path.length === 0 ? 'is not a parameter of this operation' : 'is not an allowed member of this object';

/** The message for one issue, in the service's words; the library's own messages are never used. */
function validationMessage(issue: Issue): string {
  switch (issue.code) {
    case 'invalid_type':
      return typeRule(issue);
    case 'too_small':
    case 'too_big':
      return sizeRule(issue);
    case 'invalid_value':
      if (issue.input === undefined) return 'is required';
      return issue.values.length === 1 ? `must be ${quoted(issue.values[0])}` : `must be one of ${listOf(issue.values)}`;
    case 'invalid_format':
      return formatRule(issue);
    case 'not_multiple_of':
      return `must be a multiple of ${issue.divisor}`;
    case 'unrecognized_keys':
      return unknownMemberRule(issue.path ?? []);
    case 'invalid_union':
      // A discriminated union reports at its discriminator's path, so the options are that member's values.
      if (Array.isArray(issue.options) && issue.options.length > 0) return `must be one of ${listOf(issue.options)}`;
      return issue.inclusive === false ? 'matches more than one allowed form' : 'does not match any allowed form';
    case 'invalid_key':
      return 'has a key that is not allowed';
    case 'invalid_element':
      return 'has an entry that is not allowed';
    default:
      return 'is not an allowed value';
  }
}

/** The per-parse error map: consulted only for issues whose schema set no message of its own. */
export const validationErrorMap: z.core.$ZodErrorMap = (issue) => validationMessage(issue);

/**
 * A failed parse as the contract's details: one per problem, paths from `prefix` (`params.size`,
 * `params.documentation.blocks.0.type`), an unknown member once per key, no repeats (a value can
 * break one bound twice, as a number and as a safe integer).
 */
export function validationDetails(error: z.ZodError, prefix: string): ErrorDetail[] {
  const details = error.issues.flatMap((issue) => {
    const path = [prefix, ...issue.path.map(String)].join('.');
    if (issue.code === 'unrecognized_keys') {
      return issue.keys.map((key) => ({ path: `${path}.${key}`, message: unknownMemberRule(issue.path) }));
    }
    return [{ path, message: issue.message }];
  });
  const seen = new Set<string>();
  return details.filter((detail) => {
    const key = JSON.stringify([detail.path, detail.message]);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}
