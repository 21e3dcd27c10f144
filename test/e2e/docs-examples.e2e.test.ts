import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fencedBlocks, type Block } from '../support/markdown.js';
import { callApi, startTestService, type TestService } from '../support/service.js';
import type { Result } from '../../src/client/index.js';
import { allScopes, checkpointCovering, expectOk, sleep } from './helpers.js';

/**
 * The shell examples of the README and of the API reference, run as a new user pastes them: every
 * ```sh block of a document, in order, in one bash, against a real service on a fresh database,
 * with the development token (organization org_dev, subject dev-user, every scope) in TOKEN.
 * A ```json block right after an example is the answer it must print, generated ids, timestamps
 * and request ids aside; an example without one must print only successes (`{"data": ...}`).
 * Commands that are not examples (installing, starting or testing the project) are fenced
 * ```shell, so they are not run.
 */

const documents = ['README.md', 'docs/api.md'];
/** The address the examples are written for, as `npm start` prints it. */
const documentedAddress = 'http://127.0.0.1:8080';

type Example = { line: number; commands: string; answer?: Block };

function examplesIn(markdown: string): Example[] {
  const lines = markdown.split('\n');
  const blocks = fencedBlocks(markdown);
  return blocks.flatMap((block, index) => {
    if (block.info !== 'sh') return [];
    const next = blocks[index + 1];
    const besideIt = next?.info === 'json' && lines.slice(block.endLine, next.line - 1).every((line) => line.trim() === '');
    return [{ line: block.line, commands: block.text, ...(besideIt ? { answer: next } : {}) }];
  });
}

/** Generated values: they differ on every run, so each is compared by the order it first appeared in. */
const generated: [kind: string, pattern: RegExp][] = [
  ['ws', /^ws_[A-Za-z0-9_-]{21}$/],
  ['sol', /^sol_[A-Za-z0-9_-]{21}$/],
  ['timestamp', /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/],
  ['request id', /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/],
  // Event hashes (contract §16) cover the timestamps: they differ on every run too. 64 zeros, the first previous_hash, recurs as itself.
  ['hash', /^(?!0{64}$)[0-9a-f]{64}$/],
  // A change feed cursor (a log position as base64url): its value depends on the store.
  ['cursor', /^[A-Za-z0-9_-]{22}$/],
];

/**
 * Replaces each generated value by `<kind n>`, n counting the distinct values of that kind seen so
 * far in the document: so an answer matches the documented one when the same values recur in the
 * same places (a solution's `workspace_id` is the workspace created before it). Members are visited
 * in name order, as their order may differ between event stores (jsonb sorts them).
 */
function placeholders(): (value: unknown) => unknown {
  const seen = new Map<string, string>();
  const counts = new Map<string, number>();
  const replace = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(replace);
    if (typeof value === 'object' && value !== null) {
      const entries = Object.entries(value).sort(([a], [b]) => (a < b ? -1 : 1));
      return Object.fromEntries(entries.map(([key, member]) => [key, replace(member)]));
    }
    if (typeof value !== 'string') return value;
    const kind = generated.find(([, pattern]) => pattern.test(value))?.[0];
    if (kind === undefined) return value;
    let placeholder = seen.get(value);
    if (placeholder === undefined) {
      const count = (counts.get(kind) ?? 0) + 1;
      counts.set(kind, count);
      placeholder = `<${kind} ${count}>`;
      seen.set(value, placeholder);
    }
    return placeholder;
  };
  return replace;
}

function parsed(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    // Not JSON: the raw text, so the failure shows what was printed.
    return text;
  }
}

type Run = { code: number | null; stdout: string; stderr: string };

/** The real curl where installed, else the stand-in beside the test support (Node's fetch behind the options the examples use). */
const curlStandIn = fileURLToPath(new URL('../support/curl-stand-in', import.meta.url));
const curlInstalled = (process.env.PATH ?? '').split(path.delimiter).some((directory) => existsSync(path.join(directory, 'curl')));
const examplesPath = curlInstalled ? process.env.PATH : `${curlStandIn}${path.delimiter}${process.env.PATH}`;

/**
 * Runs a script in bash with only PATH and TOKEN set, so the user's own curl settings and proxies
 * play no part. Its stdin is not a socket, or bash would read ~/.bashrc as if started by rshd.
 */
function bash(script: string, token: string): Promise<Run> {
  return runProcess('bash', ['-c', script], { PATH: examplesPath, TOKEN: token });
}

