import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/database.js';
import { eventually } from '../support/stack.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('a service started as a process by a test or a bench', () => {
  const left: number[] = [];
  afterEach(() => {
    for (const pid of left.splice(0)) if (alive(pid)) process.kill(pid, 'SIGKILL');
  });

  it('stops when the process that started it dies of an uncaught error', async () => {
    const run = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/service-process/dies-with-a-service.ts'], {
      cwd: root,
      env: { ...process.env, FIXTURE_DATABASE_URL: await createTestDatabase() },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    run.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    run.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => run.once('exit', resolve));
    expect(output).toContain('the run dies before it stops its service');
    expect(code).not.toBe(0);
    const pid = Number(output.split('\n')[0]);
    expect(Number.isInteger(pid) && pid > 0, output).toBe(true);
    left.push(pid);
    await eventually(() => !alive(pid), 15_000);
  });
});
