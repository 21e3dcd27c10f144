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

/** Text gathered before it is handed to the COPY stream: a few hundred rows per write. */
const flushChars = 256 * 1024;

/**
 * One table loaded with `COPY … FROM STDIN` (text format) on a connection of its own, for as long
 * as the bulk load lasts. Rows are added synchronously; `drain` waits when PostgreSQL is behind, so
 * that at most about `flushChars` plus the stream's buffer are held.
 */
export class TableLoad {
  private lines: string[] = [];
  private chars = 0;
  /** Rejects with the COPY's error, whenever it comes: every wait is raced against it. */
  private readonly failed: Promise<never>;

  private constructor(private readonly stream: CopyStreamQuery) {
    this.failed = new Promise<never>((_resolve, reject) => stream.once('error', reject));
    // Reported by the next wait (drain or end), which the load always comes to.
    this.failed.catch(() => undefined);
  }

  static start(client: pg.ClientBase, table: string, columns: string[]): TableLoad {
    return new TableLoad(client.query(copyFrom(`COPY ${table} (${columns.join(', ')}) FROM STDIN`)));
  }

  /** Adds a row: its fields already in COPY's text form (copyText, copyJson). */
  add(fields: string[]): void {
    const line = `${fields.join('\t')}\n`;
    this.lines.push(line);
    this.chars += line.length;
  }

  /** Hands the rows gathered to the stream once there are enough, and waits while PostgreSQL is behind. */
  async drain(): Promise<void> {
    if (this.chars < flushChars) return;
    await this.flush();
  }

  /** Sends what is left and waits for PostgreSQL to have taken every row. */
  async end(): Promise<void> {
    await this.flush();
    this.stream.end();
    await this.until('finish');
  }

  /** Gives up the load: the stream sends CopyFail, PostgreSQL discards the rows and the connection is free again. */
  abort(reason: Error): void {
    this.stream.destroy(reason);
  }

  private async flush(): Promise<void> {
    if (this.lines.length === 0) return;
    const text = this.lines.join('');
    this.lines = [];
    this.chars = 0;
    if (!this.stream.write(text)) await this.until('drain');
  }

  private async until(event: 'drain' | 'finish'): Promise<void> {
    await Promise.race([once(this.stream, event), this.failed]);
  }
}
