import { describe, expect, it } from 'vitest';
import { RecentStates } from '../../../src/write/recent-states.js';

/** The hash of a stream's last event, kept beside its version. */
const head = 'ab'.repeat(32);

describe('RecentStates', () => {
  it('gives back the version and state last set for a stream, and nothing once forgotten', () => {
    const recent = new RecentStates();
    recent.set('workspace-ws_1', { version: 2n, hash: head }, { status: 'active' });
    expect(recent.get('workspace-ws_1')).toEqual({ head: { version: 2n, hash: head }, state: { status: 'active' } });
    recent.set('workspace-ws_1', { version: 3n, hash: head }, { status: 'deleted' });
    expect(recent.get('workspace-ws_1')).toEqual({ head: { version: 3n, hash: head }, state: { status: 'deleted' } });
    recent.forget('workspace-ws_1');
    expect(recent.get('workspace-ws_1')).toBeUndefined();
  });

  it('keeps within its bytes by dropping the least recently written', () => {
    const state = (n: number) => ({ name: 'x'.repeat(90), n }); // a record of about 160 bytes with its name, version and hash
    const recent = new RecentStates(1500); // room for 9
    for (let i = 0; i < 10; i++) recent.set(`s-${i}`, { version: 1n, hash: head }, state(i));
    expect(recent.get('s-0')).toBeUndefined();
    recent.set('s-1', { version: 2n, hash: head }, state(1)); // written again: now the most recent
    recent.set('s-10', { version: 1n, hash: head }, state(10));
    recent.set('s-11', { version: 1n, hash: head }, state(11));
    expect(recent.get('s-1')).toEqual({ head: { version: 2n, hash: head }, state: state(1) });
    expect(recent.get('s-2')).toBeUndefined();
    expect(recent.get('s-11')).toEqual({ head: { version: 1n, hash: head }, state: state(11) });
  });

  it("going round its buffer many times, gives back each stream's last state or nothing, never an older or a broken one", () => {
    let seed = 7;
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    const recent = new RecentStates(4096);
    const last = new Map<string, { head: { version: bigint; hash: string }; state: unknown }>();
    const written: string[] = [];
    for (let i = 0; i < 20_000; i++) {
      const stream = `workspace-ws_${Math.floor(random() * 200)}`;
      if (random() < 0.05) {
        recent.forget(stream);
        last.delete(stream);
        continue;
      }
      const entry = { head: { version: BigInt(i), hash: head }, state: { i, text: 'é'.repeat(Math.floor(random() * 200)) } };
      recent.set(stream, entry.head, entry.state);
      last.set(stream, entry);
      written.push(stream);
      // The newest records are there: the last few written always fit (at most 512 bytes each here).
      for (const newest of new Set(written.slice(-3))) if (last.has(newest)) expect(recent.get(newest)).toEqual(last.get(newest));
    }
    let kept = 0;
    for (const [stream, entry] of last) {
      const got = recent.get(stream);
      if (got) kept += 1;
      if (got) expect(got).toEqual(entry);
    }
    expect(kept).toBeGreaterThan(5);
  });

  it('hands every reader its own copy of the state', () => {
    const recent = new RecentStates();
    recent.set('workspace-ws_1', { version: 1n, hash: head }, { status: 'active', workspace: { attributes: { team: 'a' } } });
    const first = recent.get<{ workspace: { attributes: Record<string, string> } }>('workspace-ws_1')!;
    first.state.workspace.attributes.team = 'changed by a reader';
    expect(recent.get('workspace-ws_1')!.state).toEqual({ status: 'active', workspace: { attributes: { team: 'a' } } });
  });

  it('does not keep a state too large for a fair share of the budget', () => {
    const recent = new RecentStates(1600);
    recent.set('big', { version: 1n, hash: head }, { documentation: 'x'.repeat(200) });
    expect(recent.get('big')).toBeUndefined();
  });

  it('does not keep a record whose stream name would not read back from UTF-8', () => {
    const recent = new RecentStates(1600);
    recent.set('workspace-\ud800', { version: 1n, hash: head }, { status: 'active' });
    expect(recent.get('workspace-\ud800')).toBeUndefined();
  });
});
