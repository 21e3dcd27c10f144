import { execFile } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { decodeJwt } from 'jose';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/infra/migrate.js';
import { createTestDatabase } from '../support/database.js';
import { EventStoreDBStandIn } from '../support/eventstoredb-standin/index.js';
import { testSecret } from '../support/secret.js';
import { runCli, startCli, type CliOutcome } from './cli-run.js';

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
    [['--org', 'org_a', '--expires', '99999999d'], /--expires 99999999d is longer than 10 years/],
    [['--org', 'org_a', '--expires', '0s'], /--expires 0s makes a token that has already expired/],
    [['--org', 'org_a', '--sub', ''], /--sub must be 1 to 255 characters/],
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
    expectUsageError(await run('projections:rebuild', ['--batch-size', '0']), /--batch-size must be a whole number from 1 to/);
    expectUsageError(await run('history', ['nope']), /nope is not a workspace/);
    expectUsageError(await run('history', []), /give the id/);
    expectUsageError(await run('history', ['ws_']), /ws_ is not a workspace/);
    expectUsageError(await run('projections:rebuild', ['--batch-size', '99999999999']), /--batch-size must be a whole number from 1 to/);
    expectUsageError(await run('projections:dead-letters', ['list', '--note', 'x']), /--by and --note go with retry or skip/);
    for (const id of ['99999999999999999999', '9223372036854775808']) {
      expectUsageError(await run('projections:dead-letters', ['retry', id]), /retry needs the id of a dead letter, as list shows it/);
    }
  });

  it('token says so when it makes a development secret, which a service on another DATA_DIR does not share', async () => {
    const dataDir = await mkdtemp(path.join(tmpdir(), 'token-'));
    const first = await run('token', ['--org', 'org_a'], { DATA_DIR: dataDir, DATABASE_URL: '' });
    expect(first.code).toBe(0);
    expect(first.stderr).toMatch(new RegExp(`^no development secret in ${dataDir} \\(DATA_DIR\\): made a new one there`));
    const second = await run('token', ['--org', 'org_a'], { DATA_DIR: dataDir, DATABASE_URL: '' });
    expect(second.stderr).toMatch(/^minted a token/);
  });

  it.each(['projections:verify', 'projections:rebuild', 'projections:dead-letters', 'history', 'audit:verify'] as const)(
    '%s refuses a database the service has never run on, and leaves it as it was',
    async (tool) => {
      const empty = await createTestDatabase();
      const args = {
        'projections:verify': [],
        // With events in PostgreSQL, such a database has no log to rebuild from either.
        'projections:rebuild': [],
        'projections:dead-letters': ['list'],
        history: ['ws_V1StGXR8_Z5jdHi6B-myT'],
        'audit:verify': [],
      }[tool];
      const outcome = await runCli({ ...tools, 'audit:verify': 'src/cli/audit-verify.ts' }[tool], args, empty, {
        AUTH_JWT_SECRET: testSecret,
      });
      expect(outcome.code).toBeGreaterThan(0);
      expect(outcome.stderr).toMatch(
        /the database holds none of the service's tables: the service has never run on it; check DATABASE_URL/,
      );
      expect(outcome.stdout).toBe('');
      const pool = new pg.Pool({ connectionString: empty, max: 1 });
      const { rows } = await pool.query("SELECT count(*)::int AS tables FROM pg_tables WHERE schemaname = 'public'");
      await pool.end();
      expect(rows[0].tables).toBe(0);
    },
  );

  it('projections:rebuild fills a fresh read database when the events are in EventStoreDB', async () => {
    const standIn = await EventStoreDBStandIn.start();
    try {
      const fresh = await createTestDatabase();
      const outcome = await runCli('src/cli/rebuild.ts', [], fresh, { AUTH_JWT_SECRET: testSecret, EVENTSTORE_URL: standIn.url });
      expect(outcome.code, outcome.stderr).toBe(0);
      expect(outcome.stdout).toMatch(
        /^rebuilt workspaces, solutions, organization_counts, workspace_solution_counts, changes from 0 events/,
      );
    } finally {
      await standIn.stop();
    }
  });

  it('audit:verify with the event store unreachable says so in one line and exits 2, not 1 (a break)', async () => {
    const readDatabase = await createTestDatabase();
    const pool = new pg.Pool({ connectionString: readDatabase, max: 1 });
    await migrate(pool, { eventStore: false });
    await pool.end();
    const outcome = await runCli('src/cli/audit-verify.ts', [], readDatabase, { EVENTSTORE_URL: 'esdb://127.0.0.1:1?tls=false' });
    expect(outcome.stderr).toMatch(/^audit:verify failed: the event store cannot be reached\n$/);
    expect(outcome.code).toBe(2);
  });
});

