import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../../src/config.js';
import { startRuntime } from '../../../src/runtime/service.js';
import { createTestDatabase } from '../../support/database.js';
import { testSecret } from '../../support/secret.js';

describe('a start-up that fails', () => {
  const scratch = mkdtemp(path.join(tmpdir(), 'start-up-'));
  afterAll(async () => rm(await scratch, { recursive: true, force: true }));

  it('given a step after the stores open fails, when the start is refused, then no projector, tree keeper or delivery loop is left on the database', async () => {
    const databaseUrl = await createTestDatabase();
    // The signing key is generated in the data directory: a directory under a file cannot be made.
    const blocker = path.join(await scratch, 'a-file');
    await writeFile(blocker, '');
    const config = parseConfig({
      DATABASE_URL: databaseUrl,
      AUTH_JWT_SECRET: testSecret,
      LOG_LEVEL: 'silent',
      DATA_DIR: path.join(blocker, 'data'),
    });

    await expect(startRuntime(config, pino({ level: 'silent' }))).rejects.toThrow(/ENOTDIR|not a directory/);

    // A loop started before the failure would still hold (or keep reopening) connections of its own.
    const observer = new pg.Client({ connectionString: databaseUrl });
    await observer.connect();
    try {
      const connectionsLeft = async () =>
        Number(
          (
            await observer.query<{ count: string }>(
              "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
            )
          ).rows[0]!.count,
        );
      const samples: number[] = [];
      for (let sample = 0; sample < 6; sample += 1) {
        await new Promise((resolve) => setTimeout(resolve, 250));
        samples.push(await connectionsLeft());
      }
      expect(samples).toEqual([0, 0, 0, 0, 0, 0]);
    } finally {
      await observer.end();
    }
  });
});
