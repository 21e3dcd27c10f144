import type { JsonObject } from './merge-patch.js';
import type { Timestamp } from './timestamp.js';
import type { Documentation } from './values.js';

/**
 * The six domain events. Their `data` uses the API's field names, so the audit history (§12)
 * shows what a client would recognise. An update carries the resulting values of the fields
 * it changed (attributes after the merge), so folding never re-interprets a patch.
 */
export type WorkspaceCreated = {
  type: 'WorkspaceCreated';
  data: { id: string; organization_id: string; name: string; description: string; attributes: JsonObject };
};
export type WorkspaceUpdated = {
  type: 'WorkspaceUpdated';
  data: { id: string; name: string; description?: string; attributes?: JsonObject };
};
export type WorkspaceDeleted = {
  type: 'WorkspaceDeleted';
  data: { id: string; organization_id: string };
};
export type SolutionCreated = {
  type: 'SolutionCreated';
  data: {
    id: string;
    organization_id: string;
    workspace_id: string;
    name: string;
    description: string;
    attributes: JsonObject;
    documentation: Documentation;
  };
};
export type SolutionUpdated = {
  type: 'SolutionUpdated';
  data: { id: string; name: string; description?: string; attributes?: JsonObject; documentation?: Documentation };
};
export type SolutionDeleted = {
  type: 'SolutionDeleted';
  /** `reason` tells an auditor whether the solution was deleted itself or with its workspace. */
  data: { id: string; organization_id: string; workspace_id: string; reason: 'requested' | 'workspace_deleted' };
};

export type WorkspaceEvent = WorkspaceCreated | WorkspaceUpdated | WorkspaceDeleted;
export type SolutionEvent = SolutionCreated | SolutionUpdated | SolutionDeleted;
export type DomainEvent = WorkspaceEvent | SolutionEvent;

/**
 * Version 2: SolutionDeleted carries `reason`. Version-1 events lack it; src/domain/upcast.ts fills
 * it in as 'requested' (before version 2 only requested deletions existed as separate events).
 */
export const currentSchemaVersion = 2;

/** Who caused an event, when, and in which request (contract §8, §12). */
export type EventMetadata = {
  actor: string;
  request_id: string;
  occurred_at: Timestamp;
  schema_version: number;
  /**
   * Set when the request carried an `Idempotency-Key`: one id per caller, key and request. A retry
   * finds what the first execution did in the record's own events, whatever else was lost.
   */
  command_id?: string;
};

/** A domain event with its metadata, as deciders emit them and folds read them. */
export type Envelope<E extends DomainEvent = DomainEvent> = E & { metadata: EventMetadata };

export const workspaceEventTypes: ReadonlySet<string> = new Set<WorkspaceEvent['type']>([
  'WorkspaceCreated',
  'WorkspaceUpdated',
  'WorkspaceDeleted',
]);
export const solutionEventTypes: ReadonlySet<string> = new Set<SolutionEvent['type']>([
  'SolutionCreated',
  'SolutionUpdated',
  'SolutionDeleted',
]);

export const isWorkspaceEvent = (event: Envelope): event is Envelope<WorkspaceEvent> => workspaceEventTypes.has(event.type);
export const isSolutionEvent = (event: Envelope): event is Envelope<SolutionEvent> => solutionEventTypes.has(event.type);