/** Runs the service as `npm start` does, until it exits by itself. */
function runService(env: NodeJS.ProcessEnv): Promise<{ code: number | null; stderr: string }> {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', 'src/main.ts'], { cwd: root, env, timeout: 60_000 }, (error, _stdout, stderr) =>
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stderr }),
    );
  });
}

describe('a DATABASE_URL that cannot be used', () => {
  const unreachable = 'postgresql://postgres:hunter2@127.0.0.1:1/gone';
  const says =
    'the database at DATABASE_URL (postgresql://postgres:***@127.0.0.1:1/gone) could not be used: connect ECONNREFUSED 127.0.0.1:1\n';

  it('stops the service with one line naming the variable, its password hidden', async () => {
    const env = {
      ...process.env,
      DATABASE_URL: unreachable,
      AUTH_JWT_SECRET: testSecret,
      PORT: '0',
      LOG_LEVEL: 'silent',
      EVENTSTORE_URL: '',
    };
    const outcome = await runService(env);
    expect(outcome).toEqual({ code: 1, stderr: `failed to start: ${says}` });
  });

  // Every tool that could not do its work exits 2, whatever it is (1 is a tool's answer: differences, breaks, no such record).
  it.each([
    ['src/cli/verify.ts', [], 'verify'],
    ['src/cli/rebuild.ts', [], 'rebuild'],
    ['src/cli/dead-letters.ts', ['list'], 'dead letters'],
    ['src/cli/history.ts', ['ws_V1StGXR8_Z5jdHi6B-myT'], 'history'],
    ['src/cli/audit-verify.ts', [], 'audit:verify'],
  ])('stops an operator tool the same way, with status 2: %s', async (tool, args, name) => {
    const outcome = await runCli(tool, args, unreachable);
    expect({ code: outcome.code, stderr: outcome.stderr }).toEqual({ code: 2, stderr: `${name} failed: ${says}` });
  });
});

describe('a tool interrupted while it connects', () => {
  let silent: net.Server;
  const sockets = new Set<net.Socket>();
  beforeAll(async () => {
    // Takes connections and never answers: the tool waits for its connection's timeout.
    silent = net.createServer((socket) => sockets.add(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  });
  afterAll(() => {
    for (const socket of sockets) socket.destroy();
    return new Promise((resolve) => silent.close(resolve));
  });

  it('exits 130, as after any Ctrl-C, not 2 for the connection it gave up', async () => {
    const { port } = silent.address() as net.AddressInfo;
    const child = startCli('src/cli/verify.ts', [], `postgresql://postgres@127.0.0.1:${port}/silent`);
    let stderr = '';
    child.stderr!.on('data', (chunk) => (stderr += chunk));
    // Interrupted once its connection is on its way, not before the tool has begun.
    const deadline = Date.now() + 20_000;
    while (sockets.size === 0) {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`the tool never connected: ${stderr}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    child.kill('SIGINT');
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect({ code, stderr }).toEqual({ code: 130, stderr: 'interrupted by SIGINT\n' });
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
    const env = {
      ...process.env,
      DATABASE_URL: await createTestDatabase(),
      AUTH_JWT_SECRET: testSecret,
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'silent',
      EVENTSTORE_URL: '',
    };
    const outcome = await runService(env);
    expect(outcome.code).toBe(1);
    expect(outcome.stderr).toBe(
      `port ${port} on 127.0.0.1 is already in use: set PORT to a free port (for example PORT=${port + 1} npm start)\n`,
    );
  });
});
