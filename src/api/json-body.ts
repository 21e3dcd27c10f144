import type { FastifyInstance } from 'fastify';
import { ServiceError, shortened, type ErrorDetail } from '../errors.js';

/**
 * Request bodies as the contract reads them: strictly UTF-8 (§1: invalid bytes are a
 * `bad_request`, never replaced with U+FFFD), and every number kept exactly as sent. JavaScript
 * numbers are IEEE doubles, so a number such as 9007199254740993 or 1e-400 would be stored as
 * another value: such numbers are reported by path and refused as a `validation_error` by the
 * handler, in the contract's order of checks.
 */
const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Numbers that would not be stored as sent, by their path in the body (`params.attributes.x`), and
 * whether the body holds more than those named.
 */
const inexactNumbers = new WeakMap<object, { named: ErrorDetail[]; more: boolean }>();

export function parseJsonBody(raw: Buffer): unknown {
  let text: string;
  try {
    text = strictUtf8.decode(raw);
  } catch {
    throw new ServiceError('bad_request', 'the body is not valid UTF-8');
  }
  if (text.trim() === '') throw new ServiceError('bad_request', 'the body is empty');
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new ServiceError('bad_request', 'the body is not valid JSON');
  }
  if (body !== null && typeof body === 'object') {
    const { repeated, inexact } = scanBody(text, mayHoldInexactNumbers(text));
    if (repeated) {
      throw new ServiceError(
        'bad_request',
        `the body names the member "${shortened(repeated.name, 100)}" twice ${repeated.in === undefined ? 'at its top level' : `in ${repeated.in || '""'}`}: each member may appear once`,
      );
    }
    if (inexact.length > 0) inexactNumbers.set(body, { named: inexact.slice(0, namedNumbers), more: inexact.length > namedNumbers });
  }
  return body;
}

/** The numbers of a parsed body that cannot be kept exactly (empty for most bodies). */
export function inexactNumbersOf(body: unknown): ErrorDetail[] {
  return (body !== null && typeof body === 'object' && inexactNumbers.get(body)?.named) || [];
}

/** Whether a parsed body holds more inexact numbers than `inexactNumbersOf` names. */
export function moreInexactNumbersThanNamed(body: unknown): boolean {
  return body !== null && typeof body === 'object' && inexactNumbers.get(body)?.more === true;
}

/**
 * Up to 15 significant digits and no exponent always survive a double; only sixteen digits or
 * more (a decimal point may split them) or an exponent can lose anything, so most bodies' numbers
 * are not checked at all.
 */
const mayHoldInexactNumbers = (text: string) => /(?:\d\.?){16}|\d[eE]/.test(text);

/** An object being walked: the member it is in (`key`), and every name it has had once it has had two. */
type Container = { kind: 'object'; key: string | undefined; names: Set<string> | undefined } | { kind: 'array'; index: number };

/** A JSON number literal where the walk stands (sticky: matched in place, however long, without copying the text after it). */
const numberLiteral = /-?\d+(\.\d+)?([eE][+-]?\d+)?/y;

/**
 * At most this many numbers are named, each by at most `namedLevels` levels of its path: a body of
 * thousands of such numbers nested thousands of levels deep must not make an answer, and the work
 * of writing it, thousands of times the body's size. Values nested that deep are refused anyway
 * (§6: 32 levels at most).
 */
const namedNumbers = 100;
const namedLevels = 40;

/**
 * Walks valid JSON text, tracking where it is, for the first member an object names twice (RFC
 * 8259 leaves its meaning open, and I-JSON, RFC 7493 §2.3, forbids it: a proxy or a log reading
 * the first value while the service takes the last is how such a body fools a check) and, when
 * `checkNumbers`, up to one more than `namedNumbers` number literals that cannot be kept exactly.
 */
function scanBody(
  text: string,
  checkNumbers: boolean,
): {
  repeated?: { name: string; /** The path of the object naming it; undefined for the body itself. */ in: string | undefined };
  inexact: ErrorDetail[];
} {
  const inexact: ErrorDetail[] = [];
  const path: Container[] = [];
  let expectKey = false;
  for (let at = 0; at < text.length;) {
    const char = text.charCodeAt(at);
    if (char === quote) {
      const end = endOfString(text, at);
      const top = path[path.length - 1];
      if (expectKey && top?.kind === 'object') {
        const written = text.slice(at + 1, end - 1);
        const name = written.includes('\\') ? (JSON.parse(`"${written}"`) as string) : written;
        if (top.key !== undefined) {
          top.names ??= new Set([top.key]);
          if (top.names.has(name)) return { repeated: { name, in: path.length > 1 ? pathName(path.slice(0, -1)) : undefined }, inexact };
          top.names.add(name);
        }
        top.key = name;
        expectKey = false;
      }
      at = end;
    } else if (char === openBrace) {
      path.push({ kind: 'object', key: undefined, names: undefined });
      expectKey = true;
      at += 1;
    } else if (char === openBracket) {
      path.push({ kind: 'array', index: 0 });
      at += 1;
    } else if (char === closeBrace || char === closeBracket) {
      path.pop();
      at += 1;
    } else if (char === comma) {
      const top = path[path.length - 1];
      if (top?.kind === 'array') top.index += 1;
      else expectKey = true;
      at += 1;
    } else if (checkNumbers && (char === minus || (char >= zero && char <= nine))) {
      numberLiteral.lastIndex = at;
      const literal = numberLiteral.exec(text)![0];
      if (inexact.length <= namedNumbers && !isExact(literal))
        inexact.push({ path: pathName(path), message: 'is a number that cannot be stored exactly as sent; send it as a string' });
      at += literal.length;
    } else {
      at += 1;
    }
  }
  return { inexact };
}

