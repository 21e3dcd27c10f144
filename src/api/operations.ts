import { decodeCursor } from '../changes/cursor.js';
import { changeTypes, readableTypes, type ChangePage, type ChangeQuery } from '../changes/feed.js';
import { startOfLog } from '../eventstore/port.js';
import type { WebhookStore } from '../webhooks/adapters/store.js';
import { invalid, notFound, organizationNotGranted, ServiceError } from '../errors.js';
import type { EventOf, HistoryItem, RecordKind } from '../audit/history.js';
import type { FieldProvenance } from '../audit/provenance.js';
import type { RecordDiff } from '../audit/adapters/provenance-reads.js';
import type { Checkpoint } from '../integrity/checkpoints.js';
import type { RecordProof } from '../integrity/adapters/proofs.js';
import type { Page, PageRequest } from '../read/pages.js';
import type { CommandHandlers, Caller } from '../write/handlers.js';
import type { Solution } from '../domain/solution.js';
import type { Workspace } from '../domain/workspace.js';
import type { Scope } from './auth.js';
import type { OperationName, ParamsOf, ResultOf } from './schemas.js';

/** The webhooks' store (src/webhooks/adapters/store.ts), and the check of a target URL as written. */
export type Webhooks = Pick<WebhookStore, 'create' | 'get' | 'list' | 'update' | 'remove' | 'rotate' | 'deliveries' | 'redeliver'> & {
  targetProblem(url: string): string | undefined;
};

/** The read side as the API sees it: queries over the read tables, and over the event store for a record's past (`as_of`, history, provenance, diffs, proofs). */
export type Queries = {
  getWorkspace(id: string, organizations: readonly string[]): Promise<Workspace | undefined>;
  workspaceAsOf(id: string, organizations: ReadonlySet<string>, asOf: string): Promise<Workspace>;
  solutionAsOf(id: string, organizations: ReadonlySet<string>, asOf: string): Promise<Solution>;
  history<K extends RecordKind>(
    kind: K,
    id: string,
    organizations: ReadonlySet<string>,
    page: PageRequest,
  ): Promise<Page<HistoryItem<EventOf<K>>>>;
  listWorkspaces(organizations: readonly string[], page: { page: number; size: number }): Promise<Page<Workspace>>;
  getSolution(id: string, organizations: readonly string[]): Promise<Solution | undefined>;
  listSolutions(
    organizations: readonly string[],
    workspaceId: string | undefined,
    page: { page: number; size: number },
  ): Promise<Page<Solution>>;
  provenance(
    kind: RecordKind,
    id: string,
    organizations: ReadonlySet<string>,
    asOf: string | undefined,
    pointer: string | undefined,
  ): Promise<FieldProvenance[]>;
  diff<K extends RecordKind>(
    kind: K,
    id: string,
    organizations: ReadonlySet<string>,
    from: string,
    to: string | undefined,
  ): Promise<RecordDiff<K>>;
  /** Contract §16: the organization's latest checkpoint, or the one of `size`. */
  checkpoint(organizationId: string, organizations: ReadonlySet<string>, size: number | undefined): Promise<Checkpoint>;
  recordProof(kind: RecordKind, id: string, organizations: ReadonlySet<string>, size: number | undefined): Promise<RecordProof>;
  consistencyProof(
    organizationId: string,
    organizations: ReadonlySet<string>,
    fromSize: number,
    toSize: number,
  ): Promise<{ from: Checkpoint; to: Checkpoint; path: string[] }>;
  /** A page of the change feed; with `waitMs`, waits that long for a change when none is there (ended early by `signal`). */
  listChanges(query: ChangeQuery, waitMs: number, signal?: AbortSignal): Promise<ChangePage>;
};

/** The Workspace and Solution Responses, fields in the spec's order whichever side produced them. */
const workspaceResponse = (w: Workspace) => ({
  id: w.id,
  organization_id: w.organization_id,
  created_at: w.created_at,
  updated_at: w.updated_at,
  name: w.name,
  description: w.description,
  attributes: w.attributes,
});
const solutionResponse = (s: Solution) => ({
  id: s.id,
  organization_id: s.organization_id,
  workspace_id: s.workspace_id,
  created_at: s.created_at,
  updated_at: s.updated_at,
  name: s.name,
  description: s.description,
  attributes: s.attributes,
  documentation: s.documentation,
});
/** A diff with its two ends presented as Responses (null where the record did not exist). */
const diffOf = <T, D extends { from: T | null; to: T | null }, R>(diff: D, present: (record: T) => R) => ({
  ...diff,
  from: diff.from === null ? null : present(diff.from),
  to: diff.to === null ? null : present(diff.to),
});
const pageOf = <T, R>(page: Page<T>, present: (item: T) => R) => ({ ...page, items: page.items.map(present) });

