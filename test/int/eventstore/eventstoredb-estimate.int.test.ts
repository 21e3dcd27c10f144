import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventStoreDBEventStore } from '../../../src/eventstore/eventstoredb.js';
import { startOfLog, type GlobalPosition, type NewEvent } from '../../../src/eventstore/port.js';
import { EventStoreDBStandIn } from '../../support/eventstoredb-standin/index.js';

/**
 * The EventStoreDB adapter estimates events between two positions from the log's bytes per event
 * (positions are byte offsets), learnt from the pages it reads: what readiness's backlog, its
 * seconds to catch up and the integrity tree's deferral are computed from.
 */
describe('the EventStoreDB adapter estimating a backlog', () => {
  let standIn: EventStoreDBStandIn;
  let store: EventStoreDBEventStore;
  beforeAll(async () => {
    standIn = await EventStoreDBStandIn.start();
    store = new EventStoreDBEventStore(standIn.url);
  });
  afterAll(async () => {
    await store?.close();
    await standIn?.stop();
  });

  const event = (bytes: number): NewEvent => ({
    id: randomUUID(),
    type: 'WorkspaceUpdated',
    data: { note: 'x'.repeat(bytes) },
    metadata: { request_id: 'req-1', actor: 'user-1' },
  });

  it('learns from the full pages a catch-up reads, and not again from a stretch read again', async () => {
    // Events of about 2 KB, five times the size assumed before any page is read.
    let last: GlobalPosition = startOfLog;
    for (let version = 0n; version < 300n; version += 10n) {
      ({ position: last } = await store.append(
        'workspace-ws_estimate',
        version,
        Array.from({ length: 10 }, () => event(2000)),
      ));
    }
    // As the projector catches up: pages of 100, each full (all 300 events are the service's).
    let read: GlobalPosition = startOfLog;
    const firstPage = await store.readAll(read, 100);
    for (let page = firstPage; page.length > 0; page = await store.readAll(read, 100)) read = page.at(-1)!.position;
    const estimate = store.estimateEventsBetween(firstPage[0]!.position, last);
    // 299 events lie between the first and the last; a full page once taught nothing, and the
    // estimate stayed at the assumed size: about 1,500.
    expect(estimate).toBeGreaterThanOrEqual(150);
    expect(estimate).toBeLessThanOrEqual(600);
    // A readiness probe reads one event at the checkpoint, over and over.
    for (let probe = 0; probe < 5; probe++) await store.readAll(firstPage[10]!.position, 1);
    expect(store.estimateEventsBetween(firstPage[0]!.position, last)).toBe(estimate);
  });
});