/** Runs a program to its end with only `env` for environment, and what it printed. */
function runProcess(command: string, args: string[], env: NodeJS.ProcessEnv): Promise<Run> {
  const child = spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'], timeout: 50_000 });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** Printed before each example, so that the run's output splits into what each printed. */
const marker = (index: number) => `@@ example ${index} @@`;
const markerLine = /\n@@ example \d+ @@\n/;

describe.each(documents)(`the examples of %s, with ${curlInstalled ? 'curl' : 'the curl stand-in (no curl installed)'}`, (document) => {
  let service: TestService;
  beforeAll(async () => {
    service = await startTestService();
  });
  afterAll(() => service?.close());

  it('answer as documented when run in order', async () => {
    const examples = examplesIn(readFileSync(document, 'utf8'));
    expect(examples.length, `${document} has no sh examples`).toBeGreaterThan(0);
    const where = (example: Example) => `${document}:${example.line}`;
    // -e and -u: a failing command or a variable never set stops the run in the broken example.
    const script = ['set -eu', ...examples.map((example, index) => `printf '\\n${marker(index)}\\n'\n${example.commands}`)]
      .join('\n')
      .replaceAll(documentedAddress, service.url);
    const run = await bash(script, await service.token(['org_dev'], allScopes, 'dev-user'));
    const printed = run.stdout.split(markerLine).slice(1);
    const last = examples[printed.length - 1];
    expect.soft({ code: run.code, stderr: run.stderr }, last && `bash, whose last example run is at ${where(last)}`).toEqual({
      code: 0,
      stderr: '',
    });

    const documentedValues = placeholders();
    const printedValues = placeholders();
    for (const [index, example] of examples.slice(0, printed.length).entries()) {
      const output = printed[index]!.trim();
      if (example.answer) {
        expect
          .soft(printedValues(parsed(output)), `${where(example)}: the answer documented at line ${example.answer.line}`)
          .toEqual(documentedValues(parsed(example.answer.text)));
      } else {
        for (const line of output.split('\n').filter(Boolean)) {
          expect
            .soft(Object.keys(parsed(line) as object), `${where(example)}: every answer a success, but one was ${line}`)
            .toEqual(['data']);
        }
      }
    }
  });
});

/**
 * The README's webhook receiver, run as pasted (its port aside), given a delivery signed by the
 * standardwebhooks package whose body arrives in two parts, split inside a character, as a body of
 * a few kilobytes arrives over a real network.
 */
describe("the README's webhook receiver", () => {
  it('accepts a signed delivery whose body arrives split inside a character', async () => {
    const receiver = fencedBlocks(readFileSync('README.md', 'utf8')).find(
      (block) => block.info === 'js' && block.text.includes("from 'standardwebhooks'"),
    );
    expect(receiver).toBeDefined();
    expect(receiver!.text).toContain('.listen(4000)');
    const secret = `whsec_${Buffer.from('a secret of the test, 32 bytes!!').toString('base64')}`;
    const child = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        receiver!.text
          .replace('.listen(4000)', '.listen(0, () => console.log(server.address().port))')
          .replace('createServer(', 'const server = createServer('),
      ],
      {
        env: { ...process.env, SECRET: secret },
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    try {
      const port = await new Promise<number>((resolve, reject) => {
        child.stdout.once('data', (chunk: Buffer) => resolve(Number(chunk.toString().trim().split('\n')[0])));
        child.once('exit', (code) => reject(new Error(`the receiver exited with code ${code}`)));
      });
      const payload = JSON.stringify({
        type: 'WorkspaceCreated',
        timestamp: '2026-11-28T10:00:00.000Z',
        data: { workspace_id: 'ws_x', name: 'Café' },
      });
      const id = 'msg_test';
      const sentAt = new Date();
      const signature = new StandardWebhook(secret).sign(id, sentAt, payload);
      const bytes = Buffer.from(payload);
      const split = bytes.indexOf(Buffer.from('é')) + 1;
      const status = await new Promise<string>((resolve, reject) => {
        const socket = connect({ port, host: '127.0.0.1' });
        let answer = '';
        socket.on('data', (chunk: Buffer) => (answer += chunk.toString()));
        socket.once('end', () => resolve(answer.split(' ')[1] ?? ''));
        socket.once('error', reject);
        socket.write(
          `POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: ${bytes.length}\r\n` +
            `webhook-id: ${id}\r\nwebhook-timestamp: ${Math.floor(sentAt.getTime() / 1000)}\r\nwebhook-signature: ${signature}\r\n\r\n`,
        );
        socket.write(bytes.subarray(0, split));
        // The second part on its own, once the first has been read.
        setTimeout(() => socket.end(bytes.subarray(split)), 200);
      });
      expect(status).toBe('204');
    } finally {
      child.kill();
    }
  });
});

/**
 * The README's TypeScript examples (the typed client, proving the history), run as a user's script
 * by Node with tsx against a real service: the package's import pointed at the client's source
 * (test/int/client-package.int.test.ts type-checks them against the built package), the address
 * at the service, and the record the auditor proves at one made here.
 */
describe("the README's TypeScript examples", () => {
  const examples = fencedBlocks(readFileSync('README.md', 'utf8')).filter((block) => block.info === 'ts');
  const example = (imports: string) => examples.find((block) => block.text.includes(imports));
  const clientSource = pathToFileURL(path.resolve('src/client/index.ts')).href;
  let service: TestService;
  let token: string;
  let directory: string;
  beforeAll(async () => {
    // Checkpoints signed often, so that one soon covers the record proved.
    service = await startTestService({ env: { AUDIT_CHECKPOINT_INTERVAL_MS: '100' } });
    token = await service.token(['org_dev'], allScopes, 'dev-user');
    directory = mkdtempSync(path.join(tmpdir(), 'readme-examples-'));
    // The examples are ES modules (top-level await), in a project of that type, as the README says.
    writeFileSync(path.join(directory, 'package.json'), JSON.stringify({ type: 'module' }));
  });
  afterAll(async () => {
    await service?.close();
    rmSync(directory, { recursive: true, force: true });
  });

  /** Runs `block` as a module of its own, with `replacements` made (each must be there), and only PATH and TOKEN in its environment. */
  function run(block: Block, replacements: [documented: string, actual: string][]): Promise<Run> {
    const file = path.join(directory, `example-${block.line}.ts`);
    const all: [string, string][] = [
      ["'workspace-solution-api/client'", `'${clientSource}'`],
      [documentedAddress, service.url],
      ...replacements,
    ];
    for (const [documented] of all) expect(block.text, `the example at README.md:${block.line}`).toContain(documented);
    const text = all.reduce((script, [documented, actual]) => script.replaceAll(documented, actual), block.text);
    writeFileSync(file, text);
    return runProcess(process.execPath, ['--import', 'tsx', file], { PATH: process.env.PATH, TOKEN: token });
  }

  it('the typed client creates, lists and reports a missing record as the comments say', async () => {
    const block = example('ApiError, createClient');
    expect(block, 'the typed client example').toBeDefined();
    const outcome = await run(block!, []);
    expect({ code: outcome.code, stderr: outcome.stderr }).toEqual({ code: 0, stderr: '' });
    expect(outcome.stdout).toMatch(/^Forecasting 0\nnot_found [0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\n$/);
  });

  it("an auditor verifies a record and the log's consistency from a kept checkpoint, as the comments say", async () => {
    const block = example('verifyRecord');
    const documentedId = /'(ws_[A-Za-z0-9_-]{21})'/.exec(block?.text ?? '')?.[1];
    expect(documentedId, 'the proving example, and the workspace id it proves').toBeDefined();
    const workspace = expectOk(await callApi(service, token, 'create_workspace', { organization_id: 'org_dev', name: 'Audited' }));
    expectOk(await callApi(service, token, 'update_workspace', { id: workspace.id, name: 'Audited again' }));
    // The checkpoint "kept last month": the first to cover both events, as a proof against the
    // latest gives it (404 until the organization's first checkpoint is signed). Then the log grows
    // past it, so that the consistency proof the example asks for spans two different trees.
    let kept: Result<'get_checkpoint'> | undefined;
    for (let attempt = 0; kept === undefined; attempt++) {
      const proof = await callApi(service, token, 'get_workspace_proof', { id: workspace.id });
      if (proof.status === 200 && proof.body.data.events.length === 2) kept = proof.body.data.checkpoint;
      else {
        expect(attempt, 'a checkpoint covering the record').toBeLessThan(400);
        await sleep(50);
      }
    }
    expectOk(await callApi(service, token, 'update_workspace', { id: workspace.id, name: 'Audited once more' }));
    await checkpointCovering(service, token, 'org_dev', kept.size + 1);
    const keptInExample = "await api.getCheckpoint({ organization_id: 'org_dev' }); // the checkpoint you kept last month";
    const outcome = await run(block!, [
      [documentedId!, workspace.id],
      [keptInExample, `${JSON.stringify(kept)}; // the checkpoint kept`],
    ]);
    expect({ code: outcome.code, stderr: outcome.stderr }).toEqual({ code: 0, stderr: '' });
    expect(outcome.stdout).toBe('{ valid: true, problems: [] }\n{ valid: true, problems: [] }\n');
  });
});
