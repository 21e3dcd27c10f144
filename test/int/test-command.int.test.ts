import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const fixtures = path.join(root, 'test/fixtures/test-run');

type Run = { status: number | null; closingLine: string | undefined; output: string };

/**
 * vitest as `npm test` runs it, in a child process, on one fixture file. Without DATABASE_URL
 * unless `databaseUrl` is given, so that the test database is the embedded PostgreSQL, whose
 * package once overrode the exit status.
 */
function runVitest(fixture: string, config = 'vitest.config.ts', databaseUrl?: string): Promise<Run> {
  const env: NodeJS.ProcessEnv = { ...process.env, CI: 'true' };
  delete env.DATABASE_URL;
  if (databaseUrl) env.DATABASE_URL = databaseUrl;
  // The outer run's worker settings would otherwise leak into the inner run.
  for (const name of Object.keys(env)) if (name.startsWith('VITEST')) delete env[name];
  const child = spawn(
    process.execPath,
    [path.join(root, 'node_modules/vitest/vitest.mjs'), 'run', '--config', path.join(fixtures, config), fixture],
    { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  return new Promise((resolve) =>
    child.once('close', (status) =>
      resolve({ status, closingLine: /^tests: \d+ passed, \d+ failed, \d+ skipped$/m.exec(output)?.[0], output }),
    ),
  );
}

describe('npm test tells the truth: its exit status and closing line', () => {
  it('exits 0 with no failure counted when every test passes', async () => {
    const run = await runVitest('passes.fixture.ts');
    expect(run.closingLine, run.output).toBe('tests: 1 passed, 0 failed, 0 skipped');
    expect(run.status, run.output).toBe(0);
  });

  it.each([
    ['a test fails', 'fails.fixture.ts'],
    ['a beforeAll hook throws', 'throwing-hook.fixture.ts'],
    ['a file cannot load', 'broken-import.fixture.ts'],
    ['a rejection goes unhandled', 'unhandled-rejection.fixture.ts'],
  ])('exits non-zero and counts a failure when %s', async (_, fixture) => {
    const run = await runVitest(fixture);
    expect(run.closingLine, run.output).toMatch(/ [1-9]\d* failed,/);
    expect(run.status, run.output).not.toBe(0);
  });

  it('exits non-zero when the global setup fails', async () => {
    const run = await runVitest('passes.fixture.ts', 'failing-setup.vitest.config.ts');
    expect(run.output).toContain('a global setup that fails on purpose');
    expect(run.status, run.output).not.toBe(0);
  });

  it('drops the databases it made on a server named by DATABASE_URL, which it does not own, once it is over', async () => {
    const adminDatabaseUrl = inject('adminDatabaseUrl');
    const run = await runVitest('makes-database.fixture.ts', 'vitest.config.ts', adminDatabaseUrl);
    expect(run.status, run.output).toBe(0);
    const made = /made database (\S+)/.exec(run.output)?.[1];
    expect(made, run.output).toMatch(/^test_[0-9a-f]{8}_[0-9a-f]{12}$/);
    const admin = new pg.Client({ connectionString: adminDatabaseUrl });
    await admin.connect();
    try {
      const { rows } = await admin.query('SELECT datname FROM pg_database WHERE datname = $1', [made]);
      expect(rows).toEqual([]);
    } finally {
      await admin.end();
    }
  });
});
