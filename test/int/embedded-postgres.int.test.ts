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

type Exit = { code: number | null; signal: NodeJS.Signals | null; at: number };
type Started = { child: ChildProcess; output: () => string; exit: Promise<Exit> };
type Service = Started & { url: string };

/**
 * `npm <args>` typed in a terminal: npm, the shell it runs the script in and the script's process
 * share one process group of their own (a shell job), as in a terminal. The embedded PostgreSQL
 * lives in `dataDir`; nothing else is configured, as for a new user.
 */
function runInTerminal(command: string[], dataDir: string, env: Record<string, string> = {}): Started {
  const child = spawn(command[0]!, command.slice(1), {
    cwd: root,
    env: {
      ...process.env,
      DATABASE_URL: '',
      EVENTSTORE_URL: '',
      AUTH_JWT_SECRET: '',
      DATA_DIR: dataDir,
      LOG_LEVEL: 'info',
      ...env,
    },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exit = new Promise<Exit>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal, at: Date.now() })));
  return { child, output: () => output, exit };
}

/**
 * `npm start` in a terminal, once it answers. The script's shell `exec`s the service, so npm's
 * exit status is the service's own, and a signal npm passes on reaches the service itself.
 */
async function startInTerminal(dataDir: string, through: 'npm start' | 'node' = 'npm start'): Promise<Service> {
  const port = await freePort();
  const command = through === 'npm start' ? ['npm', 'start'] : [process.execPath, '--import', 'tsx', 'src/main.ts'];
  const started = runInTerminal(command, dataDir, { PORT: String(port) });
  const url = `http://127.0.0.1:${port}`;
  await eventually(async () => (await fetch(`${url}/healthz`).catch(() => undefined))?.ok === true, 60_000);
  return { ...started, url };
}

/** Ctrl-C in that terminal: SIGINT to the whole foreground process group. */
const pressCtrlC = (started: Started) => process.kill(-started.child.pid!, 'SIGINT');

