import { currentSchemaVersion, type DomainEvent, type Envelope } from './events.js';
import { nextTimestamp, type Timestamp } from './timestamp.js';

/** What every command brings from outside, so that deciders stay pure: who, which request, and when. */
export type CommandContext = {
  actor: string;
  requestId: string;
  now: Timestamp;
  /** The keyed request this command executes, if any (EventMetadata.command_id). */
  commandId?: string | undefined;
};

/** Wraps a decided event with its metadata; its time is strictly after the record's previous change. */
export function envelope<E extends DomainEvent>(event: E, context: CommandContext, previousChange: Timestamp | undefined): Envelope<E> {
  return {
    ...event,
    metadata: {
      actor: context.actor,
      request_id: context.requestId,
      occurred_at: nextTimestamp(context.now, previousChange),
      schema_version: currentSchemaVersion,
      ...(context.commandId === undefined ? {} : { command_id: context.commandId }),
    },
  };
}

export function assertNever(value: never): never {
  throw new Error(`unexpected value: ${JSON.stringify(value)}`);
}
