import { generateKeyPairSync } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, verifyConsistency, verifyRecord, type AuditKeys, type Checkpoint, type Client } from '../../../src/client/index.js';
import { hashAppended, zeroHash } from '../../../src/integrity/hashes.js';
import { createTestDatabase } from '../../support/database.js';
import { startTestService, type TestService } from '../../support/service.js';
import { runCli } from '../cli-run.js';

const organization = 'org_rotation';
const newKey = () => generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();

async function checkpointCovering(api: Client, size: number): Promise<Checkpoint> {
  for (let attempt = 0; attempt < 400; attempt++) {
    const checkpoint = await api.getCheckpoint({ organization_id: organization }).catch(() => undefined);
    if (checkpoint && checkpoint.size >= size) return checkpoint;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`no checkpoint covers ${size} events`);
}

/**
 * Keys and rewrites, on one database (events in PostgreSQL): a new signing key keeps the old
 * checkpoints verifiable, and a rewrite of a whole chain that also rebuilds the tree and re-signs
 * it (all `audit:verify` can see is consistent) fails against a checkpoint the auditor kept.
 */
describe('signing-key rotation and a rewrite of the whole history', () => {
  let databaseUrl: string;
  let service: TestService;
  let api: Client;
  let database: pg.Pool;
  let workspaceId: string;
  let kept: Checkpoint;
  let firstKeyId: string;

  const start = async (key: string) => {
    service = await startTestService({ databaseUrl, env: { AUDIT_CHECKPOINT_INTERVAL_MS: '100', AUDIT_SIGNING_KEY: key } });
    api = createClient({ baseUrl: service.url, token: await service.token([organization]) });
  };
  const auditKeys = async () => (await (await fetch(`${service.url}/audit-keys`)).json()) as AuditKeys;

  beforeAll(async () => {
    databaseUrl = await createTestDatabase();
    database = new pg.Pool({ connectionString: databaseUrl, max: 2 });
    await start(newKey());
    const workspace = await api.createWorkspace({ organization_id: organization, name: 'First', attributes: { v: 1 } });
    await api.updateWorkspace({ id: workspace.id, name: 'Second' });
    workspaceId = workspace.id;
    kept = await checkpointCovering(api, 2);
    firstKeyId = kept.key_id;
  }, 120_000);
  afterAll(async () => {
    await service?.close();
    await database?.end();
  });

  it('keeps the retired key published, so checkpoints signed before a rotation still verify', async () => {
    await service.close();
    await start(newKey());
    await api.updateWorkspace({ id: workspaceId, name: 'Third' });
    const later = await checkpointCovering(api, 3);
    const keys = await auditKeys();
    expect(later.key_id).not.toBe(firstKeyId);
    expect(keys.keys.map((key) => key.kid).sort()).toEqual([firstKeyId, later.key_id].sort());
    const proof = await api.getConsistencyProof({ organization_id: organization, from_size: kept.size, to_size: later.size });
    expect(await verifyConsistency(kept, later, proof, keys)).toEqual({ valid: true, problems: [] });
    expect(await verifyRecord(await api.getWorkspaceProof({ id: workspaceId, size: kept.size }), kept, keys)).toEqual({
      valid: true,
      problems: [],
    });
  });

  it('catches, from a kept checkpoint, a history rewritten with its chain recomputed and its tree rebuilt and re-signed', async () => {
    await service.close();
    // The attacker rewrites the first event's data, recomputes every hash of the stream, empties the trees so they are rebuilt from the rewritten log.
    const stream = `workspace-${workspaceId}`;
    await database.query(`UPDATE es_events SET data = jsonb_set(data, '{name}', '"Rewritten"') WHERE stream_name = $1 AND version = 1`, [
      stream,
    ]);
    const { rows } = await database.query<{ version: string; type: string; data: unknown; metadata: Record<string, unknown> }>(
      'SELECT version, type, data, metadata FROM es_events WHERE stream_name = $1 ORDER BY version',
      [stream],
    );
    const rehashed = hashAppended(
      rows.map((row) => ({ streamName: stream, version: BigInt(row.version), type: row.type, data: row.data, metadata: row.metadata })),
      zeroHash,
    );
    for (const [index, row] of rows.entries()) {
      await database.query('UPDATE es_events SET metadata = $3::jsonb WHERE stream_name = $1 AND version = $2', [
        stream,
        row.version,
        JSON.stringify({ ...row.metadata, ...rehashed[index] }),
      ]);
    }
    await database.query(
      'TRUNCATE integrity_leaves, integrity_nodes, integrity_trees, integrity_streams, integrity_checkpoints; UPDATE integrity_progress SET commit_position = 0, prepare_position = 0',
    );
    await start(newKey());
    const resigned = await checkpointCovering(api, 3);
    const keys = await auditKeys();

    // Everything the service holds now agrees with itself:
    const audit = await runCli('src/cli/audit-verify.ts', [], databaseUrl);
    expect(audit.stdout).toMatch(/^no breaks/);
    expect(await verifyRecord(await api.getWorkspaceProof({ id: workspaceId }), resigned, keys)).toEqual({ valid: true, problems: [] });
    // but not with the checkpoint the auditor kept.
    const proof = await api.getConsistencyProof({ organization_id: organization, from_size: resigned.size, to_size: resigned.size });
    const verdict = await verifyConsistency(kept, resigned, { ...proof, from: kept }, keys);
    expect(verdict.valid).toBe(false);
    expect(verdict.problems).toContainEqual({ message: expect.stringContaining('the log was rewritten') });
    const now = await api.getWorkspaceProof({ id: workspaceId, size: resigned.size });
    expect((await verifyRecord(now, kept, keys)).valid).toBe(false);
  });
});
