import { execFile } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/database.js';
import { testSecret } from '../support/secret.js';
import { runCli, type CliOutcome } from './cli-run.js';

const tools = {
  token: 'src/cli/token.ts',
  'projections:rebuild': 'src/cli/rebuild.ts',
  'projections:verify': 'src/cli/verify.ts',
  history: 'src/cli/history.ts',
  'projections:dead-letters': 'src/cli/dead-letters.ts',
};

/** A usage error: exit code 2 and one line on stderr, nothing that looks like a stack trace. */
function expectUsageError(outcome: CliOutcome, says: RegExp): void {
  expect({ code: outcome.code, lines: outcome.stderr.trimEnd().split('\n').length }).toEqual({ code: 2, lines: 1 });
  expect(outcome.stderr).toMatch(says);
  expect(outcome.stderr).not.toMatch(/\bat .+:\d+|Error:|TypeError/);
}

describe.concurrent('the command-line tools', () => {
  let databaseUrl: string;
  beforeAll(async () => {
    databaseUrl = await createTestDatabase();
  });
  const run = (tool: keyof typeof tools, args: string[], env: NodeJS.ProcessEnv = { AUTH_JWT_SECRET: testSecret }) =>
    runCli(tools[tool], args, databaseUrl, env);

  it.each(Object.keys(tools) as (keyof typeof tools)[])('%s --help prints its usage and exits 0', async (tool) => {
    const outcome = await run(tool, ['--help']);
    expect(outcome.code).toBe(0);
    expect(outcome.stdout).toMatch(new RegExp(`^usage: npm run (-s )?${tool}`));
    expect(outcome.stderr).toBe('');
  });

  it.each(Object.keys(tools) as (keyof typeof tools)[])('%s with an unknown option says so in one line and exits 2', async (tool) => {
    expectUsageError(await run(tool, ['--bogus']), /unknown option --bogus/);
  });

  it.each([
    [['--org', 'org_a', '--expires', 'banana'], /--expires banana is not a lifetime/],
    [[], /at least one --org/],
    [['--org', 'org_a', '--scope', 'workspace:read'], /unknown scope workspace:read/],
    [['--org', 'not an org'], /not an organization id/],
    [['--org'], /--org needs a value/],
  ])('token %j is refused in one line', async (args, says) => {
    expectUsageError(await run('token', args), says);
  });

  it('token prints the token alone on stdout and what it minted on stderr', async () => {
    const outcome = await run('token', [
      '--org',
      'org_a',
      '--org',
      'org_b',
      '--scope',
      'workspaces:read',
      '--sub',
      'alice',
      '--expires',
      '2h',
    ]);
    expect(outcome.code).toBe(0);
    const token = outcome.stdout.trim();
    expect(outcome.stdout).toBe(`${token}\n`);
    expect(decodeJwt(token)).toMatchObject({ sub: 'alice', orgs: ['org_a', 'org_b'], scope: 'workspaces:read' });
    expect(outcome.stderr).toMatch(
      /^minted a token for subject alice, organizations org_a, org_b, scopes workspaces:read, valid until \d{4}-.*\(2h\)\n$/,
    );
  });

  it('projections:rebuild --batch-size 0 and history with a bad id are refused in one line', async () => {
    expectUsageError(await run('projections:rebuild', ['--batch-size', '0']), /--batch-size must be a positive whole number/);
    expectUsageError(await run('history', ['nope']), /nope is not a workspace/);
    expectUsageError(await run('history', []), /give the id/);
  });
});

describe('the service on a busy port', () => {
  let busy: net.Server;
  beforeAll(async () => {
    busy = net.createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
  });
  afterAll(() => new Promise((resolve) => busy.close(resolve)));

  it('says which variable to set, and exits', async () => {
    const port = (busy.address() as net.AddressInfo).port;
    const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
    const env = {
      ...process.env,
      DATABASE_URL: await createTestDatabase(),
      AUTH_JWT_SECRET: testSecret,
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'silent',
      EVENTSTORE_URL: '',
    };
    const outcome = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      execFile(process.execPath, ['--import', 'tsx', 'src/main.ts'], { cwd: root, env, timeout: 60_000 }, (error, _stdout, stderr) =>
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stderr }),
      );
    });
    expect(outcome.code).toBe(1);
    expect(outcome.stderr).toBe(
      `port ${port} on 127.0.0.1 is already in use: set PORT to a free port (for example PORT=${port + 1} npm start)\n`,
    );
  });
});
