import { describe, expect, it } from 'vitest';
import { RecentStates } from '../../../src/write/recent-states.js';

describe('RecentStates', () => {
  it('gives back the version and state last set for a stream, and nothing once forgotten', () => {
    const recent = new RecentStates();
    recent.set('workspace-ws_1', 2n, { status: 'active' });
    expect(recent.get('workspace-ws_1')).toEqual({ version: 2n, state: { status: 'active' } });
    recent.set('workspace-ws_1', 3n, { status: 'deleted' });
    expect(recent.get('workspace-ws_1')).toEqual({ version: 3n, state: { status: 'deleted' } });
    recent.forget('workspace-ws_1');
    expect(recent.get('workspace-ws_1')).toBeUndefined();
  });

  it('keeps within its byte budget by dropping the least recently used', () => {
    const state = (n: number) => ({ name: 'x'.repeat(90), n }); // about 100 bytes serialized
    const recent = new RecentStates(1000);
    for (let i = 0; i < 9; i++) recent.set(`s-${i}`, 1n, state(i));
    recent.get('s-0'); // used again: now the most recent
    recent.set('s-9', 1n, state(9));
    recent.set('s-10', 1n, state(10));
    expect(recent.get('s-0')).toBeDefined();
    expect(recent.get('s-1')).toBeUndefined();
    expect(recent.get('s-10')).toBeDefined();
  });

  it('hands every reader its own copy of the state', () => {
    const recent = new RecentStates();
    recent.set('workspace-ws_1', 1n, { status: 'active', workspace: { attributes: { team: 'a' } } });
    const first = recent.get<{ workspace: { attributes: Record<string, string> } }>('workspace-ws_1')!;
    first.state.workspace.attributes.team = 'changed by a reader';
    expect(recent.get('workspace-ws_1')!.state).toEqual({ status: 'active', workspace: { attributes: { team: 'a' } } });
  });

  it('does not keep a state too large for a fair share of the budget', () => {
    const recent = new RecentStates(1600);
    recent.set('big', 1n, { documentation: 'x'.repeat(200) });
    expect(recent.get('big')).toBeUndefined();
  });
});
