import type { Logger } from 'pino';
import type { LoggedEvent } from '../eventstore/event-log.js';
import type { Pool } from '../infra/postgres.js';

/**
 * Where each keyed command's events sit in its record's stream (issue 21), so that a keyed
 * command looks its id up instead of reading the whole stream to see whether it already ran.
 * Derived data, like snapshots: a stream's mark says its index holds every command id of the
 * stream's events up to `through`; the index and its mark move together in one statement, and
 * only from the mark the writer read (compare-and-set), so they are never half-written. A mark
 * whose event is no longer the stream's at that version (a store replaced) is void, and an entry
 * is only believed once the events it names are read and carry its command id: a missing, stale
 * or forged entry costs reading the stream, never a command skipped or done twice.
 * `npm run projections:verify` compares the index with the log.
 */

/** How far a stream's index reaches: every command id of its events up to `through`. */
export type CommandIndexMark = {
  through: bigint;
  /** The id of the event at `through`: a stream that no longer has it there makes the mark void. */
  eventId: string;
  /**
   * The stream's head hash at `through` (src/integrity/hashes.ts), when the last event there is the
   * service's own: an append that expects that head moves the mark over its own events unread.
   */
  headHash: string | undefined;
};

/** The versions of the first run of a command's events in a stream (one command's events are appended together). */
export type CommandSpan = { first: bigint; last: bigint };

export type CommandLookup = { mark: CommandIndexMark | undefined; found: Map<string, CommandSpan> };

/** One command's events among some read ones: `commandId` with its span. */
export type IndexEntry = { commandId: string; span: CommandSpan };

/** Events of one stream, read or appended, in version order, that the index may move its mark over. */
export type IndexedStretch = {
  /** The mark the writer knows the index at (undefined: the stream has none yet). */
  expected: { through: bigint; eventId?: string | undefined; headHash?: string | undefined } | undefined;
  /** Every command run among the events from the expected mark (or the first event) to the new one. */
  entries: IndexEntry[];
  mark: CommandIndexMark;
  /** The stream was read whole: entries it has not are stale (a void mark) and go. */
  replace?: boolean;
};

export interface CommandIndex {
  /** The stream's mark and the spans of those of `commandIds` indexed; undefined when the index cannot be read. */
  lookup(streamName: string, commandIds: string[]): Promise<CommandLookup | undefined>;
  /**
   * Moves the stream's mark from `stretch.expected` to `stretch.mark`, adding its entries, unless
   * the mark is no longer the expected one. Moves of one stream are made in the order asked.
   * Never throws: an index not moved costs a longer read later.
   */
  advance(streamName: string, stretch: IndexedStretch): Promise<void>;
}

/** An event as the index sees it: its version, and the keyed command it came from, if any. */
export type IndexedEvent = { version: bigint; commandId: string | undefined };

/** The first run of each keyed command's events among `events` (in version order). */
export function commandEntries(events: readonly IndexedEvent[]): IndexEntry[] {
  const spans = new Map<string, CommandSpan>();
  let previous: string | undefined;
  for (const { version, commandId } of events) {
    const span = commandId === undefined ? undefined : spans.get(commandId);
    if (commandId !== undefined && !span) spans.set(commandId, { first: version, last: version });
    else if (span && previous === commandId && span.last === version - 1n) span.last = version;
    previous = commandId;
  }
  return [...spans].map(([commandId, span]) => ({ commandId, span }));
}

/** The service's events read, as the index sees them. */
export const indexedEvents = (events: readonly LoggedEvent[]): IndexedEvent[] =>
  events.map(({ version, event }) => ({ version, commandId: event.metadata.command_id }));

/** The index in the read database (tables record_commands and record_command_marks, migration 0013), in either event-store mode. */
export class PostgresCommandIndex implements CommandIndex {
  /** Per stream, the last move asked for: the next waits for it, so that moves in a row all land. */
  private readonly moving = new Map<string, Promise<void>>();

  constructor(
    private readonly pool: Pool,
    private readonly logger: Logger,
  ) {}

