import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresCommandIndex, type CommandIndexMark, type IndexEntry } from '../../../src/write/command-index.js';
import { silentLogger, startStack, type Stack } from '../../support/stack.js';

/** The command index's table (src/write/command-index.ts): its mark moves only from the mark a writer read, with its entries. */
describe('the command index in PostgreSQL', () => {
  let stack: Stack;
  let index: PostgresCommandIndex;
  const streamName = 'workspace-ws_index';

  beforeAll(async () => {
    stack = await startStack();
    index = new PostgresCommandIndex(stack.pool, silentLogger);
  });
  afterAll(() => stack?.close());

  const mark = (through: number): CommandIndexMark => ({
    through: BigInt(through),
    eventId: `event-${through}`,
    headHash: `hash-${through}`,
  });
  const entry = (commandId: string, first: number, last = first): IndexEntry => ({
    commandId,
    span: { first: BigInt(first), last: BigInt(last) },
  });
  const state = async () => {
    const looked = await index.lookup(streamName, ['a', 'b', 'c', 'forged']);
    return { through: looked?.mark?.through, found: Object.fromEntries(looked?.found ?? []) };
  };

  it('moves the mark and adds its entries together, only from the mark expected, by event id or head hash', async () => {
    expect(await index.lookup(streamName, ['a'])).toEqual({ mark: undefined, found: new Map() });
    await index.advance(streamName, { expected: undefined, entries: [entry('a', 2, 3)], mark: mark(3) });
    // A writer that saw no mark either does nothing now: the first one's mark stands.
    await index.advance(streamName, { expected: undefined, entries: [entry('forged', 1)], mark: mark(9) });
    expect(await state()).toEqual({ through: 3n, found: { a: { first: 2n, last: 3n } } });

    // From a mark that is not the stream's (another version, or another event there): nothing moves.
    await index.advance(streamName, { expected: { through: 2n, eventId: 'event-2' }, entries: [entry('forged', 4)], mark: mark(4) });
    await index.advance(streamName, { expected: { through: 3n, eventId: 'other' }, entries: [entry('forged', 4)], mark: mark(4) });
    await index.advance(streamName, { expected: { through: 3n, headHash: 'other' }, entries: [entry('forged', 4)], mark: mark(4) });
    expect(await state()).toEqual({ through: 3n, found: { a: { first: 2n, last: 3n } } });

    await index.advance(streamName, { expected: { through: 3n, eventId: 'event-3' }, entries: [entry('b', 4)], mark: mark(4) });
    await index.advance(streamName, {
      expected: { through: 4n, headHash: 'hash-4' },
      entries: [entry('a', 9), entry('c', 5)],
      mark: mark(5),
    });
    // A command's first run stays where it was.
    expect(await state()).toEqual({
      through: 5n,
      found: { a: { first: 2n, last: 3n }, b: { first: 4n, last: 4n }, c: { first: 5n, last: 5n } },
    });
  });

  it('moves of one stream asked in a row land in that order', async () => {
    const other = 'workspace-ws_in_a_row';
    const moves = [1, 2, 3, 4].map((through) =>
      index.advance(other, {
        expected: through === 1 ? undefined : { through: BigInt(through - 1), headHash: `hash-${through - 1}` },
        entries: [entry(`command-${through}`, through)],
        mark: mark(through),
      }),
    );
    await Promise.all(moves);
    const looked = await index.lookup(other, ['command-1', 'command-4']);
    expect(looked?.mark).toEqual(mark(4));
    expect(looked?.found.size).toBe(2);
  });

  it('read whole again (a void mark), the stream’s entries are replaced: those the log does not hold go', async () => {
    await index.advance(streamName, {
      expected: { through: 5n, eventId: 'event-5' },
      entries: [entry('c', 1), entry('b', 2)],
      mark: mark(2),
      replace: true,
    });
    expect(await state()).toEqual({ through: 2n, found: { b: { first: 2n, last: 2n }, c: { first: 1n, last: 1n } } });
  });
});
