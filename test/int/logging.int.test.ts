import { spawn } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { freePort } from '../../src/infra/embedded-postgres.js';
import { createTestDatabase } from '../support/database.js';
import { testSecret } from '../support/secret.js';
import { startServiceProcess, type ServiceProcess } from '../support/service-process.js';
import { eventually } from '../support/stack.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
// eslint-disable-next-line no-control-regex -- terminal colour codes start with ESC
const ansi = /\x1b\[[0-9;]*m/g;

describe('logs', () => {
  const stops: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const stop of stops.splice(0)) await stop();
  });

  it('piped (a collector, the container): JSON lines, one per request', async () => {
    const service: ServiceProcess = await startServiceProcess({ databaseUrl: await createTestDatabase(), env: { LOG_LEVEL: 'info' } });
    stops.push(() => service.signal('SIGTERM'));
    const response = await fetch(`${service.url}/healthz`, { headers: { 'x-request-id': 'logged-once' } });
    expect(response.status).toBe(200);
    await eventually(() => service.output().includes('"request_id":"logged-once"'));
    const lines = service.output().trim().split('\n');
    for (const line of lines) expect(() => JSON.parse(line), line).not.toThrow();
    const about = lines
      .map((line) => JSON.parse(line) as { request_id?: string; msg: string })
      .filter((entry) => entry.request_id === 'logged-once');
    expect(about.map((entry) => entry.msg)).toEqual(['request']);
  });

  it('an answered error is one line too: the request line carries its code and message', async () => {
    const service: ServiceProcess = await startServiceProcess({ databaseUrl: await createTestDatabase(), env: { LOG_LEVEL: 'info' } });
    stops.push(() => service.signal('SIGTERM'));
    const token = await service.token(['org_log']);
    const refused = await fetch(`${service.url}/api`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'x-request-id': 'refused-once' },
      body: JSON.stringify({ query: 'get_workspace', params: { id: 'ws_missing' } }),
    });
    expect(refused.status).toBe(404);
    const unknownPath = await fetch(`${service.url}/nowhere`, { headers: { 'x-request-id': 'nowhere-once' } });
    expect(unknownPath.status).toBe(404);
    await eventually(() => service.output().includes('"request_id":"nowhere-once"'));
    const about = (id: string) =>
      service
        .output()
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as Record<string, unknown>)
        .filter((entry) => entry.request_id === id);
    expect(about('refused-once')).toEqual([
      expect.objectContaining({ level: 30, msg: 'request', status: 404, code: 'not_found', error: 'workspace not found' }),
    ]);
    expect(about('nowhere-once')).toEqual([
      expect.objectContaining({ level: 30, msg: 'request', status: 404, code: 'not_found', error: 'no such endpoint' }),
    ]);
  });

  it('a client that goes away in the middle of its body is noted at info, not logged as the service failing', async () => {
    const service: ServiceProcess = await startServiceProcess({ databaseUrl: await createTestDatabase(), env: { LOG_LEVEL: 'info' } });
    stops.push(() => service.signal('SIGTERM'));
    const { port } = new URL(service.url);
    const socket = net.connect(Number(port), '127.0.0.1');
    await once(socket, 'connect');
    socket.write(
      `POST /api HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${await service.token(['org_log'])}\r\nContent-Type: application/json\r\n` +
        'x-request-id: gone-mid-body\r\nContent-Length: 100\r\n\r\n{"query":',
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    socket.destroy();
    await eventually(() => service.output().includes('"request_id":"gone-mid-body"') && service.output().includes('"msg":"request"'));
    const about = service
      .output()
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { request_id?: string; level: number; msg: string; err?: unknown })
      .filter((entry) => entry.request_id === 'gone-mid-body');
    expect(about.filter((entry) => entry.level >= 40)).toEqual([]);
    expect(about.map((entry) => entry.msg)).toContain('the client went away before its request was read');
  });

  it('on a terminal (npm start): human-readable lines', async () => {
    const port = await freePort();
    // `script` gives the service a pseudo-terminal, as a developer's shell does.
    const child = spawn('script', ['-qfec', `${process.execPath} --import tsx src/main.ts`, '/dev/null'], {
      cwd: root,
      env: {
        ...process.env,
        DATABASE_URL: await createTestDatabase(),
        AUTH_JWT_SECRET: testSecret,
        PORT: String(port),
        LOG_LEVEL: 'info',
        EVENTSTORE_URL: '',
      },
      detached: true,
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    stops.push(async () => {
      process.kill(-child.pid!, 'SIGKILL');
    });
    const lines = () => output.replace(ansi, '').split(/\r?\n/).filter(Boolean);
    // The service's own line, written after fastify's "Server listening at": both pretty-printed.
    await eventually(() => lines().some((line) => /^\[\d{2}:\d{2}:\d{2}\.\d{3}\] INFO: listening/.test(line)), 30_000);
    expect(lines().filter((line) => line.startsWith('{'))).toEqual([]);
  });
});
