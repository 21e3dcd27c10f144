import { z } from 'zod';
import { decodeCursor } from '../changes/cursor.js';
import { changeTypes } from '../changes/feed.js';
import { errorCodes, type ErrorCode } from '../errors.js';
import {
  attributes,
  description,
  documentation,
  instant,
  name,
  organizationId,
  solutionId,
  timestamp,
  webhookId,
  wellFormed,
  withoutControlCharacters,
  workspaceId,
} from '../domain/values.js';

/** `x-request-id`: a valid incoming one is echoed, anything else replaced (contract §1). */
export const requestIdPattern = /^[A-Za-z0-9._:-]{1,128}$/;

/** `Idempotency-Key`: 1 to 255 visible ASCII characters. */
export const idempotencyKeyPattern = /^[\x21-\x7e]{1,255}$/;

/** The request envelope (contract §1): exactly `query` and `params`. */
export const envelopeSchema = z.strictObject({
  query: z.string(),
  // Kept as given (a record schema would copy it and could lose a `__proto__` key unseen).
  params: z.custom<Record<string, unknown>>((value) => typeof value === 'object' && value !== null && !Array.isArray(value)),
});

const pageNumber = z.number().int().min(1).max(Number.MAX_SAFE_INTEGER).meta({ description: 'The page, from 1.' });
const pageSize = z.number().int().min(1).max(100).meta({ description: 'Items per page, 1 to 100.' });
const paging = { page: pageNumber, size: pageSize };
const treeSize = z
  .number()
  .int()
  .min(1)
  .max(Number.MAX_SAFE_INTEGER)
  .meta({ description: "A size of the organization's tree: the number of its events a signed checkpoint covers." });

/** An RFC 6901 JSON Pointer: empty, or `/` then reference tokens in which `~` is only ever `~0` or `~1`. */
const jsonPointer = z
  .string()
  .regex(/^(\/([^~/]|~[01])*)*$/, 'must be a JSON Pointer (RFC 6901): empty or starting with "/", with "~" written only as ~0 or ~1')
  .refine((value) => value.isWellFormed(), 'must be well-formed Unicode (no lone surrogates)')
  .meta({
    description: 'Only the fields at, under or holding this RFC 6901 JSON Pointer, such as /attributes/owner. Omitted: every field.',
    examples: ['/attributes'],
  });

/**
 * `from` and optional `to` (contract §17), instants as `as_of` takes them: any two, so `to` may be
 * the earlier (the diff then goes back in time).
 */
const instantRange = <Id extends z.ZodType>(id: Id) =>
  z.strictObject({
    id,
    from: instant,
    to: instant.optional().meta({
      description: 'Any RFC 3339 instant; earlier than `from`, the patch goes back in time and `changes` is empty. Omitted: now.',
    }),
  });

/** A change feed cursor (contract §14): opaque, as `list_changes` gave it. */
const cursor = z
  .string()
  .refine((value) => decodeCursor(value) !== undefined, 'must be a cursor from list_changes (`next` or a change id)')
  .meta({ description: 'A cursor from list_changes: opaque, 1 to 128 of A-Z a-z 0-9 _ -.', pattern: '^[A-Za-z0-9_-]{1,128}$' });

const changeType = z.enum(changeTypes);
/** Stored as given (contract §5): so never a character that PostgreSQL refuses or the URL parser drops (NUL, tab, line feed). */
const webhookUrl = withoutControlCharacters(wellFormed(z.string().min(1).max(2048))).meta({
  description: 'Where changes are POSTed: https://, a public address (checked again at every connection).',
});
/** A webhook's event types: a non-empty list, each at most once (a repeat would be stored as given). */
const changeTypeList = z
  .array(changeType)
  .min(1)
  .superRefine((types, context) => {
    const repeated = types.find((type, index) => types.indexOf(type) !== index);
    if (repeated !== undefined) context.addIssue({ code: 'custom', message: `must list each type once ("${repeated}" is repeated)` });
  });