export type OperationContext = {
  caller: Caller;
  /** The token's scopes: an operation open to several narrows what it shows by them. */
  scopes: ReadonlySet<string>;
  commands: CommandHandlers;
  queries: Queries;
  webhooks: Webhooks;
  /** Ends a long wait early (the client went away). */
  signal?: AbortSignal;
};

type Operation<O extends OperationName> = {
  /** Commands change records (and honour Idempotency-Key); queries only read. */
  kind: 'command' | 'query';
  /** The scope it needs; a list: any one of them. */
  scope: Scope | readonly Scope[];
  /** One line for the API reference and the docs page. */
  summary: string;
  /** Whether it names a record that may not exist, or not be the caller's (404). */
  namesRecord: boolean;
  run: (params: ParamsOf<O>, context: OperationContext) => Promise<ResultOf<O>>;
};

/** The organizations a query may look at: those the token grants, narrowed by an optional filter. */
function visibleOrganizations(caller: Caller, filter: string | undefined): string[] {
  if (filter !== undefined) return caller.organizations.has(filter) ? [filter] : [];
  return [...caller.organizations];
}

/** The change feed query of `list_changes`' parameters, for this caller. */
export function changeQueryOf(params: ParamsOf<'list_changes'>, caller: Caller, scopes: ReadonlySet<string>): ChangeQuery {
  // The schema let only decodable cursors through.
  const after = params.after === undefined ? startOfLog : decodeCursor(params.after)!;
  return {
    organizations: visibleOrganizations(caller, params.organization_id),
    workspaceId: params.workspace_id,
    types: readableTypes(scopes, params.types),
    after,
    limit: params.limit,
  };
}

/** A webhook target refused as written (contract §15): a validation error on `params.url`. */
function checkTarget(webhooks: Webhooks, url: string | undefined): void {
  const problem = url === undefined ? undefined : webhooks.targetProblem(url);
  if (problem) throw invalid('params.url', problem);
}

/** The members given a value (an optional parameter left out is not a change). */
const definedOnly = <T extends object>(value: T) =>
  Object.fromEntries(Object.entries(value).filter(([, member]) => member !== undefined)) as { [K in keyof T]?: Exclude<T[K], undefined> };

const found = <T>(record: T | undefined, what: string): T => {
  if (record === undefined) throw notFound(what);
  return record;
};

/** The integrity queries (contract §16) and the change feed (§14, which each kind's scope narrows) need a read scope, either one. */
const anyReadScope: readonly Scope[] = ['workspaces:read', 'solutions:read'];

