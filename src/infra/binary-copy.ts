import { on } from 'node:events';
import type { Readable } from 'node:stream';
import type pg from 'pg';
import { to as copyTo } from 'pg-copy-streams';

/**
 * Large reads (audit:verify's and a bulk rebuild's) through `COPY (query) TO STDOUT` in binary:
 * no text escapes to undo, no per-row protocol objects, and bytea as its bytes. About
 * `bufferedBytes` wait in Node for the consumer (chunksAsReceived's queue; the stream's own buffer
 * is left at its small default); beyond that the socket, then PostgreSQL, waits.
 * COPY takes no parameters: the query's values are written into it, escaped by the caller.
 */
const bufferedBytes = 4 * 1024 * 1024;

export function copyOut(client: pg.ClientBase, query: string): Readable {
  const copy = client.query(copyTo(`COPY (${query}) TO STDOUT (FORMAT binary)`));
  // Heard from the start to the query's end, not only while a consumer iterates (which hears every
  // error meanwhile itself). pg reports the query's end to the stream after the stream's own end,
  // and after a consumer stopped early: "Connection terminated" when the connection is closed
  // before that, which concerns no row the consumer reads (the connection's next use hears the
  // loss). An error before a consumer begins is kept for it: chunksAsReceived throws it.
  copy.on('error', (error: Error) => failuresBeforeReading.has(copy) || failuresBeforeReading.set(copy, error));
  return copy;
}

/** A COPY's first error, for a consumer that begins after it (pg emits it once, and no end follows). */
const failuresBeforeReading = new WeakMap<Readable, Error>();

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

/**
 * Each chunk received with the rows it completes, as the offsets of their first fields. A row
 * begun in one chunk and ended in the next is given alone, in a small buffer of its own: joining
 * the rest of each chunk to the whole of the next would copy every byte of the COPY once more.
 */
async function* rowsByChunk(copy: Readable, fieldsPerRow: number): AsyncGenerator<{ buffer: Buffer; rows: number[] }> {
  let rest: Buffer | undefined;
  let headerSkipped = false;
  for await (const received of chunksAsReceived(copy)) {
    let chunk = received;
    let at = 0;
    if (!headerSkipped) {
      // The header comes in the first chunk or two: joined until it is whole.
      if (rest) chunk = Buffer.concat([rest, chunk]);
      rest = undefined;
      const headerEnd = chunk.length < headerBytes ? undefined : headerBytes + chunk.readUInt32BE(headerBytes - 4);
      if (headerEnd === undefined || headerEnd > chunk.length) {
        rest = chunk;
        continue;
      }
      at = headerEnd;
      headerSkipped = true;
    } else if (rest) {
      const straddling = completeRow(rest, chunk, fieldsPerRow);
      if (straddling === undefined) {
        rest = Buffer.concat([rest, chunk]);
        continue;
      }
      rest = undefined;
      if (straddling.row) yield { buffer: straddling.row, rows: [2] };
      at = straddling.taken;
    }
    const rows: number[] = [];
    for (;;) {
      const next = rowEnd(chunk, at, fieldsPerRow);
      if (next === undefined) break;
      rows.push(at + 2);
      at = next;
    }
    rest = at < chunk.length ? chunk.subarray(at) : undefined;
    if (rows.length > 0) yield { buffer: chunk, rows };
  }
}

/**
 * The row that `rest` begins, completed from the start of `chunk`, with how many of the chunk's
 * bytes it took (no row when it is the trailer); undefined when the chunk does not complete it.
 * The bytes joined grow from 1 KiB, fourfold, until the row's end is among them.
 */
function completeRow(rest: Buffer, chunk: Buffer, fieldsPerRow: number): { row?: Buffer; taken: number } | undefined {
  for (let taken = Math.min(chunk.length, 1024); ; taken = Math.min(chunk.length, taken * 4)) {
    const joined = Buffer.concat([rest, chunk.subarray(0, taken)]);
    if (joined.length >= 2 && joined.readInt16BE(0) === -1) return { taken: 2 - rest.length };
    const end = rowEnd(joined, 0, fieldsPerRow);
    if (end !== undefined) return { row: joined.subarray(0, end), taken: end - rest.length };
    if (taken === chunk.length) return undefined;
  }
}

/** How many chunks may wait in Node for the consumer (with pg's reads of 64 KiB, about bufferedBytes). */
const chunksBuffered = Math.ceil(bufferedBytes / 65_536);

/**
 * The chunks of a byte stream one by one as they came. The stream's own async iterator would join
 * all it holds into one new Buffer at each step, a copy of every byte read. A consumer that stops
 * early destroys the stream, as a `for await` over it does.
 */
async function* chunksAsReceived(stream: Readable): AsyncGenerator<Buffer> {
  const failed = failuresBeforeReading.get(stream);
  if (failed) throw failed;
  let ended = false;
  stream.once('end', () => (ended = true));
  // Closed before its end without an error (destroyed): a failure, or the read would wait for
  // rows that never come.
  const closedEarly = new AbortController();
  stream.once('close', () => ended || closedEarly.abort(new Error('the COPY closed before its end')));
  try {
    const chunks = on(stream, 'data', { close: ['end'], highWaterMark: chunksBuffered, signal: closedEarly.signal });
    for await (const [chunk] of chunks) yield chunk as Buffer;
  } finally {
    if (!ended) stream.destroy();
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
