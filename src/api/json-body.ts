import type { FastifyInstance } from 'fastify';
import { ServiceError, type ErrorDetail } from '../errors.js';

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
  if (body !== null && typeof body === 'object' && mayHoldInexactNumbers(text)) {
    const inexact = findInexactNumbers(text);
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
 * more (a decimal point may split them) or an exponent can lose anything, so most bodies are not
 * scanned at all.
 */
const mayHoldInexactNumbers = (text: string) => /(?:\d\.?){16}|\d[eE]/.test(text);

type Container = { kind: 'object'; key: string } | { kind: 'array'; index: number };

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

/** Walks valid JSON text, tracking where it is, and checks each number literal, up to one more than `namedNumbers` found. */
function findInexactNumbers(text: string): ErrorDetail[] {
  const found: ErrorDetail[] = [];
  const path: Container[] = [];
  const where = () => {
    const named = path.slice(0, namedLevels).map((container) => (container.kind === 'object' ? container.key : String(container.index)));
    return path.length > namedLevels ? `${named.join('.')}.…` : named.join('.');
  };
  let expectKey = false;
  for (let at = 0; at < text.length && found.length <= namedNumbers;) {
    const char = text[at]!;
    if (char === '"') {
      const end = endOfString(text, at);
      if (expectKey) {
        (path[path.length - 1] as { key: string }).key = JSON.parse(text.slice(at, end)) as string;
        expectKey = false;
      }
      at = end;
    } else if (char === '{') {
      path.push({ kind: 'object', key: '' });
      expectKey = true;
      at += 1;
    } else if (char === '[') {
      path.push({ kind: 'array', index: 0 });
      at += 1;
    } else if (char === '}' || char === ']') {
      path.pop();
      at += 1;
    } else if (char === ',') {
      const top = path[path.length - 1];
      if (top?.kind === 'array') top.index += 1;
      else expectKey = true;
      at += 1;
    } else if (char === '-' || (char >= '0' && char <= '9')) {
      numberLiteral.lastIndex = at;
      const literal = numberLiteral.exec(text)![0];
      if (!isExact(literal))
        found.push({ path: where(), message: 'is a number that cannot be stored exactly as sent; send it as a string' });
      at += literal.length;
    } else {
      at += 1;
    }
  }
  return found;
}

function endOfString(text: string, start: number): number {
  for (let at = start + 1; ; at++) {
    if (text[at] === '\\') at += 1;
    else if (text[at] === '"') return at + 1;
  }
}

/** Whether the double nearest to `literal` has the same decimal value, so it reads back equal. */
function isExact(literal: string): boolean {
  const value = Number(literal);
  return Number.isFinite(value) && sameDecimal(canonical(literal), canonical(String(value)));
}

const zero = '0'.charCodeAt(0);

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
