import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { copyJson, copyText, TableLoad } from '../../../src/projections/rebuild/table-load.js';
import { createTestDatabase } from '../../support/database.js';

/**
 * The bulk load's COPY writer (src/projections/rebuild/table-load.ts) encodes rows straight into
 * buffers of 256 KiB that may end in the middle of a row or of a character's bytes: what PostgreSQL
 * stores must be exactly what was added, whatever the text and its length.
 */
describe('a table loaded with COPY', () => {
  let client: pg.Client | undefined;
  afterEach(() => client?.end());

  it('stores every row as added: escapes, characters of two to four bytes, fields longer than a buffer, rows across buffers', async () => {
    client = new pg.Client({ connectionString: await createTestDatabase() });
    await client.connect();
    await client.query('CREATE TABLE loaded (n integer NOT NULL, label text NOT NULL, body jsonb NOT NULL)');
    const rows = Array.from({ length: 3000 }, (_, n) => ({
      n,
      label: `${n}\ttab\\slash\nline\rreturn é ✓ 𝄞 ${'x'.repeat(n % 97)}`,
      body: { n, text: '€'.repeat(n % 211), nested: { quote: '"', emoji: '😀'.repeat(n % 5) } },
    }));
    // Longer than a buffer, in characters of three bytes, and another in plain ASCII.
    rows.push({ n: 3000, label: '✓'.repeat(300_000), body: { n: 3000, text: 'y'.repeat(600_000), nested: { quote: '', emoji: '' } } });
    rows.push({ n: 3001, label: 'after the long ones', body: { n: 3001, text: '', nested: { quote: '', emoji: '' } } });

    const load = TableLoad.start(client, 'loaded', ['n', 'label', 'body']);
    for (const row of rows) {
      load.add([String(row.n), copyText(row.label), copyJson(row.body)]);
      if (row.n % 500 === 0) await load.drain();
    }
    await load.end();

    const { rows: stored } = await client.query<{ n: number; label: string; body: unknown }>(
      'SELECT n, label, body FROM loaded ORDER BY n',
    );
    expect(stored).toHaveLength(rows.length);
    for (const [index, row] of rows.entries()) expect(stored[index]).toEqual(row);
  });

  it("given the connection is lost mid-COPY, when the failed load is given up, then the loss is the load's error and nothing else is thrown", async () => {
    const databaseUrl = await createTestDatabase();
    client = new pg.Client({ connectionString: databaseUrl });
    // The lost session's error reaches the COPY; the client's own error event needs nothing more.
    client.on('error', () => undefined);
    await client.connect();
    await client.query('CREATE TABLE loaded (n integer NOT NULL)');
    const load = TableLoad.start(client, 'loaded', ['n']);
    for (let n = 0; n < 100_000; n++) load.add([String(n)]);
    await load.drain();

    const admin = new pg.Client({ connectionString: databaseUrl });
    await admin.connect();
    try {
      await admin.query('SELECT pg_terminate_backend($1)', [(client as unknown as { processID: number }).processID]);
    } finally {
      await admin.end();
    }
    const uncaught: unknown[] = [];
    const record = (error: unknown) => uncaught.push(error);
    process.prependListener('uncaughtException', record);
    try {
      for (let n = 0; n < 100_000; n++) load.add([String(n)]);
      await expect(load.end()).rejects.toThrow();
      // As the bulk load does on any failure: its connections are wanted again for the clean-up.
      load.abort(new Error('the load failed'));
      await new Promise((resolve) => setTimeout(resolve, 200));
    } finally {
      process.removeListener('uncaughtException', record);
    }
    expect(uncaught).toEqual([]);
    client = undefined;
  });
});
