import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, verifyRecord, type AuditKeys, type Checkpoint, type Client } from '../../../src/client/index.js';
import { migrate } from '../../../src/infra/migrate.js';
import { migrations } from '../../../src/infra/migrations/index.js';
import { createTestDatabase } from '../../support/database.js';
import { scrape, total } from '../../support/metrics.js';
import { startTestService, type TestService } from '../../support/service.js';
import { runCli } from '../cli-run.js';

/** The organization's latest checkpoint once it covers at least `size` events. */
async function checkpointCovering(api: Client, organizationId: string, size: number): Promise<Checkpoint> {
  for (let attempt = 0; attempt < 400; attempt++) {
    const checkpoint = await api.getCheckpoint({ organization_id: organizationId }).catch(() => undefined);
    if (checkpoint && checkpoint.size >= size) return checkpoint;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`no checkpoint of ${organizationId} covers ${size} events`);
}

const organization = 'org_tamper';

/**
 * Tampering as an attacker with access to PostgreSQL would (events in PostgreSQL): each change to
 * `es_events` is named by `npm run audit:verify` with its stream and version, and fails the
 * client's verifyRecord against a checkpoint signed before it.
 */
describe('npm run audit:verify and verifyRecord against tampering (PostgreSQL mode)', () => {
  let service: TestService;
  let api: Client;
  let keys: AuditKeys;
  let database: pg.Pool;
  let before: Checkpoint;
  const ids: Record<
    'edited' | 'actor' | 'deleted' | 'truncated' | 'beheaded' | 'moved' | 'swapped' | 'disowned' | 'nulled' | 'untouched',
    string
  > = {
    edited: '',
    actor: '',
    deleted: '',
    truncated: '',
    beheaded: '',
    moved: '',
    swapped: '',
    disowned: '',
    nulled: '',
    untouched: '',
  };
  const legacy = { organization: 'org_legacy', workspace: `ws_legacy${randomUUID().slice(0, 8)}` };

  beforeAll(async () => {
    // A database written at the previous migration level: events without hashes, as the service stored them before §16.
    const databaseUrl = await createTestDatabase();
    database = new pg.Pool({ connectionString: databaseUrl, max: 2 });
    await migrate(
      database,
      { eventStore: true },
      migrations.filter((step) => step.version < 8),
    );
    const metadata = (occurred: string) => ({ actor: 'old-writer', request_id: 'r-old', occurred_at: occurred, schema_version: 2 });
    const stream = `workspace-${legacy.workspace}`;
    await database.query('SELECT * FROM es_append_batch($1::jsonb)', [
      JSON.stringify([
        {
          stream,
          expected: '0',
          events: [
            {
              id: randomUUID(),
              type: 'WorkspaceCreated',
              data: { id: legacy.workspace, organization_id: legacy.organization, name: 'Old', description: '', attributes: {} },
              metadata: metadata('2025-01-01T00:00:00.000000Z'),
            },
            {
              id: randomUUID(),
              type: 'WorkspaceUpdated',
              data: { id: legacy.workspace, name: 'Older' },
              metadata: metadata('2025-01-02T00:00:00.000000Z'),
            },
          ],
        },
      ]),
    ]);

    service = await startTestService({ databaseUrl, env: { AUDIT_CHECKPOINT_INTERVAL_MS: '100' } });
    const token = await service.token([organization, legacy.organization]);
    api = createClient({ baseUrl: service.url, token });
    keys = (await (await fetch(`${service.url}/audit-keys`)).json()) as AuditKeys;
    for (const name of Object.keys(ids) as (keyof typeof ids)[]) {
      const workspace = await api.createWorkspace({ organization_id: organization, name, attributes: { step: 1 } });
      await api.updateWorkspace({ id: workspace.id, name: `${name} 2`, attributes: { step: 2 } });
      await api.updateWorkspace({ id: workspace.id, name: `${name} 3`, attributes: { step: 3 } });
      ids[name] = workspace.id;
    }
    before = await checkpointCovering(api, organization, 30);
    await checkpointCovering(api, legacy.organization, 2);
  }, 120_000);
  afterAll(async () => {
    await service?.close();
    await database?.end();
  });

  it('gives events stored before hashes existed their hashes when the tree first reads them', async () => {
    const checkpoint = await api.getCheckpoint({ organization_id: legacy.organization });
    const proof = await api.getWorkspaceProof({ id: legacy.workspace, size: checkpoint.size });
    expect(proof.events.map((event) => event.previous_hash)).toEqual(['0'.repeat(64), proof.events[0]!.hash]);
    expect(await verifyRecord(proof, checkpoint, keys)).toEqual({ valid: true, problems: [] });
    const history = await api.getWorkspaceHistory({ id: legacy.workspace, page: 1, size: 10 });
    expect(history.items.map((item) => item.hash)).toEqual(proof.events.map((event) => event.hash));
    // Appended to now, the stream's chain goes on from the computed hash.
    await api.updateWorkspace({ id: legacy.workspace, name: 'Newest' });
    const after = await checkpointCovering(api, legacy.organization, 3);
    const longer = await api.getWorkspaceProof({ id: legacy.workspace, size: after.size });
    expect(longer.events[2]!.previous_hash).toBe(proof.events[1]!.hash);
    expect(await verifyRecord(longer, after, keys)).toEqual({ valid: true, problems: [] });
  });

  it('finds no break in an untouched log', async () => {
    const outcome = await runCli('src/cli/audit-verify.ts', [], service.databaseUrl);
    expect(outcome.stdout).toMatch(/^no breaks \(\d+ events, 2 trees, \d+ checkpoints\)\n$/);
    expect(outcome.code).toBe(0);
  });

  it('names the organization, stream and version of each change to es_events, exits 1, and fails verifyRecord', async () => {
    const stream = (name: keyof typeof ids) => `workspace-${ids[name]}`;
    const proofs = Object.fromEntries(
      await Promise.all(Object.entries(ids).map(async ([name, id]) => [name, await api.getWorkspaceProof({ id, size: before.size })])),
    );
    // The data of an event; its actor; an event deleted; the last event deleted, which leaves a chain
    // that is whole but short; two events' data swapped; the last event made to look like another program's (a metadata field the hashes do not cover removed), which
    // the service's reads then leave out of the record.
    await database.query(`UPDATE es_events SET data = jsonb_set(data, '{name}', '"forged"') WHERE stream_name = $1 AND version = 2`, [
      stream('edited'),
    ]);
    await database.query(
      `UPDATE es_events SET metadata = jsonb_set(metadata, '{actor}', '"mallory"') WHERE stream_name = $1 AND version = 1`,
      [stream('actor')],
    );
    await database.query('DELETE FROM es_events WHERE stream_name = $1 AND version = 2', [stream('deleted')]);
    await database.query('DELETE FROM es_events WHERE stream_name = $1 AND version = 3', [stream('truncated')]);
    await database.query('DELETE FROM es_events WHERE stream_name = $1 AND version = 1', [stream('beheaded')]);
    // Deleted and put back as it was: the same event, now later in the log than the stream's next ones.
    await database.query(
      `WITH removed AS (DELETE FROM es_events WHERE stream_name = $1 AND version = 1 RETURNING *)
       INSERT INTO es_events (stream_name, version, event_id, type, data, metadata, recorded_at)
       SELECT stream_name, version, event_id, type, data, metadata, recorded_at FROM removed`,
      [stream('moved')],
    );
    await database.query(
      `UPDATE es_events e SET data = o.data FROM es_events o
       WHERE e.stream_name = $1 AND o.stream_name = $1 AND ((e.version = 2 AND o.version = 3) OR (e.version = 3 AND o.version = 2))`,
      [stream('swapped')],
    );
    await database.query(`UPDATE es_events SET metadata = metadata - 'request_id' WHERE stream_name = $1 AND version = 3`, [
      stream('disowned'),
    ]);
    await database.query(`UPDATE es_events SET metadata = 'null'::jsonb WHERE stream_name = $1 AND version = 3`, [stream('nulled')]);

    const outcome = await runCli('src/cli/audit-verify.ts', [], service.databaseUrl);
    expect(outcome.code).toBe(1);
    const lines = outcome.stdout.trimEnd().split('\n');
    const at = (name: keyof typeof ids, version: number) => `organization ${organization}, stream ${stream(name)}, version ${version}: `;
    expect(lines).toContainEqual(
      expect.stringMatching(new RegExp(`^${at('edited', 2)}data_hash is [0-9a-f]{64}, the stored data hashes to`)),
    );
    expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^${at('actor', 1)}hash is [0-9a-f]{64}, the event hashes to`)));
    expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^${at('deleted', 3)}follows version 1: an event before it is missing`)));
    expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^${at('deleted', 2)}leaf \\d+ of the tree has no event in the log`)));
    expect(lines.filter((line) => line.includes(stream('truncated')))).toEqual([
      expect.stringMatching(new RegExp(`^${at('truncated', 3)}leaf \\d+ of the tree has no event in the log`)),
    ]);
    for (const version of [2, 3]) expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^${at('swapped', version)}data_hash is`)));
    expect(lines.filter((line) => line.includes(stream('disowned')))).toEqual([
      expect.stringMatching(new RegExp(`^${at('disowned', 3)}leaf \\d+ of the tree holds this event, but its metadata no longer marks it`)),
    ]);
    expect(lines.filter((line) => line.includes(stream('beheaded')))).toEqual([
      expect.stringMatching(new RegExp(`^${at('beheaded', 2)}follows version 0: an event before it is missing`)),
      expect.stringMatching(new RegExp(`^${at('beheaded', 2)}previous_hash is [0-9a-f]{64}, the previous event's hash is 0{64}$`)),
      expect.stringMatching(new RegExp(`^${at('beheaded', 1)}leaf \\d+ of the tree has no event in the log`)),
    ]);
    expect(lines.filter((line) => line.includes(stream('moved')))).toEqual([
      `${at('moved', 2)}it lies before version 1 in the log's order: one of the two was moved`,
    ]);
    expect(lines.filter((line) => line.includes(stream('untouched')))).toEqual([]);
    expect(lines.at(-1)).toMatch(/^\d+ break\(s\) in \d+ events, 2 trees, \d+ checkpoints$/);

    // The client, holding only a checkpoint signed before and the keys, catches each in the proof it is served now.
    // Metadata made null: the proof still answers, and the event's recomputed hash names it.
    const nulled = await api.getWorkspaceProof({ id: ids.nulled, size: before.size });
    expect((await verifyRecord(nulled, before, keys, ids.nulled)).problems).toContainEqual({
      version: 3,
      message: expect.stringMatching(/^hash is [0-9a-f]{64}, the event hashes to [0-9a-f]{64}$/),
    });
    for (const name of ['edited', 'actor', 'deleted', 'truncated', 'beheaded', 'swapped'] as const) {
      const now = await api.getWorkspaceProof({ id: ids[name], size: before.size });
      const verdict = await verifyRecord(now, before, keys);
      expect(verdict.valid, name).toBe(false);
    }
    // The proof shows the leaves whose events are gone, each proven to be in the tree.
    const truncated = await api.getWorkspaceProof({ id: ids.truncated, size: before.size });
    expect(truncated.events.map((event) => event.version)).toEqual([1, 2]);
    expect(truncated.missing_events).toEqual([
      {
        version: 3,
        leaf_index: proofs.truncated!.events[2]!.leaf_index,
        hash: proofs.truncated!.events[2]!.hash,
        inclusion_path: proofs.truncated!.events[2]!.inclusion_path,
      },
    ]);
    expect((await verifyRecord(truncated, before, keys)).problems).toEqual([
      {
        version: 3,
        message: `leaf ${truncated.missing_events[0]!.leaf_index} of the checkpoint's tree holds this event of the record, which the service no longer has`,
      },
    ]);
    // A missing event the tree does not hold proves nothing, and is said to.
    const unproven = { ...truncated, missing_events: [{ ...truncated.missing_events[0]!, inclusion_path: [] }] };
    expect((await verifyRecord(unproven, before, keys)).problems).toEqual([
      expect.objectContaining({
        version: 3,
        message: expect.stringMatching(/^the proof says this event is missing, but leaf \d+ is not in the checkpoint's tree/),
      }),
    ]);
    // The record's first event gone: the tree still holds its leaf, and the record's organization.
    const beheaded = await api.getWorkspaceProof({ id: ids.beheaded, size: before.size });
    expect(beheaded.events.map((event) => event.version)).toEqual([2, 3]);
    expect(beheaded.missing_events.map((event) => event.version)).toEqual([1]);
    expect((await verifyRecord(beheaded, before, keys, ids.beheaded)).problems).toContainEqual({
      version: 1,
      message: `leaf ${beheaded.missing_events[0]!.leaf_index} of the checkpoint's tree holds this event of the record, which the service no longer has`,
    });
    expect(proofs.untouched!.missing_events).toEqual([]);
    // A proof of another record, served for the one asked about, is refused when the record is named.
    expect(await verifyRecord(proofs.untouched!, before, keys, ids.untouched)).toEqual({ valid: true, problems: [] });
    const ofAnother = await verifyRecord(proofs.untouched!, before, keys, ids.edited);
    expect(ofAnother.valid).toBe(false);
    expect(ofAnother.problems).toContainEqual({
      version: 1,
      message: `the event is in the stream workspace-${ids.untouched}, not the record's workspace-${ids.edited}`,
    });
    const mixed = { ...proofs.untouched!, events: [proofs.untouched!.events[0]!, proofs.disowned!.events[1]!] };
    expect((await verifyRecord(mixed, before, keys)).problems).toContainEqual(
      expect.objectContaining({ version: 2, message: expect.stringMatching(/^the event is in the stream workspace-/) }),
    );
    expect((await verifyRecord(proofs.untouched!, before, keys, 'nope')).problems).toContainEqual({
      message: 'nope is not a workspace or solution id',
    });
    // The disowned event is still in the record's proof, as stored: what its hash covers is intact,
    // so it verifies, and the client sees the event the history now leaves out.
    const disowned = await api.getWorkspaceProof({ id: ids.disowned, size: before.size });
    expect(disowned.events.map((event) => event.version)).toEqual([1, 2, 3]);
    expect(await verifyRecord(disowned, before, keys)).toEqual({ valid: true, problems: [] });
    expect(await verifyRecord(proofs.untouched!, before, keys)).toEqual({ valid: true, problems: [] });
    // Versions may skip another program's events, but the record's first event must be there and
    // the rest in rising order: a proof served without the first, or with two swapped, fails on that too.
    const whole = proofs.untouched!;
    expect((await verifyRecord({ ...whole, events: whole.events.slice(1) }, before, keys)).problems).toContainEqual({
      version: 2,
      message: "expected version 1: the record's first event is missing",
    });
    const swapped = { ...whole, events: [whole.events[0]!, whole.events[2]!, whole.events[1]!] };
    expect((await verifyRecord(swapped, before, keys)).problems).toContainEqual({
      version: 2,
      message: 'expected a version after 3: the event is out of place',
    });
    expect(await verifyRecord(await api.getWorkspaceProof({ id: ids.untouched, size: before.size }), before, keys)).toEqual({
      valid: true,
      problems: [],
    });
    // The event put back is not taken as a new leaf, and the trees go on with the events after it.
    const later = await api.createWorkspace({ organization_id: organization, name: 'after the tampering' });
    const grown = await checkpointCovering(api, organization, before.size + 1);
    const metrics = await scrape(`${service.url}/metrics`);
    expect(total(metrics, 'wsapi_integrity_events_left_out_total', { reason: 'repeated_version' })).toBe(1);
    expect(await verifyRecord(await api.getWorkspaceProof({ id: later.id, size: grown.size }), grown, keys, later.id)).toEqual({
      valid: true,
      problems: [],
    });
  });

  it("names each of the tree's nodes changed, deleted or cut short, and no other", async () => {
    const node = (level: number, index: number) => [organization, level, index];
    await database.query(
      `UPDATE integrity_nodes SET hash = decode(repeat('07', 32), 'hex') WHERE organization_id = $1 AND level = $2 AND index = $3`,
      node(1, 0),
    );
    await database.query('DELETE FROM integrity_nodes WHERE organization_id = $1 AND level = $2 AND index = $3', node(0, 3));
    await database.query(
      `UPDATE integrity_nodes SET hash = decode(repeat('09', 31), 'hex') WHERE organization_id = $1 AND level = $2 AND index = $3`,
      node(2, 0),
    );

    const outcome = await runCli('src/cli/audit-verify.ts', [], service.databaseUrl);
    expect(outcome.code).toBe(1);
    const nodeLines = outcome.stdout.split('\n').filter((line) => / node at level | no node at level /.test(line));
    expect(nodeLines).toEqual([
      `organization ${organization}: the tree has no node at level 0, index 3`,
      expect.stringMatching(
        new RegExp(`^organization ${organization}: node at level 1, index 0 is (07){32}, its leaves hash to [0-9a-f]{64}$`),
      ),
      expect.stringMatching(
        new RegExp(`^organization ${organization}: node at level 2, index 0 is (09){31}, its leaves hash to [0-9a-f]{64}$`),
      ),
    ]);
  });

  it('names a leaf deleted from the tree and one stored outside it, once each, and no node above the deleted one', async () => {
    const { rows } = await database.query<{ size: string }>('SELECT size FROM integrity_trees WHERE organization_id = $1', [organization]);
    const size = Number(rows[0]!.size);
    await database.query('DELETE FROM integrity_leaves WHERE organization_id = $1 AND leaf_index = 9', [organization]);
    await database.query(
      `INSERT INTO integrity_leaves (organization_id, leaf_index, stream_name, version, data_hash, previous_hash, hash)
       SELECT organization_id, 1000000, stream_name || '-forged', version, data_hash, previous_hash, hash
       FROM integrity_leaves WHERE organization_id = $1 AND leaf_index = 10`,
      [organization],
    );

    const outcome = await runCli('src/cli/audit-verify.ts', [], service.databaseUrl);
    expect(outcome.code).toBe(1);
    const lines = outcome.stdout.split('\n');
    expect(lines.filter((line) => / leaf \d+ is (missing from|outside) the tree/.test(line))).toEqual([
      `organization ${organization}: leaf 9 is missing from the tree`,
      `organization ${organization}: leaf 1000000 is outside the tree of ${size} leaves`,
    ]);
    // Only the three nodes changed before, and no checkpoint's root: the deleted leaf counts as its stored node.
    expect(lines.filter((line) => / node at level | no node at level /.test(line))).toHaveLength(3);
    expect(lines.filter((line) => /root_hash is/.test(line))).toEqual([]);
  });

  it("names a tree's size forged past its leaves once, and each run of leaves and nodes that are not there once", async () => {
    await database.query(`UPDATE integrity_trees SET size = 1099511627776 WHERE organization_id = $1`, [organization]);
    const { rows } = await database.query<{ size: string }>(
      `SELECT max(leaf_index) + 1 AS size FROM integrity_leaves WHERE organization_id = $1 AND leaf_index < 1000000`,
      [organization],
    );
    const size = Number(rows[0]!.size);

    const outcome = await runCli('src/cli/audit-verify.ts', [], service.databaseUrl);
    expect(outcome.code).toBe(1);
    const lines = outcome.stdout.split('\n').filter((line) => line.startsWith(`organization ${organization}: `));
    expect(lines).toContainEqual(`organization ${organization}: the tree's size is 1099511627776, its last leaf is 1000000`);
    expect(lines).toContainEqual(`organization ${organization}: leaves ${size} to 999999 are missing from the tree`);
    expect(lines).toContainEqual(`organization ${organization}: the tree has no nodes at level 0, indexes ${size} to 1000000`);
    // A few lines per level, not one per leaf or node.
    expect(lines.length).toBeLessThan(60);
  });
});