  async lookup(streamName: string, commandIds: string[]): Promise<CommandLookup | undefined> {
    try {
      const { rows } = await this.pool.query<{
        through: string;
        event_id: string;
        head_hash: string | null;
        command_id: string | null;
        first_version: string | null;
        last_version: string | null;
      }>(
        `SELECT m.indexed_through::text AS through, m.event_id_at_mark AS event_id, m.head_hash,
                c.command_id, c.first_version::text AS first_version, c.last_version::text AS last_version
         FROM record_command_marks m
         LEFT JOIN record_commands c ON c.stream_name = m.stream_name AND c.command_id = ANY($2::text[])
         WHERE m.stream_name = $1`,
        [streamName, commandIds],
      );
      const first = rows[0];
      const found = new Map<string, CommandSpan>();
      for (const row of rows) {
        if (row.command_id !== null) found.set(row.command_id, { first: BigInt(row.first_version!), last: BigInt(row.last_version!) });
      }
      const mark = first && { through: BigInt(first.through), eventId: first.event_id, headHash: first.head_hash ?? undefined };
      return { mark, found };
    } catch (error) {
      // Without the index the keyed command reads the whole stream: slower, and as correct.
      this.logger.warn({ err: (error as Error).message, stream: streamName }, 'could not read the command index; reading the whole stream');
      return undefined;
    }
  }

  advance(streamName: string, stretch: IndexedStretch): Promise<void> {
    const moved = (this.moving.get(streamName) ?? Promise.resolve()).then(() => this.move(streamName, stretch));
    this.moving.set(streamName, moved);
    return moved.finally(() => {
      if (this.moving.get(streamName) === moved) this.moving.delete(streamName);
    });
  }

  private async move(streamName: string, { expected, entries, mark, replace = false }: IndexedStretch): Promise<void> {
    const rows = entries.map(({ commandId, span }) => ({
      command_id: commandId,
      first_version: span.first.toString(),
      last_version: span.last.toString(),
    }));
    try {
      // One statement: the mark moves and the entries land together, or neither does.
      await this.pool.query(
        `WITH moved AS (
           UPDATE record_command_marks m SET indexed_through = $5, event_id_at_mark = $6, head_hash = $7
           WHERE m.stream_name = $1 AND m.indexed_through = $2::bigint AND (m.event_id_at_mark = $3 OR m.head_hash = $4)
           RETURNING 1
         ), started AS (
           INSERT INTO record_command_marks (stream_name, indexed_through, event_id_at_mark, head_hash)
           SELECT $1, $5, $6, $7 WHERE $2::bigint IS NULL
           ON CONFLICT (stream_name) DO NOTHING
           RETURNING 1
         ), advanced AS (SELECT 1 FROM moved UNION ALL SELECT 1 FROM started),
         entries AS (
           SELECT * FROM jsonb_to_recordset($8::jsonb) AS e(command_id text, first_version bigint, last_version bigint)
         ), dropped AS (
           DELETE FROM record_commands c
           WHERE c.stream_name = $1 AND $9::boolean AND EXISTS (SELECT 1 FROM advanced)
             AND c.command_id NOT IN (SELECT command_id FROM entries)
         )
         INSERT INTO record_commands AS c (stream_name, command_id, first_version, last_version)
         SELECT $1, command_id, first_version, last_version FROM entries WHERE EXISTS (SELECT 1 FROM advanced)
         ON CONFLICT (stream_name, command_id) DO UPDATE
           SET first_version = excluded.first_version, last_version = excluded.last_version
           WHERE $9::boolean`,
        [
          streamName,
          expected?.through.toString() ?? null,
          expected?.eventId ?? null,
          expected?.headHash ?? null,
          mark.through.toString(),
          mark.eventId,
          mark.headHash ?? null,
          JSON.stringify(rows),
          replace,
        ],
      );
    } catch (error) {
      // An index not moved is moved by the next keyed command's read; nothing depends on it.
      this.logger.warn({ err: (error as Error).message, stream: streamName }, 'could not move the command index');
    }
  }
}
