import { execFile } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { generatedKeyFile } from '../../../src/integrity/adapters/signing-key.js';

const run = promisify(execFile);
const racer = path.resolve(import.meta.dirname, '../../support/signing-key-race.ts');

/** The key the embedded default generates in its data directory, by real processes on a real file system. */
describe('the generated signing key', () => {
  let base = '';
  afterAll(() => rm(base, { recursive: true, force: true }));

  it('is one key for instances starting at once on one directory, none reading it half-written', async () => {
    base = await mkdtemp(path.join(tmpdir(), 'signing-key-'));
    const rounds = 20;
    const startAt = Date.now() + 5000;
    const outputs = await Promise.all(
      Array.from({ length: 6 }, () =>
        run(process.execPath, ['--import', 'tsx', racer, base, String(startAt), String(rounds)], { timeout: 60_000 }),
      ),
    );
    const byProcess = outputs.map(({ stdout }) => stdout.trim().split('\n'));
    // The build before this one wrote the file after creating it: 7 of these 120 loads read it half-written.
    expect(byProcess.flat().filter((line) => line.startsWith('failed'))).toEqual([]);
    for (let round = 0; round < rounds; round++) {
      expect(new Set(byProcess.map((lines) => lines[round])).size).toBe(1);
      expect(await readdir(path.join(base, String(round)))).toEqual([generatedKeyFile]);
    }
  });
});