const webhookTypes = changeTypeList.meta({ uniqueItems: true, description: 'The event types delivered, each once; default all six.' });
const deliveryStatus = z.enum(['pending', 'succeeded', 'failed']);

/** Parameters per operation; strict, so an unknown parameter is a validation error. */
export const paramsSchemas = {
  get_workspace: z.strictObject({ id: workspaceId, as_of: instant.optional() }),
  get_workspace_history: z.strictObject({ id: workspaceId, ...paging }),
  list_workspaces: z.strictObject({ ...paging, organization_id: organizationId.optional() }),
  create_workspace: z.strictObject({
    organization_id: organizationId,
    name,
    description: description.optional(),
    attributes: attributes.optional(),
  }),
  update_workspace: z.strictObject({
    id: workspaceId,
    name,
    description: description.optional(),
    attributes: attributes.optional(),
  }),
  delete_workspace: z.strictObject({ id: workspaceId }),
  get_solution: z.strictObject({ id: solutionId, as_of: instant.optional() }),
  get_solution_history: z.strictObject({ id: solutionId, ...paging }),
  list_solutions: z.strictObject({
    ...paging,
    workspace_id: workspaceId.optional(),
    organization_id: organizationId.optional(),
  }),
  create_solution: z.strictObject({
    workspace_id: workspaceId,
    organization_id: organizationId.optional(),
    name,
    description: description.optional(),
    attributes: attributes.optional(),
    documentation: documentation.optional(),
  }),
  update_solution: z.strictObject({
    id: solutionId,
    name,
    description: description.optional(),
    attributes: attributes.optional(),
    documentation: documentation.optional(),
  }),
  delete_solution: z.strictObject({ id: solutionId }),
  get_workspace_provenance: z.strictObject({ id: workspaceId, as_of: instant.optional(), path: jsonPointer.optional() }),
  get_solution_provenance: z.strictObject({ id: solutionId, as_of: instant.optional(), path: jsonPointer.optional() }),
  diff_workspace: instantRange(workspaceId),
  diff_solution: instantRange(solutionId),
  get_checkpoint: z.strictObject({ organization_id: organizationId, size: treeSize.optional() }),
  get_workspace_proof: z.strictObject({ id: workspaceId, size: treeSize.optional() }),
  get_solution_proof: z.strictObject({ id: solutionId, size: treeSize.optional() }),
  get_consistency_proof: z.strictObject({ organization_id: organizationId, from_size: treeSize, to_size: treeSize }),
  list_changes: z.strictObject({
    after: cursor.optional().meta({ description: 'Continue after this cursor; left out, from the start of the log.' }),
    limit: z.number().int().min(1).max(1000).default(100).meta({ description: 'Changes per page, 1 to 1000 (default 100).' }),
    organization_id: organizationId.optional(),
    workspace_id: workspaceId.optional().meta({ description: 'Only this workspace and its solutions.' }),
    // Contract §14: any non-empty list of the six; a repeat filters nothing twice.
    types: z.array(changeType).min(1).optional().meta({ description: 'Only these event types.' }),
    wait_ms: z
      .number()
      .int()
      .min(0)
      .max(30_000)
      .default(0)
      .meta({ description: 'With nothing after the cursor, wait up to this long for a change (0 to 30000, default 0).' }),
  }),
  create_webhook: z.strictObject({
    organization_id: organizationId,
    url: webhookUrl,
    types: webhookTypes.optional(),
    description: description.optional(),
  }),
  get_webhook: z.strictObject({ id: webhookId }),
  list_webhooks: z.strictObject({ ...paging, organization_id: organizationId.optional() }),
  update_webhook: z.strictObject({
    id: webhookId,
    url: webhookUrl.optional(),
    types: webhookTypes.optional(),
    description: description.optional(),
    enabled: z.boolean().optional().meta({
      description:
        'false pauses deliveries; true resumes them (also after a disabling), its failing time counted again; on an enabled webhook, true changes nothing.',
    }),
  }),
  delete_webhook: z.strictObject({ id: webhookId }),
  rotate_webhook_secret: z.strictObject({ id: webhookId }),
  list_webhook_deliveries: z.strictObject({ id: webhookId, ...paging, status: deliveryStatus.optional() }),
  redeliver_webhook_change: z.strictObject({ id: webhookId, change_id: cursor }),
} as const;

