import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { copyRows, visitCopyRows } from '../../../src/infra/binary-copy.js';

/** A binary COPY of rows of two text fields (null as -1), as PostgreSQL sends it: header, rows, trailer. */
function binaryCopy(rows: (string | null)[][]): Buffer {
  const parts = [Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1'), Buffer.alloc(8)];
  for (const row of rows) {
    const count = Buffer.alloc(2);
    count.writeInt16BE(row.length);
    parts.push(count);
    for (const field of row) {
      const length = Buffer.alloc(4);
      const bytes = field === null ? Buffer.alloc(0) : Buffer.from(field);
      length.writeInt32BE(field === null ? -1 : bytes.length);
      parts.push(length, bytes);
    }
  }
  parts.push(Buffer.from([0xff, 0xff]));
  return Buffer.concat(parts);
}

const field = (buffer: Buffer, at: number): { value: string | null; next: number } => {
  const length = buffer.readInt32BE(at);
  if (length < 0) return { value: null, next: at + 4 };
  return { value: buffer.toString('utf8', at + 4, at + 4 + length), next: at + 4 + length };
};
const decodePair = (buffer: Buffer, at: number) => {
  const first = field(buffer, at);
  return [first.value, field(buffer, first.next).value];
};

/** The bytes in chunks of the given sizes, taken in turn (the last one repeated). */
function chunked(bytes: Buffer, sizes: number[]): Buffer[] {
  const chunks: Buffer[] = [];
  for (let at = 0, turn = 0; at < bytes.length; turn++) {
    const size = sizes[Math.min(turn, sizes.length - 1)]!;
    chunks.push(bytes.subarray(at, at + size));
    at += size;
  }
  return chunks;
}

const rows: (string | null)[][] = Array.from({ length: 300 }, (_, n) => [
  `row ${n}`,
  n % 7 === 0 ? null : n % 50 === 0 ? 'é'.repeat(3000 + n) : 'x'.repeat(n % 90),
]);
const bytes = binaryCopy(rows);

async function readAll(chunks: Buffer[]): Promise<(string | null)[][]> {
  const read: (string | null)[][] = [];
  for await (const page of copyRows(Readable.from(chunks), 2, decodePair)) read.push(...page);
  return read;
}

describe('rows of a binary COPY, however its bytes are cut into chunks', () => {
  it.each([
    ['one chunk', [bytes.length]],
    ['one byte at a time', [1]],
    ['the header cut short', [5, 64]],
    ['the header whole, the first row cut', [19, 3, 4096]],
    ['chunks of 7 bytes', [7]],
    ['chunks of 1,000 bytes (long rows span several)', [1000]],
    ['chunks of 65,536 bytes', [65_536]],
    ['irregular chunks', [13, 2, 999, 1, 4000, 17, 3, 70_000]],
  ])('%s: every row once, in order', async (_, sizes) => {
    expect(await readAll(chunked(bytes, sizes))).toEqual(rows);
  });

  it('visits the same rows', async () => {
    const visited: (string | null)[][] = [];
    await visitCopyRows(Readable.from(chunked(bytes, [333])), 2, (buffer, at) => visited.push(decodePair(buffer, at)));
    expect(visited).toEqual(rows);
  });

  it('a row that ends in the last byte before the trailer is read, and the trailer cut in two is not a row', async () => {
    const trailerAt = bytes.length - 2;
    expect(await readAll([bytes.subarray(0, trailerAt + 1), bytes.subarray(trailerAt + 1)])).toEqual(rows);
    expect(await readAll([bytes.subarray(0, trailerAt), bytes.subarray(trailerAt)])).toEqual(rows);
  });

  it('a row with another number of fields is refused', async () => {
    await expect(readAll([binaryCopy([['a', 'b', 'c']])])).rejects.toThrow('a row of a COPY has 3 fields, not 2');
  });

  it('a stream closed before its end without an error fails the read, rather than wait for rows that never come', async () => {
    const chunks = chunked(bytes, [1000]);
    const stream = new Readable({
      read() {
        const next = chunks.shift();
        if (chunks.length < 20) this.destroy();
        else this.push(next);
      },
    });
    const read: unknown[] = [];
    await expect(
      (async () => {
        for await (const page of copyRows(stream, 2, decodePair)) read.push(...page);
      })(),
    ).rejects.toMatchObject({ cause: new Error('the COPY closed before its end') });
    expect(read.length).toBeLessThan(rows.length);
  });

  it('a consumer that stops early destroys the stream', async () => {
    const stream = Readable.from(chunked(bytes, [100]));
    for await (const page of copyRows(stream, 2, decodePair)) {
      expect(page.length).toBeGreaterThan(0);
      break;
    }
    expect(stream.destroyed).toBe(true);
  });
});
