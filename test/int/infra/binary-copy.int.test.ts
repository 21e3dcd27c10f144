import type { Readable } from 'node:stream';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { copyOut, copyRows } from '../../../src/infra/binary-copy.js';
import { createTestDatabase } from '../../support/database.js';

/**
 * A binary COPY's stream on a real server, when its connection is closed under it: pg then hands
 * the stream "Connection terminated" as an 'error' event (on the next tick), whatever its consumer
 * did with it. Unheard, that event is an uncaught exception: the end of the service's process.
 */
describe('a binary COPY whose connection is closed under it', () => {
  let databaseUrl: string;
  beforeAll(async () => {
    databaseUrl = await createTestDatabase();
  });

  /** The COPY's stream, with each 'error' event it emits, and any that nobody heard (emit threw). */
  async function copyOnOwnConnection(): Promise<{ client: pg.Client; copy: Readable; emitted: unknown[]; unheard: unknown[] }> {
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    const copy = copyOut(client, 'SELECT n, repeat(n::text, 50) FROM generate_series(1, 20000) AS n');
    const emitted: unknown[] = [];
    const unheard: unknown[] = [];
    const emit = copy.emit.bind(copy);
    copy.emit = (event: string | symbol, ...args: unknown[]) => {
      if (event !== 'error') return emit(event, ...args);
      emitted.push(args[0]);
      try {
        return emit(event, ...args);
      } catch (error) {
        unheard.push(error);
        return true;
      }
    };
    return { client, copy, emitted, unheard };
  }

  const aTurn = () => new Promise((resolve) => setTimeout(resolve, 50));
  const decodeFirst = (buffer: Buffer, at: number) => buffer.readInt32BE(at + 4);

  it('is heard when nobody has read it yet', async () => {
    const { client, emitted, unheard } = await copyOnOwnConnection();
    await client.end();
    await aTurn();
    expect(emitted).toHaveLength(1);
    expect(unheard).toEqual([]);
  });

  it('is heard when its consumer stopped early', async () => {
    const { client, copy, emitted, unheard } = await copyOnOwnConnection();
    for await (const page of copyRows(copy, 2, decodeFirst)) {
      expect(page[0]).toBe(1);
      break;
    }
    // The query is still active (most rows unsent): closing the connection fails it.
    await client.end();
    await aTurn();
    expect(emitted).toHaveLength(1);
    expect(unheard).toEqual([]);
  });

  it('is heard when its consumer read every row and stops before pg has seen the COPY end', async () => {
    const { client, copy, emitted, unheard } = await copyOnOwnConnection();
    let rows = 0;
    const ended = new Promise((resolve) => copy.once('end', resolve));
    for await (const page of copyRows(copy, 2, decodeFirst)) {
      rows += page.length;
      if (rows === 20_000) {
        await ended;
        break;
      }
    }
    expect(rows).toBe(20_000);
    // pg sees the COPY's last message (ReadyForQuery) only after the stream's end: a hand-made
    // error in that window stands for the connection closed before it, which timing alone makes rare.
    copy.emit('error', new Error('Connection terminated'));
    await client.end();
    await aTurn();
    expect(emitted.length).toBeGreaterThanOrEqual(1);
    expect(unheard).toEqual([]);
  });

  it('fails a consumer that begins after the connection was closed, rather than leave it waiting for rows', async () => {
    const { client, copy, emitted } = await copyOnOwnConnection();
    await client.end();
    await aTurn();
    expect(emitted).toHaveLength(1);
    const reading = (async () => {
      for await (const page of copyRows(copy, 2, decodeFirst)) expect(page).toEqual([]);
    })();
    const waited = new Promise((resolve) => setTimeout(() => resolve('still waiting'), 5_000).unref());
    expect(
      await Promise.race([
        reading.then(
          () => 'ended',
          (error: Error) => error.message,
        ),
        waited,
      ]),
    ).toBe('Connection terminated');
  });
});
