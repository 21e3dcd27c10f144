import { once } from 'node:events';
import type pg from 'pg';
import { from as copyFrom, type CopyStreamQuery } from 'pg-copy-streams';

/** Characters COPY's text format gives a meaning to: each is written as a backslash escape. */
const special = /[\\\n\r\t]/;
const specialEverywhere = /[\\\n\r\t]/g;
const escapes: Record<string, string> = { '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/** A text value as a field of COPY's text format. */
export const copyText = (value: string): string => (special.test(value) ? value.replace(specialEverywhere, (c) => escapes[c]!) : value);

/** A value of a jsonb column as a field of COPY's text format: its JSON text, escaped. */
export const copyJson = (value: unknown): string => copyText(JSON.stringify(value));

/** The size of the buffers rows are written into, and about how much is gathered before it is handed to the COPY stream. */
const chunkBytes = 256 * 1024;
const tab = 0x09;
const newline = 0x0a;
/** UTF-8 takes at most three bytes per UTF-16 code unit (a surrogate pair: four bytes for two). */
const maxBytesPerCodeUnit = 3;

/**
 * One table loaded with `COPY … FROM STDIN` (text format) on a connection of its own, for as long
 * as the bulk load lasts. Rows are added synchronously, each field encoded straight into a buffer
 * (no line strings to join and encode again: in a rebuild that was a fifth of Node's CPU);
 * `drain` hands full buffers to the stream and waits when PostgreSQL is behind, so that at most
 * about `chunkBytes` plus the stream's buffer are held. A row may end up split between two
 * buffers: COPY's data messages may divide the data anywhere.
 */
export class TableLoad {
  private buffer = Buffer.allocUnsafe(chunkBytes);
  private used = 0;
  private readonly full: Buffer[] = [];
  /** Rejects with the COPY's error, whenever it comes: every wait is raced against it. */
  private readonly failed: Promise<never>;

  /** Whether the COPY has failed: it is over then (PostgreSQL discarded its rows, or its session is gone). */
  private hasFailed = false;

  private constructor(private readonly stream: CopyStreamQuery) {
    this.failed = new Promise<never>((_resolve, reject) =>
      // Every error, not once: the first is the load's; a later one only comes from ending the same
      // failed COPY, and as an unheard error event it would end the process.
      stream.on('error', (error) => {
        this.hasFailed = true;
        reject(error);
      }),
    );
    // Reported by the next wait (drain or end), which the load always comes to.
    this.failed.catch(() => undefined);
  }

  static start(client: pg.ClientBase, table: string, columns: string[]): TableLoad {
    return new TableLoad(client.query(copyFrom(`COPY ${table} (${columns.join(', ')}) FROM STDIN`)));
  }

  /** Adds a row: its fields already in COPY's text form (copyText, copyJson). */
  add(fields: string[]): void {
    const last = fields.length - 1;
    for (let index = 0; index <= last; index++) {
      const field = fields[index]!;
      const room = field.length * maxBytesPerCodeUnit + 1;
      if (this.used + room > this.buffer.length) this.nextBuffer(room);
      this.used += this.buffer.write(field, this.used);
      this.buffer[this.used++] = index === last ? newline : tab;
    }
  }

  /** Hands the rows gathered to the stream once there are enough, and waits while PostgreSQL is behind. */
  async drain(): Promise<void> {
    if (this.full.length === 0) return;
    await this.flush();
  }

  /** Sends what is left and waits for PostgreSQL to have taken every row. */
  async end(): Promise<void> {
    this.nextBuffer(0);
    await this.flush();
    this.stream.end();
    await this.until('finish');
  }

  /**
   * Gives up the load: the stream sends CopyFail, PostgreSQL discards the rows and the connection is
   * free again. A COPY that failed is over already; one whose session was lost has nothing to send on.
   */
  abort(reason: Error): void {
    if (!this.hasFailed) this.stream.destroy(reason);
  }

  /** Sets the filled part of the buffer aside and starts one with room for at least `bytes`. */
  private nextBuffer(bytes: number): void {
    if (this.used > 0) this.full.push(this.buffer.subarray(0, this.used));
    this.buffer = Buffer.allocUnsafe(Math.max(chunkBytes, bytes));
    this.used = 0;
  }

  private async flush(): Promise<void> {
    // Nothing more is written to a failed COPY (its connection may be gone): its own error is the answer.
    if (this.hasFailed) await this.failed;
    let writable = true;
    for (const chunk of this.full.splice(0)) writable = this.stream.write(chunk);
    if (!writable) await this.until('drain');
  }

  private async until(event: 'drain' | 'finish'): Promise<void> {
    await Promise.race([once(this.stream, event), this.failed]);
  }
}
