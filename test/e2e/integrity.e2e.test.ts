import { createPublicKey, verify } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalJson, createClient, verifyConsistency, verifyRecord, type AuditKeys } from '../../src/client/index.js';
import { hashEvent } from '../../src/integrity/hashes.js';
import { eventStoreUrlFor } from '../support/event-store.js';
import { writeRawEvent } from '../support/foreign-writes.js';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { runCli } from '../int/cli-run.js';
import { checkpointCovering, expectError, rawPost } from './helpers.js';

describe('tamper-evident history (contract §16)', () => {
  let service: TestService;
  let token: string;
  let keys: AuditKeys;

  beforeAll(async () => {
    service = await startTestService({ env: { AUDIT_CHECKPOINT_INTERVAL_MS: '100' } });
    token = await service.token(['org_proof']);
  });
  afterAll(() => service?.close());

  it('publishes its signing keys at /audit-keys without a token, as an Ed25519 JWKS', async () => {
    const answer = await rawPost(service, undefined, {}, '/audit-keys', 'GET');
    expect(answer.status).toBe(200);
    keys = answer.body;
    expect(keys.keys.length).toBeGreaterThanOrEqual(1);
    for (const key of keys.keys) expect(key).toMatchObject({ kty: 'OKP', crv: 'Ed25519', kid: expect.any(String), x: expect.any(String) });
  });

  it("proves a record's events in a signed checkpoint, which the client's verifyRecord accepts against /audit-keys", async () => {
    const api = createClient({ baseUrl: service.url, token });
    const workspace = await api.createWorkspace({ organization_id: 'org_proof', name: 'Ledger', attributes: { n: 1.5 } });
    await api.updateWorkspace({ id: workspace.id, name: 'Ledger 2', attributes: { n: null, m: [1, 'two'] } });
    await api.createSolution({ workspace_id: workspace.id, name: 'S' });
    const checkpoint = await checkpointCovering(service, token, 'org_proof', 3);

    // The signature checked with node:crypto alone, against the published key.
    const jwk = keys.keys.find((key) => key.kid === checkpoint.key_id)!;
    const { organization_id, size, root_hash, timestamp } = checkpoint;
    const publicKey = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x! }, format: 'jwk' });
    const signed = Buffer.from(canonicalJson({ organization_id, size, root_hash, timestamp }));
    expect(verify(null, signed, publicKey, Buffer.from(checkpoint.signature, 'base64url'))).toBe(true);

    const proof = await api.getWorkspaceProof({ id: workspace.id, size: checkpoint.size });
    expect(proof.checkpoint).toEqual(checkpoint);
    expect(proof.events.map((event) => [event.version, event.type, event.stream])).toEqual([
      [1, 'WorkspaceCreated', `workspace-${workspace.id}`],
      [2, 'WorkspaceUpdated', `workspace-${workspace.id}`],
    ]);
    expect(await verifyRecord(proof, checkpoint, keys)).toEqual({ valid: true, problems: [] });

    // The history shows the same hashes.
    const history = await api.getWorkspaceHistory({ id: workspace.id, page: 1, size: 10 });
    expect(history.items.map((item) => item.hash)).toEqual(proof.events.map((event) => event.hash));
    expect(history.items[0]!.previous_hash).toBe('0'.repeat(64));
    expect(history.items[1]!.previous_hash).toBe(history.items[0]!.hash);

    // Anything changed in the answer is caught.
    const altered = structuredClone(proof);
    altered.events[1]!.stored_data = { ...altered.events[1]!.stored_data, name: 'Forged' };
    const verdict = await verifyRecord(altered, checkpoint, keys);
    expect(verdict.valid).toBe(false);
    expect(verdict.problems).toContainEqual({ version: 2, message: expect.stringContaining('data_hash') });
    const resigned = { ...checkpoint, root_hash: 'a'.repeat(64) };
    expect((await verifyRecord(proof, resigned, keys)).problems[0]!.message).toContain('signature does not verify');
  });

  it('proves that a later checkpoint extends an earlier one', async () => {
    const api = createClient({ baseUrl: service.url, token });
    const older = await checkpointCovering(service, token, 'org_proof', 1);
    const workspace = await api.createWorkspace({ organization_id: 'org_proof', name: 'More' });
    await api.deleteWorkspace({ id: workspace.id });
    const newer = await checkpointCovering(service, token, 'org_proof', older.size + 2);
    const proof = await api.getConsistencyProof({ organization_id: 'org_proof', from_size: older.size, to_size: newer.size });
    expect(await verifyConsistency(older, newer, proof, keys)).toEqual({ valid: true, problems: [] });
    expect(await api.getCheckpoint({ organization_id: 'org_proof', size: older.size })).toEqual(older);
    const solutionProof = await api.getSolutionProof({ id: (await api.listSolutions({ page: 1, size: 1 })).items[0]!.id });
    expect(solutionProof.events).toHaveLength(1);
    expect(await verifyRecord(solutionProof, solutionProof.checkpoint, keys)).toEqual({ valid: true, problems: [] });
  });

  it('answers any read scope, and 404 for an organization or record not the caller’s, or a size never signed', async () => {
    const readsSolutions = await service.token(['org_proof'], 'solutions:read');
    expect((await callApi(service, readsSolutions, 'get_checkpoint', { organization_id: 'org_proof' })).status).toBe(200);
    const writesOnly = await service.token(['org_proof'], 'workspaces:write');
    expectError(await callApi(service, writesOnly, 'get_checkpoint', { organization_id: 'org_proof' }), 403, 'forbidden');
    const outsider = await service.token(['org_other']);
    expectError(await callApi(service, outsider, 'get_checkpoint', { organization_id: 'org_proof' }), 404, 'not_found');
    const workspace = (await callApi(service, token, 'create_workspace', { organization_id: 'org_proof', name: 'X' })).body.data;
    expectError(await callApi(service, outsider, 'get_workspace_proof', { id: workspace.id }), 404, 'not_found');
    expectError(await callApi(service, token, 'get_checkpoint', { organization_id: 'org_proof', size: 999_999 }), 404, 'not_found');
    expectError(
      await callApi(service, token, 'get_consistency_proof', { organization_id: 'org_proof', from_size: 3, to_size: 2 }),
      400,
      'validation_error',
    );
  });

  it('catches an event another writer appended to a service stream with forged hashes: verifyRecord and audit:verify', async () => {
    const api = createClient({ baseUrl: service.url, token });
    const workspace = await api.createWorkspace({ organization_id: 'org_proof', name: 'Target' });
    const [created] = (await api.getWorkspaceHistory({ id: workspace.id, page: 1, size: 10 })).items;
    const stream = `workspace-${workspace.id}`;
    const data = { id: workspace.id, name: 'Taken over' };
    const metadata = { actor: 'intruder', request_id: 'forged', occurred_at: '2099-01-01T00:00:00.000000Z', schema_version: 2 };
    // Its data_hash and previous_hash are right; its hash is not the hash of what it says.
    const honest = hashEvent({ streamName: stream, version: 2n, type: 'WorkspaceUpdated', data, metadata }, created!.hash);
    await writeRawEvent(service.databaseUrl, stream, {
      type: 'WorkspaceUpdated',
      data,
      metadata: { ...metadata, ...honest, hash: 'f'.repeat(64) },
    });
    const history = await api.getWorkspaceHistory({ id: workspace.id, page: 1, size: 10 });
    expect(history.total).toBe(2);
    // Once the tree has read it and a checkpoint covers it.
    let proof = await api.getWorkspaceProof({ id: workspace.id });
    for (let attempt = 0; proof.events.length < 2 && attempt < 400; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      proof = await api.getWorkspaceProof({ id: workspace.id });
    }
    const { checkpoint } = proof;
    const verdict = await verifyRecord(proof, checkpoint, keys);
    expect(verdict.problems).toEqual([{ version: 2, message: `hash is ${'f'.repeat(64)}, the event hashes to ${honest.hash}` }]);

    const eventStoreUrl = await eventStoreUrlFor(service.databaseUrl);
    const audit = await runCli('src/cli/audit-verify.ts', [], service.databaseUrl, eventStoreUrl ? { EVENTSTORE_URL: eventStoreUrl } : {});
    expect(audit.code).toBe(1);
    expect(audit.stdout).toContain(`organization org_proof, stream ${stream}, version 2: hash is ${'f'.repeat(64)}, the event hashes to`);
  });
});
