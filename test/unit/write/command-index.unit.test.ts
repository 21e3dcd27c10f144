import { describe, expect, it } from 'vitest';
import { commandEntries } from '../../../src/write/command-index.js';

describe('commandEntries', () => {
  it('gives each keyed command the first run of its events, versions in a row, and leaves unkeyed events out', () => {
    const events = [
      { version: 1n, commandId: undefined },
      { version: 2n, commandId: 'a' },
      { version: 3n, commandId: 'a' },
      { version: 4n, commandId: 'b' },
      { version: 5n, commandId: 'a' },
      { version: 7n, commandId: 'b' },
    ];
    expect(commandEntries(events)).toEqual([
      { commandId: 'a', span: { first: 2n, last: 3n } },
      { commandId: 'b', span: { first: 4n, last: 4n } },
    ]);
    expect(commandEntries([])).toEqual([]);
  });
});
