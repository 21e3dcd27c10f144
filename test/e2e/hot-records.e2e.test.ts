import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { workspaceStream } from '../../src/eventstore/stream-names.js';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { ok, projectionsVerifiable, unverifiableNote, verifyProjections } from './helpers.js';

/**
 * A record's age and popularity (issue 21): a record with many events and many writers at once
 * answers as a new one does. These tests assert what is answered; how fast is `npm run bench`'s.
 */
describe('hot records: long histories and concurrent writers of one record', () => {
  let service: TestService;
  let token: string;
  const org = 'org_hot';

  beforeAll(async () => {
    service = await startTestService();
    token = await service.token([org]);
  });
  afterAll(() => service?.close());

  /** A workspace with `updates` updates after its creation, each setting attribute `n`. */
  async function recordWithHistory(updates: number): Promise<{ id: string; versions: { updated_at: string; n: number }[] }> {
    const created = await ok(service, token, 'create_workspace', { organization_id: org, name: 'long-lived' });
    const versions = [{ updated_at: created.updated_at, n: 0 }];
    for (let n = 1; n <= updates; n++) {
      const updated = await ok(service, token, 'update_workspace', { id: created.id, name: `v${n}`, attributes: { n } });
      versions.push({ updated_at: updated.updated_at, n });
    }
    return { id: created.id, versions };
  }

  it('pages a history by its versions: every page holds its own events, the total counts them all', async () => {
    const { id } = await recordWithHistory(24);
    const whole = await ok(service, token, 'get_workspace_history', { id, page: 1, size: 100 });
    expect(whole.total).toBe(25);
    expect(whole.items.map((item) => item.version)).toEqual(Array.from({ length: 25 }, (_, index) => index + 1));

    for (const size of [1, 7, 10]) {
      const pages = [];
      for (let page = 1; page <= Math.ceil(25 / size); page++) {
        const answer = await ok(service, token, 'get_workspace_history', { id, page, size });
        expect({ total: answer.total, page: answer.page, size: answer.size }).toEqual({ total: 25, page, size });
        pages.push(...answer.items);
      }
      expect(pages).toEqual(whole.items);
    }
    const pastTheEnd = await ok(service, token, 'get_workspace_history', { id, page: 4, size: 10 });
    expect(pastTheEnd).toEqual({ total: 25, page: 4, size: 10, items: [] });

    const outsider = await service.token(['org_elsewhere']);
    expect((await callApi(service, outsider, 'get_workspace_history', { id, page: 2, size: 10 })).status).toBe(404);
  });

  it(`answers history pages and as_of alike from snapshots, without them, and past a corrupt one, which verify reports and a read repairs${unverifiableNote}`, async () => {
    const { id, versions } = await recordWithHistory(230);
    const database = new pg.Pool({ connectionString: service.databaseUrl, max: 1 });
    const snapshotsOf = async () =>
      (
        await database.query<{ version: string }>('SELECT version::text FROM record_snapshots WHERE stream_name = $1 ORDER BY version', [
          workspaceStream(id),
        ])
      ).rows.map((row) => Number(row.version));
    const verify = () => verifyProjections(service);
    /** Every answer that depends on where the fold starts: as_of at each change's instant (and just before), and the history pages. */
    const answers = async () => {
      const asOf = [];
      for (const { updated_at: at, n } of versions.filter((_, index) => index % 9 === 0 || index >= 228)) {
        const record = await ok(service, token, 'get_workspace', { id, as_of: at });
        expect(record.attributes.n ?? 0).toBe(n);
        asOf.push(record);
      }
      const pages = [];
      for (const page of [1, 2, 3]) pages.push(await ok(service, token, 'get_workspace_history', { id, page, size: 100 }));
      return { asOf, pages };
    };
    try {
      // The appends took one every 100 versions.
      expect(await snapshotsOf()).toEqual([100, 200]);
      // And brought the command index up to the stream's end then, though no command was keyed: a keyed one reads only the events since.
      const indexedThrough = async () =>
        Number(
          (
            await database.query<{ through: string }>(
              'SELECT indexed_through::text AS through FROM record_command_marks WHERE stream_name = $1',
              [workspaceStream(id)],
            )
          ).rows[0]?.through ?? 0,
        );
      await expect.poll(indexedThrough).toBeGreaterThanOrEqual(200);
      const withSnapshots = await answers();

      await database.query('DELETE FROM record_snapshots WHERE stream_name = $1', [workspaceStream(id)]);
      expect(await answers()).toEqual(withSnapshots);
      // Reading from the first event again kept the snapshots it passed.
      await expect.poll(snapshotsOf).toEqual([100, 200]);

      await database.query(`UPDATE record_snapshots SET state = replace(state, '"v1', '"corrupted') WHERE stream_name = $1`, [
        workspaceStream(id),
      ]);
      if (projectionsVerifiable) {
        const reported = await verify();
        expect(reported.code).toBe(1);
        expect(reported.stdout).toContain(`snapshot ${workspaceStream(id)}@200: corrupt`);
      }
      expect(await answers()).toEqual(withSnapshots);
      if (projectionsVerifiable) {
        const repaired = await verify();
        expect(repaired.stdout, repaired.stderr).toMatch(
          /^no differences .*\n\d+ snapshot\(s\) agree with the log\n(the command index of \d+ stream\(s\) agrees with the log\n)?$/,
        );
      }
    } finally {
      await database.end();
    }
  });

  /** `writers` concurrent updates of `id` through `instances` in turn, each adding its own attribute key, some with an Idempotency-Key. */
  async function concurrentWriters(instances: TestService[], id: string, writers: number, eventsBefore: number) {
    const answers = await Promise.all(
      Array.from({ length: writers }, (_, n) =>
        callApi(
          instances[n % instances.length]!,
          token,
          'update_workspace',
          { id, name: `writer ${n}`, attributes: { [`writer${n}`]: n } },
          n % 4 === 0 ? { 'idempotency-key': `${id}-writer-${n}` } : {},
        ),
      ),
    );
    expect(answers.map((answer) => answer.status)).toEqual(Array(writers).fill(200));
    const record = await ok(service, token, 'get_workspace', { id });
    expect(
      Object.keys(record.attributes)
        .filter((key) => key.startsWith('writer'))
        .sort(),
    ).toEqual(Array.from({ length: writers }, (_, n) => `writer${n}`).sort());
    // Each update applied exactly once.
    expect((await ok(service, token, 'get_workspace_history', { id, page: 1, size: 1 })).total).toBe(eventsBefore + writers);
  }

  it('twenty concurrent writers of one record all succeed, and every key each added survives (contract §7)', async () => {
    const { id } = await recordWithHistory(0);
    await concurrentWriters([service], id, 20, 1);
  });

  it('two instances, ten writers each on one record: no error, every update applied once', async () => {
    const other = await startTestService({ databaseUrl: service.databaseUrl, runProjector: false });
    try {
      const { id } = await recordWithHistory(3);
      await concurrentWriters([service, other], id, 20, 4);
    } finally {
      await other.close();
    }
  });

  it('beyond RECORD_QUEUE_LIMIT waiting commands, a keyed one is refused with 429 and Retry-After, never a 5xx, and its key stays free (contract §7)', async () => {
    const limited = await startTestService({ databaseUrl: service.databaseUrl, runProjector: false, env: { RECORD_QUEUE_LIMIT: '2' } });
    const database = new pg.Client({ connectionString: service.databaseUrl });
    await database.connect();
    try {
      const { id } = await recordWithHistory(0);
      const update = (n: number) =>
        callApi(
          limited,
          token,
          'update_workspace',
          { id, name: `queued ${n}`, attributes: { [`queued${n}`]: n } },
          { 'idempotency-key': `${id}-queued-${n}` },
        );
      // The first command's group stops at its command-index lookup while the lock is held: the others queue behind it.
      await database.query('BEGIN');
      await database.query('LOCK TABLE record_command_marks IN ACCESS EXCLUSIVE MODE');
      let answered = 0;
      const answers = Array.from({ length: 10 }, (_, n) => update(n).finally(() => (answered += 1)));
      await expect.poll(() => answered, { timeout: 20_000 }).toBe(7);
      await database.query('COMMIT');
      const statuses = await Promise.all(answers);
      expect(statuses.map((answer) => answer.status).sort()).toEqual([...Array(3).fill(200), ...Array(7).fill(429)]);
      for (const refused of statuses.filter((answer) => answer.status === 429)) {
        expect(refused.body).toMatchObject({ error: { code: 'rate_limited' } });
        expect(refused.headers.get('retry-after')).toBe('1');
      }
      // Each refused command runs when retried with its key, and every command is applied once.
      for (const [n, answer] of statuses.entries()) if (answer.status === 429) expect((await update(n)).status).toBe(200);
      const record = await ok(service, token, 'get_workspace', { id });
      expect(Object.keys(record.attributes).sort()).toEqual(Array.from({ length: 10 }, (_, n) => `queued${n}`).sort());
      expect((await ok(service, token, 'get_workspace_history', { id, page: 1, size: 1 })).total).toBe(11);
    } finally {
      await database.end();
      await limited.close();
    }
  });
});