export type OperationName = keyof typeof paramsSchemas;
/** What a handler receives: the parameters after validation (an `as_of` in the §8 form). */
export type ParamsOf<O extends OperationName> = z.output<(typeof paramsSchemas)[O]>;
/** What a client sends. */
export type ParamsInputOf<O extends OperationName> = z.input<(typeof paramsSchemas)[O]>;

/*
 * What each operation answers in `data` (spec §4, contract §9, §10, §12). The server builds these
 * values itself and does not parse them at run time; the OpenAPI document, the typed client and
 * the end-to-end tests' response validation are generated from them.
 */

const text = (description: string) => z.string().meta({ description });

export const workspaceSchema = z.strictObject({
  id: workspaceId,
  organization_id: organizationId,
  created_at: timestamp,
  updated_at: timestamp,
  name,
  description,
  attributes,
});

export const solutionSchema = z.strictObject({
  id: solutionId,
  organization_id: organizationId,
  workspace_id: workspaceId,
  created_at: timestamp,
  updated_at: timestamp,
  name,
  description,
  attributes,
  documentation,
});

const pageOf = <Item extends z.ZodType>(item: Item) =>
  z.strictObject({
    total: z.number().int().min(0).meta({ description: 'How many records the caller may access in all.' }),
    page: pageNumber,
    size: pageSize,
    items: z.array(item),
  });

/** A SHA-256 hash, lowercase hex (contract §16). */
const hexHash = (description: string) =>
  z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .meta({ description });

/** An event's hashes (contract §16). */
const eventHashes = {
  hash: hexHash(
    'SHA-256 of the canonical JSON of the event: stream, version, type, schema version, time, actor, data_hash, previous_hash.',
  ),
  previous_hash: hexHash("The hash of the stream's previous event; 64 zeros for the first."),
  data_hash: hexHash('SHA-256 of the canonical JSON of the event data as stored, before upcasting.'),
};

const historyItem = <Type extends string, Data extends z.ZodObject>(type: Type, data: Data) =>
  z.strictObject({
    version: z.number().int().min(1).meta({ description: "The event's 1-based sequence number in the record's stream." }),
    type: z.literal(type),
    occurred_at: timestamp,
    actor: text('The `sub` of the token that caused the change.'),
    data,
    ...eventHashes,
  });

/** The record's events as the audit history shows them (contract §12): the API's field names, an update's resulting values. */
export const workspaceHistoryItemSchema = z.discriminatedUnion('type', [
  historyItem('WorkspaceCreated', z.strictObject({ id: workspaceId, organization_id: organizationId, name, description, attributes })),
  historyItem(
    'WorkspaceUpdated',
    z.strictObject({ id: workspaceId, name, description: description.optional(), attributes: attributes.optional() }),
  ),
  historyItem('WorkspaceDeleted', z.strictObject({ id: workspaceId, organization_id: organizationId })),
]);

export const solutionHistoryItemSchema = z.discriminatedUnion('type', [
  historyItem(
    'SolutionCreated',
    z.strictObject({
      id: solutionId,
      organization_id: organizationId,
      workspace_id: workspaceId,
      name,
      description,
      attributes,
      documentation,
    }),
  ),
  historyItem(
    'SolutionUpdated',
    z.strictObject({
      id: solutionId,
      name,
      description: description.optional(),
      attributes: attributes.optional(),
      documentation: documentation.optional(),
    }),
  ),
  historyItem(
    'SolutionDeleted',
    z.strictObject({
      id: solutionId,
      organization_id: organizationId,
      workspace_id: workspaceId,
      reason: z.enum(['requested', 'workspace_deleted']).meta({ description: 'Deleted itself, or with its workspace.' }),
    }),
  ),
]);

