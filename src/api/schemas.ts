import { z } from 'zod';
import { attributes, description, documentation, instant, name, organizationId, solutionId, workspaceId } from '../domain/values.js';

/** The request envelope (contract §1): exactly `query` and `params`. */
export const envelopeSchema = z.strictObject({
  query: z.string(),
  // Kept as given (a record schema would copy it and could lose a `__proto__` key unseen).
  params: z.custom<Record<string, unknown>>((value) => typeof value === 'object' && value !== null && !Array.isArray(value)),
});

const pageNumber = z.number().int().min(1).max(Number.MAX_SAFE_INTEGER);
const paging = { page: pageNumber, size: z.number().int().min(1).max(100) };

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
} as const;

export type OperationName = keyof typeof paramsSchemas;
export type ParamsOf<O extends OperationName> = z.infer<(typeof paramsSchemas)[O]>;
