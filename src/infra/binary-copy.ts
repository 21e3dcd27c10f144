import type { Readable } from 'node:stream';
import type pg from 'pg';
import { to as copyTo } from 'pg-copy-streams';

/**
 * Large reads (audit:verify's and a bulk rebuild's) through `COPY (query) TO STDOUT` in binary:
 * no text escapes to undo, no per-row protocol objects, and bytea as its bytes. At most
 * `bufferedBytes` wait in Node for the consumer; beyond that the socket, then PostgreSQL, waits.
 * COPY takes no parameters: the query's values are written into it, escaped by the caller.
 */
const bufferedBytes = 4 * 1024 * 1024;

export function copyOut(client: pg.ClientBase, query: string): Readable {
  return client.query(copyTo(`COPY (${query}) TO STDOUT (FORMAT binary)`, { highWaterMark: bufferedBytes }));
}

/** PGCOPY\n\377\r\n\0, then flags and the length of a header extension (both 32-bit). */
const headerBytes = 19;

/**
 * The rows of a binary COPY of `fieldsPerRow` fields, each as `decode` makes it from the buffer
 * and the offset of its first field (each field a 32-bit length, -1 for null, then its bytes), a
 * page per chunk received.
 */
export async function* copyRows<T>(copy: Readable, fieldsPerRow: number, decode: (buffer: Buffer, at: number) => T): AsyncGenerator<T[]> {
  for await (const { buffer, rows } of rowsByChunk(copy, fieldsPerRow)) yield rows.map((at) => decode(buffer, at));
}

/** Each row of a binary COPY of `fieldsPerRow` fields given to `visit`, as to copyRows' `decode`, nothing kept. */
export async function visitCopyRows(copy: Readable, fieldsPerRow: number, visit: (buffer: Buffer, at: number) => void): Promise<void> {
  for await (const { buffer, rows } of rowsByChunk(copy, fieldsPerRow)) for (const at of rows) visit(buffer, at);
}

/** Each chunk received with the rows it completes, as the offsets of their first fields. */
async function* rowsByChunk(copy: Readable, fieldsPerRow: number): AsyncGenerator<{ buffer: Buffer; rows: number[] }> {
  let rest: Buffer | undefined;
  let headerSkipped = false;
  for await (const chunk of copy as AsyncIterable<Buffer>) {
    const buffer = rest ? Buffer.concat([rest, chunk]) : chunk;
    let at = 0;
    if (!headerSkipped) {
      if (buffer.length < headerBytes) {
        rest = buffer;
        continue;
      }
      at = headerBytes + buffer.readUInt32BE(headerBytes - 4);
      headerSkipped = true;
    }
    const rows: number[] = [];
    for (;;) {
      const next = rowEnd(buffer, at, fieldsPerRow);
      if (next === undefined) break;
      rows.push(at + 2);
      at = next;
    }
    rest = at < buffer.length ? buffer.subarray(at) : undefined;
    if (rows.length > 0) yield { buffer, rows };
  }
}

/** Where the row starting at `at` ends, when all of it has arrived; undefined too at the trailer (-1 fields). */
function rowEnd(buffer: Buffer, at: number, fieldsPerRow: number): number | undefined {
  if (buffer.length - at < 2) return undefined;
  const fields = buffer.readInt16BE(at);
  if (fields === -1) return undefined;
  if (fields !== fieldsPerRow) throw new Error(`a row of a COPY has ${fields} fields, not ${fieldsPerRow}`);
  let end = at + 2;
  for (let field = 0; field < fieldsPerRow; field++) {
    if (end + 4 > buffer.length) return undefined;
    end += 4 + Math.max(0, buffer.readInt32BE(end));
  }
  return end <= buffer.length ? end : undefined;
}