/** Who last set each field of a record (contract §17). */
const provenanceSchema = z.strictObject({
  fields: z.array(
    z.strictObject({
      path: text('An RFC 6901 JSON Pointer into the record: /name, /description, a leaf under /attributes, /documentation.'),
      value: z.unknown().meta({ description: "The field's value at that instant: any JSON." }),
      version: z.number().int().min(1).meta({ description: 'The history version of the event that gave the field this value.' }),
      set_at: timestamp,
      set_by: text('The `sub` of the token that set it.'),
    }),
  ),
});

/** The RFC 6902 operations a diff holds: a record's diff adds, removes and replaces, never moves, copies or tests. */
const patchOperationSchema = z.discriminatedUnion('op', [
  z.strictObject({ op: z.literal('add'), path: text('An RFC 6901 JSON Pointer; "" is the whole record.'), value: z.unknown() }),
  z.strictObject({ op: z.literal('remove'), path: text('An RFC 6901 JSON Pointer; "" is the whole record.') }),
  z.strictObject({ op: z.literal('replace'), path: text('An RFC 6901 JSON Pointer.'), value: z.unknown() }),
]);

/** A record at two instants, the patch from one to the other, and the events in between (contract §17). */
const diffSchema = <Item extends z.ZodType, Change extends z.ZodType>(record: Item, change: Change) =>
  z.strictObject({
    from: record.nullable().meta({ description: 'The record at `from`; null if it did not exist then.' }),
    to: record.nullable().meta({ description: 'The record at `to`; null if it did not exist then.' }),
    patch: z.array(patchOperationSchema).meta({ description: 'RFC 6902 operations turning `from` into `to`.' }),
    changes: z.array(change).meta({ description: 'The history items with `from` < occurred_at ≤ `to`, oldest first.' }),
  });
/** A change of the feed (contract §14): `version` and `data` as in the record's history. */
const changeSchema = z.strictObject({
  id: cursor.meta({ description: "The change's cursor: `after` or `Last-Event-ID` continue after it." }),
  type: changeType,
  occurred_at: timestamp,
  actor: text('The `sub` of the token that caused the change.'),
  organization_id: organizationId,
  workspace_id: workspaceId,
  solution_id: solutionId.optional().meta({ description: 'Solution events only.' }),
  version: z.number().int().min(1).meta({ description: "The event's 1-based sequence number in the record's stream." }),
  data: z.record(z.string(), z.unknown()).meta({ description: "The event's data, as the record's history shows it." }),
});

const changePageSchema = z.strictObject({
  items: z.array(changeSchema),
  next: cursor.meta({ description: 'Pass as `after` to continue exactly after the last change considered.' }),
  has_more: z.boolean().meta({ description: 'Whether more changes were already there when this page was read.' }),
});

const webhookSchema = z.strictObject({
  id: webhookId,
  organization_id: organizationId,
  url: z.string(),
  types: z.array(changeType),
  description,
  enabled: z.boolean(),
  disabled_reason: z
    .enum(['gone', 'failing'])
    .nullable()
    .meta({ description: 'Why deliveries stopped: the receiver answered 410 Gone, or failed for days without a success.' }),
  created_at: timestamp,
  updated_at: timestamp,
});

const webhookWithSecretSchema = webhookSchema.extend({
  secret: text('`whsec_` and the base64 of 32 random bytes: shown only in this answer. Verify signatures with it.'),
});

const deliverySchema = z.strictObject({
  change_id: cursor,
  type: changeType,
  status: deliveryStatus,
  attempts: z.number().int().min(0),
  last_attempt_at: timestamp.nullable(),
  last_status_code: z.number().int().nullable(),
  last_error: z.string().nullable(),
  next_attempt_at: timestamp.nullable(),
});

const deletedSchema = <Id extends z.ZodString>(id: Id) => z.strictObject({ id });

/** A signed checkpoint of an organization's tree (contract §16). */
const checkpointSchema = z
  .strictObject({
    organization_id: organizationId,
    size: z.number().int().min(1).meta({ description: "How many of the organization's events the tree holds." }),
    root_hash: hexHash("The tree's RFC 9162 root hash."),
    timestamp,
    key_id: text('The `kid` of the signing key in `GET /audit-keys`.'),
    signature: text('Base64url Ed25519 signature of the RFC 8785 canonical JSON of organization_id, size, root_hash and timestamp.'),
  })
  .meta({ id: 'Checkpoint' });

