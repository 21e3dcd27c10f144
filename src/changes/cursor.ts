import type { GlobalPosition } from '../eventstore/port.js';

/**
 * A change feed cursor (contract §14): the log position of the last change considered, as
 * base64url of its two numbers (16 bytes, big-endian), 22 characters. It names a place in the
 * log, not a row of any table, so it survives restarts, rebuilds and other instances alike.
 */

const cursorPattern = /^[A-Za-z0-9_-]{22}$/;
const maxUint64 = (1n << 64n) - 1n;

export function encodeCursor(position: GlobalPosition): string {
  const bytes = Buffer.alloc(16);
  bytes.writeBigUInt64BE(position.commit & maxUint64, 0);
  bytes.writeBigUInt64BE(position.prepare & maxUint64, 8);
  return bytes.toString('base64url');
}

/** The position a cursor names; undefined for anything `encodeCursor` cannot have made. */
export function decodeCursor(cursor: string): GlobalPosition | undefined {
  if (!cursorPattern.test(cursor)) return undefined;
  const bytes = Buffer.from(cursor, 'base64url');
  if (bytes.length !== 16) return undefined;
  const position = { commit: bytes.readBigUInt64BE(0), prepare: bytes.readBigUInt64BE(8) };
  // Base64url has several spellings of the last character's unused bits; only the canonical one is a cursor.
  return encodeCursor(position) === cursor ? position : undefined;
}