/** The one place mapping each operation to its scope and handler. */
export const operations: { [O in OperationName]: Operation<O> } = {
  get_workspace: {
    kind: 'query',
    scope: 'workspaces:read',
    summary: 'One workspace; with `as_of`, as it was at that instant.',
    namesRecord: true,
    run: async ({ id, as_of }, { caller, queries }) =>
      workspaceResponse(
        as_of === undefined
          ? found(await queries.getWorkspace(id, [...caller.organizations]), 'workspace')
          : await queries.workspaceAsOf(id, caller.organizations, as_of),
      ),
  },
  get_workspace_history: {
    kind: 'query',
    scope: 'workspaces:read',
    summary: "A workspace's events, oldest first, deleted workspaces included.",
    namesRecord: true,
    run: ({ id, page, size }, { caller, queries }) => queries.history('workspace', id, caller.organizations, { page, size }),
  },
  list_workspaces: {
    kind: 'query',
    scope: 'workspaces:read',
    summary: 'The workspaces the caller may access, oldest first.',
    namesRecord: false,
    run: async ({ page, size, organization_id }, { caller, queries }) =>
      pageOf(await queries.listWorkspaces(visibleOrganizations(caller, organization_id), { page, size }), workspaceResponse),
  },
  create_workspace: {
    kind: 'command',
    scope: 'workspaces:write',
    summary: "Creates a workspace in one of the caller's organizations.",
    namesRecord: false,
    run: async (params, { caller, commands }) => workspaceResponse(await commands.createWorkspace(params, caller)),
  },
  update_workspace: {
    kind: 'command',
    scope: 'workspaces:write',
    summary: 'Renames a workspace; description replaced, attributes merge-patched.',
    namesRecord: true,
    run: async (params, { caller, commands }) => workspaceResponse(await commands.updateWorkspace(params, caller)),
  },
  delete_workspace: {
    kind: 'command',
    scope: 'workspaces:write',
    summary: 'Deletes a workspace and its solutions.',
    namesRecord: true,
    run: ({ id }, { caller, commands }) => commands.deleteWorkspace(id, caller),
  },
  get_solution: {
    kind: 'query',
    scope: 'solutions:read',
    summary: 'One solution; with `as_of`, as it was at that instant.',
    namesRecord: true,
    run: async ({ id, as_of }, { caller, queries }) =>
      solutionResponse(
        as_of === undefined
          ? found(await queries.getSolution(id, [...caller.organizations]), 'solution')
          : await queries.solutionAsOf(id, caller.organizations, as_of),
      ),
  },
  get_solution_history: {
    kind: 'query',
    scope: 'solutions:read',
    summary: "A solution's events, oldest first, deleted solutions included.",
    namesRecord: true,
    run: ({ id, page, size }, { caller, queries }) => queries.history('solution', id, caller.organizations, { page, size }),
  },
  list_solutions: {
    kind: 'query',
    scope: 'solutions:read',
    summary: "The solutions the caller may access, oldest first; optionally one workspace's.",
    namesRecord: false,
    run: async ({ page, size, workspace_id, organization_id }, { caller, queries }) =>
      pageOf(await queries.listSolutions(visibleOrganizations(caller, organization_id), workspace_id, { page, size }), solutionResponse),
  },
  create_solution: {
    kind: 'command',
    scope: 'solutions:write',
    summary: 'Creates a solution in a workspace.',
    namesRecord: true,
    run: async (params, { caller, commands }) => solutionResponse(await commands.createSolution(params, caller)),
  },
  update_solution: {
    kind: 'command',
    scope: 'solutions:write',
    summary: 'Renames a solution; description and documentation replaced, attributes merge-patched.',
    namesRecord: true,
    run: async (params, { caller, commands }) => solutionResponse(await commands.updateSolution(params, caller)),
  },
  delete_solution: {
    kind: 'command',
    scope: 'solutions:write',
    summary: 'Deletes a solution.',
    namesRecord: true,
    run: ({ id }, { caller, commands }) => commands.deleteSolution(id, caller),
  },
  get_workspace_provenance: {
    kind: 'query',
    scope: 'workspaces:read',
    summary: 'Who last set each field of a workspace, now or at `as_of`.',
    namesRecord: true,
    run: async ({ id, as_of, path }, { caller, queries }) => ({
      fields: await queries.provenance('workspace', id, caller.organizations, as_of, path),
    }),
  },
  get_solution_provenance: {
    kind: 'query',
    scope: 'solutions:read',
    summary: 'Who last set each field of a solution, now or at `as_of`.',
    namesRecord: true,
    run: async ({ id, as_of, path }, { caller, queries }) => ({
      fields: await queries.provenance('solution', id, caller.organizations, as_of, path),
    }),
  },
  diff_workspace: {
    kind: 'query',
    scope: 'workspaces:read',
    summary: 'A workspace at two instants, the RFC 6902 patch between them and the events in between.',
    namesRecord: true,
    run: async ({ id, from, to }, { caller, queries }) =>
      diffOf(await queries.diff('workspace', id, caller.organizations, from, to), workspaceResponse),
  },
  diff_solution: {
    kind: 'query',
    scope: 'solutions:read',
    summary: 'A solution at two instants, the RFC 6902 patch between them and the events in between.',
    namesRecord: true,
    run: async ({ id, from, to }, { caller, queries }) =>
      diffOf(await queries.diff('solution', id, caller.organizations, from, to), solutionResponse),
  },
  get_checkpoint: {
    kind: 'query',
    scope: anyReadScope,
    summary: "The organization's latest signed checkpoint, or the one of `size`.",
    namesRecord: true,
    run: ({ organization_id, size }, { caller, queries }) => queries.checkpoint(organization_id, caller.organizations, size),
  },
  get_workspace_proof: {
    kind: 'query',
    scope: anyReadScope,
    summary: "A workspace's events as stored, with their hashes and inclusion paths in a signed checkpoint.",
    namesRecord: true,
    run: ({ id, size }, { caller, queries }) => queries.recordProof('workspace', id, caller.organizations, size),
  },
  get_solution_proof: {
    kind: 'query',
    scope: anyReadScope,
    summary: "A solution's events as stored, with their hashes and inclusion paths in a signed checkpoint.",
    namesRecord: true,
    run: ({ id, size }, { caller, queries }) => queries.recordProof('solution', id, caller.organizations, size),
  },
  get_consistency_proof: {
    kind: 'query',
    scope: anyReadScope,
    summary: "Proof that one signed checkpoint's tree extends another's: the log was only appended to.",
    namesRecord: true,
    run: ({ organization_id, from_size, to_size }, { caller, queries }) =>
      queries.consistencyProof(organization_id, caller.organizations, from_size, to_size),
  },
  list_changes: {
    kind: 'query',
    scope: anyReadScope,
    summary:
      'The changes the caller may read, in log order, paged by cursor; waits for one with `wait_ms`; ' +
      'with `Accept: text/event-stream`, streams them as Server-Sent Events.',
    namesRecord: false,
    run: (params, { caller, scopes, queries, signal }) =>
      queries.listChanges(changeQueryOf(params, caller, scopes), params.wait_ms, signal),
  },
  create_webhook: {
    kind: 'command',
    scope: 'webhooks:manage',
    summary: "Creates a webhook for one of the caller's organizations; answers its secret, shown only here and on rotation.",
    namesRecord: true,
    run: async ({ organization_id, url, types, description }, { caller, webhooks }) => {
      // A bad target is a bad parameter: refused before access and existence are looked at (contract §2).
      checkTarget(webhooks, url);
      if (!caller.organizations.has(organization_id)) throw notFound('organization');
      return webhooks.create({ organization_id, url, types: types ?? [...changeTypes], description: description ?? '' });
    },
  },
  get_webhook: {
    kind: 'query',
    scope: 'webhooks:manage',
    summary: 'One webhook (without its secret).',
    namesRecord: true,
    run: async ({ id }, { caller, webhooks }) => found(await webhooks.get(id, [...caller.organizations]), 'webhook'),
  },
  list_webhooks: {
    kind: 'query',
    scope: 'webhooks:manage',
    summary: "The webhooks of the caller's organizations, oldest first.",
    namesRecord: false,
    run: ({ page, size, organization_id }, { caller, webhooks }) =>
      webhooks.list(visibleOrganizations(caller, organization_id), { page, size }),
  },
  update_webhook: {
    kind: 'command',
    scope: 'webhooks:manage',
    summary: "Changes a webhook's url, types or description, or pauses and resumes it (`enabled`).",
    namesRecord: true,
    run: async ({ id, ...changes }, { caller, webhooks }) => {
      checkTarget(webhooks, changes.url);
      return found(await webhooks.update(id, [...caller.organizations], definedOnly(changes)), 'webhook');
    },
  },
  delete_webhook: {
    kind: 'command',
    scope: 'webhooks:manage',
    summary: 'Deletes a webhook and its delivery log; nothing more is delivered to it.',
    namesRecord: true,
    run: async ({ id }, { caller, webhooks }) => {
      if (!(await webhooks.remove(id, [...caller.organizations]))) throw notFound('webhook');
      return { id };
    },
  },
  rotate_webhook_secret: {
    kind: 'command',
    scope: 'webhooks:manage',
    summary:
      'A new secret, answered once; each secret replaced within the last 24 h (the 10 most recent at most) goes on signing deliveries beside it until 24 h after it was replaced.',
    namesRecord: true,
    run: async ({ id }, { caller, webhooks }) => found(await webhooks.rotate(id, [...caller.organizations]), 'webhook'),
  },
  list_webhook_deliveries: {
    kind: 'query',
    scope: 'webhooks:manage',
    summary: "A webhook's deliveries in log order, optionally of one status.",
    namesRecord: true,
    run: async ({ id, page, size, status }, { caller, webhooks }) =>
      found(await webhooks.deliveries(id, [...caller.organizations], { page, size }, status), 'webhook'),
  },
  redeliver_webhook_change: {
    kind: 'command',
    scope: 'webhooks:manage',
    summary:
      'Delivers a change the webhook was due (of its organization and types, committed after its creation) again, now, with a fresh retry schedule.',
    namesRecord: true,
    run: async ({ id, change_id }, { caller, webhooks }) => {
      const redelivery = await webhooks.redeliver(id, [...caller.organizations], change_id);
      if ('missing' in redelivery) throw notFound(redelivery.missing);
      return redelivery.delivery;
    },
  },
};

/**
 * What a command whose answer names an organization says to a caller who cannot access that
 * organization, worded as the command itself words it: a keyed retry after the caller lost that
 * access answers the same, as if it carried no key (contract §2, §3).
 */
export function inaccessibleTo(name: OperationName): ServiceError {
  switch (name) {
    case 'create_workspace':
      return organizationNotGranted();
    case 'create_webhook':
      return notFound('organization');
    case 'create_solution':
    case 'update_workspace':
      return notFound('workspace');
    case 'update_solution':
      return notFound('solution');
    default:
      // update_webhook and rotate_webhook_secret, the other answers naming an organization.
      return notFound('webhook');
  }
}

/** The scopes that grant an operation: any one of them. */
export const scopesOf = (name: OperationName): readonly Scope[] => {
  const { scope } = operations[name];
  return typeof scope === 'string' ? [scope] : scope;
};

export const isOperationName = (query: string): query is OperationName => Object.hasOwn(operations, query);