/**
 * Where the walk stands, as a path of member names and indexes (`params.attributes.0`), cut at
 * `namedLevels` levels and `namedPathLength` characters: a member name may be most of a megabyte,
 * and a hundred numbers under it named by their whole paths made an answer of 10 MB.
 */
function pathName(path: readonly Container[]): string {
  const named = path
    .slice(0, namedLevels)
    .map((container) => (container.kind === 'object' ? shortened(container.key ?? '', namedPathLength) : String(container.index)));
  return shortened(path.length > namedLevels ? `${named.join('.')}.…` : named.join('.'), namedPathLength);
}

const namedPathLength = 200;

/** Where the string starting at `start` ends (after its closing quote): the first quote not escaped by an odd run of backslashes. */
function endOfString(text: string, start: number): number {
  for (let at = start + 1; ;) {
    const end = text.indexOf('"', at);
    let backslashes = 0;
    while (text.charCodeAt(end - 1 - backslashes) === backslash) backslashes += 1;
    if (backslashes % 2 === 0) return end + 1;
    at = end + 1;
  }
}

const code = (char: string) => char.charCodeAt(0);
const [quote, backslash, comma, minus, zero, nine] = [code('"'), code('\\'), code(','), code('-'), code('0'), code('9')];
const [openBrace, closeBrace, openBracket, closeBracket] = [code('{'), code('}'), code('['), code(']')];

/** Whether the double nearest to `literal` has the same decimal value, so it reads back equal. */
function isExact(literal: string): boolean {
  const value = Number(literal);
  return Number.isFinite(value) && sameDecimal(canonical(literal), canonical(String(value)));
}

/** A decimal literal as sign, significant digits and exponent, so that 1.50e2 and 150 compare equal. */
function canonical(literal: string): { negative: boolean; digits: string; exponent: number } {
  const match = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(literal);
  if (!match) return { negative: false, digits: literal, exponent: 0 };
  const [, sign = '', whole = '', fraction = '', exponent = '0'] = match;
  const all = whole + fraction;
  // Plain loops: a regex for the trailing zeros takes time quadratic in a long run of zeros inside a literal.
  let leading = 0;
  while (leading < all.length && all.charCodeAt(leading) === zero) leading++;
  let end = all.length;
  while (end > leading && all.charCodeAt(end - 1) === zero) end--;
  const digits = all.slice(leading, end);
  return { negative: sign === '-' && digits !== '', digits, exponent: Number(exponent) + whole.length - leading };
}

const sameDecimal = (a: ReturnType<typeof canonical>, b: ReturnType<typeof canonical>) =>
  a.digits === b.digits && (a.digits === '' || (a.negative === b.negative && a.exponent === b.exponent));

/** Makes `parseJsonBody` the app's only body parser: JSON only, no text/plain. */
export function acceptJsonBodies(app: FastifyInstance): void {
  app.removeContentTypeParser(['text/plain', 'application/json']);
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, raw, done) => {
    try {
      // A compressed body would be read as its compressed bytes (RFC 9110 §8.4: 415 for a coding not supported).
      const coding = request.headers['content-encoding']?.trim().toLowerCase();
      if (coding !== undefined && coding !== '' && coding !== 'identity') {
        throw new ServiceError('unsupported_media_type', 'the body must not be compressed: Content-Encoding is not supported');
      }
      // Node's parser undoes `chunked` only: any other transfer coding leaves its bytes in the body.
      const transferCodings = request.headers['transfer-encoding']?.split(',').map((part) => part.trim().toLowerCase());
      if (transferCodings?.some((part) => part !== 'chunked')) {
        throw new ServiceError('unsupported_media_type', 'the body must not be compressed: only chunked Transfer-Encoding is supported');
      }
      done(null, parseJsonBody(raw as Buffer));
    } catch (error) {
      done(error as Error, undefined);
    }
  });
}
