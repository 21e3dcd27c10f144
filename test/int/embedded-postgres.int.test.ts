import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import http from 'node:http';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/infra/embedded-postgres.js';
import { eventually } from '../support/stack.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** `npm start` in a terminal: its own process group (a shell job), embedded PostgreSQL in `dataDir`. */
type Started = { child: ChildProcess; url: string; output: () => string; exit: Promise<{ code: number | null; at: number }> };

async function startInTerminal(dataDir: string, env: Record<string, string> = {}): Promise<Started> {
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: root,
    env: {
      ...process.env,
      DATABASE_URL: '',
      EVENTSTORE_URL: '',
      AUTH_JWT_SECRET: '',
      DATA_DIR: dataDir,
      PORT: String(port),
      LOG_LEVEL: 'info',
      ...env,
    },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exit = new Promise<{ code: number | null; at: number }>((resolve) =>
    child.once('exit', (code) => resolve({ code, at: Date.now() })),
  );
  const url = `http://127.0.0.1:${port}`;
  await eventually(async () => (await fetch(`${url}/healthz`).catch(() => undefined))?.ok === true, 60_000);
  return { child, url, output: () => output, exit };
}

/** Ctrl-C in that terminal: SIGINT to the whole foreground process group. */
const pressCtrlC = (started: Started) => process.kill(-started.child.pid!, 'SIGINT');

const postmasterPid = (dataDir: string) => Number(readFileSync(path.join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);

function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

describe('the embedded PostgreSQL shared by two instances on one DATA_DIR, stopped with Ctrl-C', () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'wsapi-embedded-'));
  const started: Started[] = [];
  afterAll(async () => {
    for (const instance of started) if (instance.child.exitCode === null) process.kill(-instance.child.pid!, 'SIGKILL');
    if (existsSync(path.join(dataDir, 'pg', 'postmaster.pid'))) {
      const pid = postmasterPid(dataDir);
      if (running(pid)) process.kill(pid, 'SIGKILL');
    }
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('finishes the request in flight, keeps the other instance answering, exits promptly, and the last one stops PostgreSQL', async () => {
    const first = await startInTerminal(dataDir);
    started.push(first);
    const second = await startInTerminal(dataDir);
    started.push(second);
    expect(second.output()).toContain('using the embedded PostgreSQL already running on this data directory');
    const postgres = postmasterPid(dataDir);
    const token = /export TOKEN=(\S+)/.exec(first.output())![1]!;
    const call = (instance: Started, query: string, params: unknown) =>
      fetch(`${instance.url}/api`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify({ query, params }),
      });

    // A command in flight when Ctrl-C is pressed: its body is still arriving.
    const body = JSON.stringify({ query: 'create_workspace', params: { organization_id: 'org_dev', name: 'In flight at Ctrl-C' } });
    const pressedAt = Date.now();
    const inFlight = new Promise<{ status: number; text: string }>((resolve, reject) => {
      const request = http.request(
        `${first.url}/api`,
        {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), authorization: `Bearer ${token}` },
        },
        (response) => {
          let text = '';
          response.on('data', (chunk: Buffer) => (text += chunk.toString()));
          response.on('end', () => resolve({ status: response.statusCode!, text }));
        },
      );
      request.on('error', reject);
      request.write(body.slice(0, 20));
      setTimeout(() => {
        pressCtrlC(first);
        setTimeout(() => request.end(body.slice(20)), 500);
      }, 200);
    });
    const answer = await inFlight;
    expect(answer.status, answer.text).toBe(200);
    const firstExit = await first.exit;
    expect(firstExit.code).toBe(0);
    expect(firstExit.at - pressedAt).toBeLessThan(5000);
    expect(first.output()).toContain('embedded PostgreSQL left running: other processes still use it');
    expect(first.output()).not.toMatch(/connection lost|terminating connection/i);

    // The other instance never lost its database.
    expect(running(postgres)).toBe(true);
    const listed = await call(second, 'list_workspaces', { page: 1, size: 10 });
    expect(listed.status).toBe(200);
    expect(((await listed.json()) as { data: { items: { name: string }[] } }).data.items.map((item) => item.name)).toContain(
      'In flight at Ctrl-C',
    );
    expect((await call(second, 'create_workspace', { organization_id: 'org_dev', name: 'After' })).status).toBe(200);

    pressCtrlC(second);
    expect((await second.exit).code).toBe(0);
    expect(second.output()).toContain('embedded PostgreSQL stopped');
    await eventually(() => !running(postgres), 10_000);
    expect(existsSync(path.join(dataDir, 'pg', 'postmaster.pid'))).toBe(false);
  });
});