/** A request whose body is still arriving: the service is working on it until `finish` sends the rest. */
function requestInFlight(url: string, token: string, body: string) {
  let finish = () => undefined as void;
  const answer = new Promise<{ status: number; text: string }>((resolve, reject) => {
    const request = http.request(
      `${url}/api`,
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
    finish = () => void request.end(body.slice(20));
  });
  return { answer, finish: () => finish() };
}

const tokenOf = (started: Started) => /export TOKEN=(\S+)/.exec(started.output())![1]!;

const postmasterPid = (dataDir: string) => Number(readFileSync(path.join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);

function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Stops whatever a test left running on `dataDir` (only after a failure), and removes it. */
function cleanUp(dataDir: string, started: Started[]): void {
  for (const instance of started)
    if (instance.child.exitCode === null && instance.child.signalCode === null) process.kill(-instance.child.pid!, 'SIGKILL');
  if (existsSync(path.join(dataDir, 'pg', 'postmaster.pid'))) {
    const pid = postmasterPid(dataDir);
    if (running(pid)) process.kill(pid, 'SIGKILL');
  }
  rmSync(dataDir, { recursive: true, force: true });
}

describe('npm start on one DATA_DIR, stopped with Ctrl-C', () => {
  const dataDirs: string[] = [];
  const started: Started[] = [];
  const newDataDir = () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'wsapi-embedded-'));
    dataDirs.push(dataDir);
    return dataDir;
  };
  afterAll(() => dataDirs.forEach((dataDir) => cleanUp(dataDir, started)));

  it('two instances: the first answers the command in flight and stops within seconds, the other keeps answering, and the last one stops PostgreSQL and exits 0', async () => {
    const dataDir = newDataDir();
    const first = await startInTerminal(dataDir);
    started.push(first);
    const second = await startInTerminal(dataDir, 'node');
    started.push(second);
    expect(second.output()).toContain('using the embedded PostgreSQL already running on this data directory');
    const postgres = postmasterPid(dataDir);
    const token = tokenOf(first);
    const call = (instance: Service, query: string, params: unknown) =>
      fetch(`${instance.url}/api`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify({ query, params }),
      });

    // A command in flight when Ctrl-C is pressed: its body is still arriving.
    const inFlight = requestInFlight(
      first.url,
      token,
      JSON.stringify({ query: 'create_workspace', params: { organization_id: 'org_dev', name: 'In flight at Ctrl-C' } }),
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    const pressedAt = Date.now();
    pressCtrlC(first);
    setTimeout(inFlight.finish, 500);
    const answer = await inFlight.answer;
    expect(answer.status, answer.text).toBe(200);
    const firstExit = await first.exit;
    expect(firstExit.code, first.output()).toBe(0);
    expect(firstExit.at - pressedAt).toBeLessThan(8000);
    expect(first.output()).toContain('embedded PostgreSQL left running: other processes still use it');
    expect(first.output()).toMatch(/"msg":"stopped"/);
    expect(first.output()).not.toMatch(/connection lost|terminating connection|again: stopping at once/i);

    // The other instance never lost its database.
    expect(running(postgres)).toBe(true);
    const listed = await call(second, 'list_workspaces', { page: 1, size: 10 });
    expect(listed.status).toBe(200);
    expect(((await listed.json()) as { data: { items: { name: string }[] } }).data.items.map((item) => item.name)).toContain(
      'In flight at Ctrl-C',
    );
    expect((await call(second, 'create_workspace', { organization_id: 'org_dev', name: 'After' })).status).toBe(200);

    pressCtrlC(second);
    expect((await second.exit).code, second.output()).toBe(0);
    expect(second.output()).toContain('embedded PostgreSQL stopped');
    await eventually(() => !running(postgres), 10_000);
    expect(existsSync(path.join(dataDir, 'pg', 'postmaster.pid'))).toBe(false);
  });

  it('SIGTERM to npm alone, as a supervisor sends it, stops the service cleanly and leaves no process behind', async () => {
    const dataDir = newDataDir();
    const service = await startInTerminal(dataDir);
    started.push(service);
    const postgres = postmasterPid(dataDir);
    process.kill(service.child.pid!, 'SIGTERM');
    const exit = await service.exit;
    expect(exit.code, service.output()).toBe(0);
    expect(service.output()).toMatch(/"msg":"stopped"/);
    expect(service.output()).toContain('embedded PostgreSQL stopped');
    // npm and the service shared one process group: none of it is left, nor PostgreSQL.
    await eventually(() => !running(-service.child.pid!), 10_000);
    await eventually(() => !running(postgres), 10_000);
  });

  it('a second Ctrl-C a second or more after the first forces the stop at once, and says so', async () => {
    const service = await startInTerminal(newDataDir());
    started.push(service);
    // A request that never finishes arriving holds the orderly stop up.
    const stuck = requestInFlight(
      service.url,
      tokenOf(service),
      JSON.stringify({ query: 'list_workspaces', params: { page: 1, size: 1 } }),
    );
    stuck.answer.catch(() => undefined); // its connection is cut by the forced stop: that is the point
    await new Promise((resolve) => setTimeout(resolve, 200));
    pressCtrlC(service);
    await eventually(() => service.output().includes('shutting down'), 5000);
    await new Promise((resolve) => setTimeout(resolve, 1200));
    const pressedAgainAt = Date.now();
    pressCtrlC(service);
    const exit = await service.exit;
    expect(exit.code, service.output()).toBe(130);
    expect(exit.at - pressedAgainAt).toBeLessThan(3000);
    expect(service.output()).toContain('SIGINT again: stopping at once');
    expect(service.output()).toContain('forced stop: the embedded PostgreSQL is left running, and the next start uses it');
  });
});

describe('an operator tool that starts the embedded PostgreSQL, stopped with Ctrl-C', () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'wsapi-embedded-tool-'));
  const started: Started[] = [];
  afterAll(() => cleanUp(dataDir, started));

  it('npm run projections:verify stops at once and leaves no PostgreSQL behind', async () => {
    const tool = runInTerminal(['npm', 'run', 'projections:verify'], dataDir);
    started.push(tool);
    // Pressed while the tool is using the database it started for itself.
    await eventually(() => tool.output().includes('embedded PostgreSQL started'), 60_000);
    const postgres = postmasterPid(dataDir);
    pressCtrlC(tool);
    const exit = await tool.exit;
    expect(exit.code, tool.output()).toBe(130);
    expect(tool.output()).toContain('interrupted by SIGINT');
    expect(tool.output()).toContain('embedded PostgreSQL stopped');
    await eventually(() => !running(postgres), 10_000);
    expect(existsSync(path.join(dataDir, 'pg', 'postmaster.pid'))).toBe(false);
  });
});