const hexPath = (description: string) => z.array(hexHash('A subtree hash.')).meta({ description });

/** A record's events with what verifies them: their stored form, hashes, and inclusion paths. */
const proofVersion = z.number().int().min(1).meta({ description: "The event's 1-based sequence number in the record's stream." });
const leafIndex = z.number().int().min(0).meta({ description: "The event's 0-based place in the organization's log." });
const inclusionPath = hexPath('The RFC 9162 audit path from the leaf to the root, deepest first.');

const recordProofSchema = z.strictObject({
  checkpoint: checkpointSchema,
  events: z.array(
    z.strictObject({
      version: proofVersion,
      type: text('The event type as stored.'),
      occurred_at: timestamp,
      actor: text('The `sub` of the token that caused the change.'),
      stream: text('The stream the event is stored in.'),
      schema_version: z.number().int().min(1).meta({ description: 'The schema version the event was stored with.' }),
      stored_data: z.record(z.string(), z.unknown()).meta({ description: 'The event data as stored, before upcasting.' }),
      ...eventHashes,
      leaf_index: leafIndex,
      inclusion_path: inclusionPath,
    }),
  ),
  missing_events: z
    .array(z.strictObject({ version: proofVersion, hash: eventHashes.hash, leaf_index: leafIndex, inclusion_path: inclusionPath }))
    .meta({
      description:
        "Leaves of the checkpoint's tree that hold an event of the record the event store no longer has (deleted under the service), each with its inclusion path. Empty unless the store was changed.",
    }),
});

export const resultSchemas = {
  get_workspace: workspaceSchema,
  get_workspace_history: pageOf(workspaceHistoryItemSchema),
  list_workspaces: pageOf(workspaceSchema),
  create_workspace: workspaceSchema,
  update_workspace: workspaceSchema,
  delete_workspace: deletedSchema(workspaceId),
  get_solution: solutionSchema,
  get_solution_history: pageOf(solutionHistoryItemSchema),
  list_solutions: pageOf(solutionSchema),
  create_solution: solutionSchema,
  update_solution: solutionSchema,
  delete_solution: deletedSchema(solutionId),
  get_workspace_provenance: provenanceSchema,
  get_solution_provenance: provenanceSchema,
  diff_workspace: diffSchema(workspaceSchema, workspaceHistoryItemSchema),
  diff_solution: diffSchema(solutionSchema, solutionHistoryItemSchema),
  get_checkpoint: checkpointSchema,
  get_workspace_proof: recordProofSchema,
  get_solution_proof: recordProofSchema,
  get_consistency_proof: z.strictObject({
    from: checkpointSchema,
    to: checkpointSchema,
    path: hexPath('The RFC 9162 consistency path between the two trees.'),
  }),
  list_changes: changePageSchema,
  create_webhook: webhookWithSecretSchema,
  get_webhook: webhookSchema,
  list_webhooks: pageOf(webhookSchema),
  update_webhook: webhookSchema,
  delete_webhook: deletedSchema(webhookId),
  rotate_webhook_secret: webhookWithSecretSchema,
  list_webhook_deliveries: pageOf(deliverySchema),
  redeliver_webhook_change: deliverySchema,
} as const satisfies { [O in OperationName]: z.ZodType };

export type ResultOf<O extends OperationName> = z.output<(typeof resultSchemas)[O]>;

/** The error body of contract §2. */
export const errorBodySchema = (codes: readonly ErrorCode[] = errorCodes) =>
  z.strictObject({
    error: z.strictObject({
      code: z.enum(codes as [ErrorCode, ...ErrorCode[]]),
      message: text('For people; may change.'),
      details: z.array(z.strictObject({ path: text('Where, e.g. params.name.'), message: z.string() })).optional(),
      request_id: text("The response's x-request-id, also in the logs."),
    }),
  });
