import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { workspaceAsOf } from '../../../src/audit/adapters/history-reads.js';
import { recordDiff, recordProvenance } from '../../../src/audit/adapters/provenance-reads.js';
import type { Envelope, WorkspaceEvent } from '../../../src/domain/events.js';
import { fromMicros } from '../../../src/domain/timestamp.js';
import type { EventStore, NewEvent } from '../../../src/eventstore/port.js';
import { workspaceStream } from '../../../src/eventstore/stream-names.js';
import { hashAppended, zeroHash } from '../../../src/integrity/hashes.js';
import { PostgresSnapshots } from '../../../src/write/snapshots.js';
import { silentLogger, startStack, type Stack } from '../../support/stack.js';
import { workspaceCreated, workspaceUpdated } from '../../unit/fixtures.js';

/**
 * What provenance, diffs and `as_of` read of a long record (issue 23, item 6): the events from the
 * latest snapshot before the instants asked about, not the record's whole stream. Counted as the
 * events the store hands back, so the figures are exact; how fast they are is `npm run bench:audit`'s.
 */
describe('audit reads of a long record', () => {
  const organizations = new Set(['org_cost']);
  const length = 1000;
  let stack: Stack;
  let snapshots: PostgresSnapshots;
  let counted: EventStore;
  let eventsRead = 0;

  /** A workspace of `length` events, with their hashes or, as before hashes existed, without; the instant of each. */
  async function seed(hashed: boolean): Promise<{ id: string; instants: string[] }> {
    const id = `ws_cost_${randomUUID()}`;
    const streamName = workspaceStream(id);
    const base = 1_700_000_000_000_000n;
    const instants: string[] = [];
    let previous = zeroHash;
    for (let version = 1; version <= length;) {
      const events: NewEvent[] = [];
      const first = version;
      for (; version <= length && events.length < 500; version++) {
        const occurredAt = fromMicros(base + BigInt(version));
        instants.push(occurredAt);
        const actor = { actor: version % 3 === 0 ? 'bob' : 'alice' };
        const event: Envelope<WorkspaceEvent> =
          version === 1
            ? workspaceCreated(occurredAt, { id, organization_id: 'org_cost', attributes: { kept: 'since creation' } }, actor)
            : workspaceUpdated(
                occurredAt,
                { id, name: `name ${Math.floor(version / 70)}`, attributes: { kept: 'since creation', n: version } },
                actor,
              );
        const [hashes] = hashAppended([{ ...event, streamName, version: BigInt(version) }], previous);
        previous = hashes!.hash;
        events.push({
          id: randomUUID(),
          type: event.type,
          data: event.data,
          metadata: hashed ? { ...event.metadata, ...hashes } : event.metadata,
        });
      }
      await stack.store.append(streamName, BigInt(first - 1), events);
    }
    return { id, instants };
  }

  /** The events `read` takes from the store. */
  async function reading<T>(read: () => Promise<T>): Promise<{ answer: T; events: number }> {
    eventsRead = 0;
    const answer = await read();
    return { answer, events: eventsRead };
  }

  beforeAll(async () => {
    stack = await startStack();
    snapshots = new PostgresSnapshots(stack.pool, silentLogger);
    counted = new Proxy(stack.store, {
      get(target, property) {
        if (property === 'readStream') {
          return async (...args: Parameters<EventStore['readStream']>) => {
            const events = await target.readStream(...args);
            eventsRead += events.length;
            return events;
          };
        }
        const value: unknown = Reflect.get(target, property, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
  });
  afterAll(() => stack?.close());

  it('diffs the last ten events and gives provenance by reading from the latest snapshot, with the answers read without snapshots', async () => {
    const { id, instants } = await seed(true);
    const lastTen = () => recordDiff(counted, snapshots, 'workspace', id, organizations, instants[length - 11]!, undefined);
    const provenance = (asOf?: string) => recordProvenance(counted, snapshots, 'workspace', id, organizations, asOf, undefined);
    // The first provenance read of a record folds it whole once and keeps its provenance snapshots.
    const first = await reading(() => provenance());
    expect(first.events).toBeGreaterThanOrEqual(length);
    await new Promise((resolve) => setTimeout(resolve, 200));

    const diff = await reading(lastTen);
    expect(diff.answer.changes.map(({ version }) => version)).toEqual(Array.from({ length: 10 }, (_, index) => length - 9 + index));
    expect(diff.events).toBeLessThan(150);
    const now = await reading(() => provenance());
    expect(now.answer.find(({ path }) => path === '/attributes/kept')).toMatchObject({ version: 1, set_by: 'alice' });
    expect(now.events).toBeLessThan(150);
    const middle = await reading(() => provenance(instants[549]));
    expect(middle.answer.find(({ path }) => path === '/attributes/n')).toMatchObject({ value: 550, version: 550 });
    expect(middle.events).toBeLessThan(150);

    expect(await recordDiff(stack.store, undefined, 'workspace', id, organizations, instants[length - 11]!, undefined)).toEqual(
      diff.answer,
    );
    expect(await recordProvenance(stack.store, undefined, 'workspace', id, organizations, undefined, undefined)).toEqual(now.answer);
    expect(await recordProvenance(stack.store, undefined, 'workspace', id, organizations, instants[549], undefined)).toEqual(middle.answer);
  });

  it('reads a record stored before hashes existed as_of an instant from its snapshot, not whole for a hash it does not use', async () => {
    const { id, instants } = await seed(false);
    const asOf = () => workspaceAsOf(counted, id, organizations, instants[549]!, snapshots);
    await asOf();
    await new Promise((resolve) => setTimeout(resolve, 200));
    const again = await reading(asOf);
    expect(again.answer.attributes).toEqual({ kept: 'since creation', n: 550 });
    expect(again.events).toBeLessThan(150);
  });
});
