import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callApi, startTestService, type TestService } from '../support/service.js';

/**
 * Contract §9: a new record's created_at is never earlier than that of a record whose creation was
 * already acknowledged. Many clients create at once while a reader pages through everything; every
 * record older than something acknowledged before a read started must be in that read.
 */
describe('list stability under concurrent creates', () => {
  let service: TestService;
  let token: string;

  beforeAll(async () => {
    service = await startTestService();
    token = await service.token(['org_stable']);
  });
  afterAll(() => service?.close());

  it('never shows a record after a later-created one was acknowledged', async () => {
    const acknowledged: { createdAt: string; at: number }[] = [];
    const deadline = performance.now() + 3000;
    const creators = Array.from({ length: 12 }, async (_, client) => {
      for (let n = 0; performance.now() < deadline; n++) {
        const answer = await callApi(service, token, 'create_workspace', { organization_id: 'org_stable', name: `c${client}-${n}` });
        expect(answer.status).toBe(200);
        acknowledged.push({ createdAt: answer.body.data.created_at, at: performance.now() });
      }
    });

    const reads: { startedAt: number; seen: Set<string> }[] = [];
    const reader = (async () => {
      while (performance.now() < deadline) {
        const startedAt = performance.now();
        const seen = new Set<string>();
        for (let page = 1; ; page++) {
          const answer = await callApi(service, token, 'list_workspaces', { page, size: 100 });
          for (const item of answer.body.data.items) seen.add(item.id);
          if (answer.body.data.items.length < 100) break;
        }
        reads.push({ startedAt, seen });
      }
    })();
    await Promise.all([...creators, reader]);

    const all = [];
    for (let page = 1; ; page++) {
      const answer = await callApi(service, token, 'list_workspaces', { page, size: 100 });
      all.push(...answer.body.data.items);
      if (answer.body.data.items.length < 100) break;
    }
    expect(reads.length).toBeGreaterThan(3);
    const violations: string[] = [];
    for (const read of reads) {
      const newestAcknowledged = acknowledged
        .filter((ack) => ack.at < read.startedAt)
        .reduce((newest, ack) => (ack.createdAt > newest ? ack.createdAt : newest), '');
      for (const record of all) {
        if (record.created_at < newestAcknowledged && !read.seen.has(record.id)) violations.push(`${record.id} ${record.created_at}`);
      }
    }
    expect(violations).toEqual([]);
  });
});
