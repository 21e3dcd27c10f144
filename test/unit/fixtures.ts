/**
 * Small builders for unit tests: events with metadata, command contexts and timestamps, so each
 * test states only what matters to it.
 */
import { expect } from 'vitest';
import { toServiceError } from '../../src/api/errors.js';
import { DomainError } from '../../src/domain/errors.js';
import type { ErrorCode } from '../../src/errors.js';
import type { CommandContext } from '../../src/domain/command.js';
import {
  currentSchemaVersion,
  type Envelope,
  type EventMetadata,
  type SolutionCreated,
  type SolutionDeleted,
  type SolutionUpdated,
  type WorkspaceCreated,
  type WorkspaceDeleted,
  type WorkspaceUpdated,
} from '../../src/domain/events.js';
import type { Timestamp } from '../../src/domain/timestamp.js';

/** A timestamp on a fixed day: `at('10:00:00.000001')` is `2024-05-01T10:00:00.000001Z`. */
export const at = (time: string): Timestamp => `2024-05-01T${time}Z`;

const actor = 'user_alice';
const requestId = 'req_1';

export const context = (now: Timestamp, overrides: Partial<CommandContext> = {}): CommandContext => ({
  actor,
  requestId,
  now,
  ...overrides,
});

export const metadata = (occurredAt: Timestamp, overrides: Partial<EventMetadata> = {}): EventMetadata => ({
  actor,
  request_id: requestId,
  occurred_at: occurredAt,
  schema_version: currentSchemaVersion,
  ...overrides,
});

export const workspaceCreated = (
  occurredAt: Timestamp,
  data: Partial<WorkspaceCreated['data']> = {},
  meta: Partial<EventMetadata> = {},
): Envelope<WorkspaceCreated> => ({
  type: 'WorkspaceCreated',
  data: { id: 'ws_1', organization_id: 'org_acme', name: 'Lab', description: '', attributes: {}, ...data },
  metadata: metadata(occurredAt, meta),
});

export const workspaceUpdated = (
  occurredAt: Timestamp,
  data: Partial<WorkspaceUpdated['data']> = {},
  meta: Partial<EventMetadata> = {},
): Envelope<WorkspaceUpdated> => ({
  type: 'WorkspaceUpdated',
  data: { id: 'ws_1', name: 'Lab', ...data },
  metadata: metadata(occurredAt, meta),
});

export const workspaceDeleted = (
  occurredAt: Timestamp,
  data: Partial<WorkspaceDeleted['data']> = {},
  meta: Partial<EventMetadata> = {},
): Envelope<WorkspaceDeleted> => ({
  type: 'WorkspaceDeleted',
  data: { id: 'ws_1', organization_id: 'org_acme', ...data },
  metadata: metadata(occurredAt, meta),
});

export const solutionCreated = (
  occurredAt: Timestamp,
  data: Partial<SolutionCreated['data']> = {},
  meta: Partial<EventMetadata> = {},
): Envelope<SolutionCreated> => ({
  type: 'SolutionCreated',
  data: {
    id: 'sol_1',
    organization_id: 'org_acme',
    workspace_id: 'ws_1',
    name: 'Pump',
    description: '',
    attributes: {},
    documentation: { blocks: [] },
    ...data,
  },
  metadata: metadata(occurredAt, meta),
});

export const solutionUpdated = (
  occurredAt: Timestamp,
  data: Partial<SolutionUpdated['data']> = {},
  meta: Partial<EventMetadata> = {},
): Envelope<SolutionUpdated> => ({
  type: 'SolutionUpdated',
  data: { id: 'sol_1', name: 'Pump', ...data },
  metadata: metadata(occurredAt, meta),
});

export const solutionDeleted = (
  occurredAt: Timestamp,
  data: Partial<SolutionDeleted['data']> = {},
  meta: Partial<EventMetadata> = {},
): Envelope<SolutionDeleted> => ({
  type: 'SolutionDeleted',
  data: { id: 'sol_1', organization_id: 'org_acme', workspace_id: 'ws_1', reason: 'requested', ...data },
  metadata: metadata(occurredAt, meta),
});

/** A JSON object whose serialization is exactly `bytes` bytes of UTF-8 (at least 8). */
export function attributesOfSize(bytes: number, key = 'a'): { [key: string]: string } {
  const overhead = Buffer.byteLength(JSON.stringify({ [key]: '' }), 'utf8');
  return { [key]: 'x'.repeat(bytes - overhead) };
}

export const serializedBytes = (value: unknown) => Buffer.byteLength(JSON.stringify(value), 'utf8');

/**
 * Given/when/then for a decider: the given events are folded with `evolve` from the initial state,
 * the command is decided on that state, and the outcome is checked.
 */
export function deciderSpec<Command, State, Event>(decider: {
  initialState: State;
  decide: (command: Command, state: State) => Event[];
  evolve: (state: State, event: Event) => State;
}) {
  return (...given: Event[]) => {
    const state = given.reduce((current, event) => decider.evolve(current, event), decider.initialState);
    return {
      state,
      when: (command: Command) => {
        const decide = () => decider.decide(command, state);
        return {
          then: (expected: Event[]) => {
            const events = decide();
            expect(events).toEqual(expected);
            return events;
          },
          thenError: (code: ErrorCode, detailPath?: string) => {
            let caught: unknown;
            try {
              decide();
            } catch (error) {
              caught = error;
            }
            // Deciders refuse in domain terms; the contract's code is what the API's one handler makes of it.
            expect(caught).toBeInstanceOf(DomainError);
            const error = toServiceError(caught);
            expect(error.code).toBe(code);
            if (detailPath !== undefined) expect(error.details?.map((detail) => detail.path)).toContain(detailPath);
            return error;
          },
        };
      },
    };
  };
}
