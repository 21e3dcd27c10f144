import { describe, expect, it } from 'vitest';
import {
  applyBatch,
  noChanges,
  rowsNeeded,
  rowsToLoad,
  type BatchChanges,
  type CountDelta,
  type LoadedRows,
} from '../../../src/projections/batch.js';
import type { Envelope } from '../../../src/domain/events.js';
import type { LoggedEvent } from '../../../src/eventstore/event-log.js';
import type { SolutionRow } from '../../../src/projections/solutions-table.js';
import type { WorkspaceRow } from '../../../src/projections/workspaces-table.js';
import {
  at,
  solutionCreated,
  solutionDeleted,
  solutionUpdated,
  workspaceCreated,
  workspaceDeleted,
  workspaceUpdated,
} from '../fixtures.js';

const earlier = '2024-04-01T08:00:00.000000Z';

const workspaceRow = (id: string, organization_id = 'org_acme', fields: Partial<WorkspaceRow> = {}): WorkspaceRow => ({
  id,
  organization_id,
  name: `Workspace ${id}`,
  description: '',
  attributes: {},
  created_at: earlier,
  updated_at: earlier,
  ...fields,
});

const solutionRow = (id: string, workspace_id: string, organization_id = 'org_acme', fields: Partial<SolutionRow> = {}): SolutionRow => ({
  id,
  organization_id,
  workspace_id,
  name: `Solution ${id}`,
  description: '',
  attributes: {},
  documentation: { blocks: [] },
  created_at: earlier,
  updated_at: earlier,
  ...fields,
});

const loaded = (workspaces: WorkspaceRow[] = [], solutions: SolutionRow[] = []): LoadedRows => ({
  workspaces: new Map(workspaces.map((row) => [row.id, row])),
  solutions: new Map(solutions.map((row) => [row.id, row])),
});

const orgDeltas = (deltas: Record<string, Partial<CountDelta>>) =>
  new Map(Object.entries(deltas).map(([id, delta]) => [id, { workspaces: 0, solutions: 0, ...delta }]));
const wsDeltas = (deltas: Record<string, number>) => new Map(Object.entries(deltas));

const changes = (expected: Partial<BatchChanges>): BatchChanges => ({ ...noChanges(), ...expected });

const sortedIds = (ids: string[]) => [...ids].sort();

describe('rowsNeeded', () => {
  it('asks for nothing for an empty batch', () => {
    expect(rowsNeeded([])).toEqual({ workspaceIds: [], solutionIds: [], workspacesDeleted: [] });
  });

  it('asks for every touched workspace, the parent of each created solution, and every touched solution, once each', () => {
    const needed = rowsNeeded([
      workspaceCreated(at('10:00:00.000000'), { id: 'ws_new' }),
      workspaceUpdated(at('10:00:01.000000'), { id: 'ws_upd' }),
      workspaceUpdated(at('10:00:02.000000'), { id: 'ws_upd' }),
      workspaceDeleted(at('10:00:03.000000'), { id: 'ws_del' }),
      solutionCreated(at('10:00:04.000000'), { id: 'sol_new', workspace_id: 'ws_parent' }),
      solutionUpdated(at('10:00:05.000000'), { id: 'sol_upd' }),
      solutionDeleted(at('10:00:06.000000'), { id: 'sol_del', workspace_id: 'ws_not_needed' }),
      solutionUpdated(at('10:00:07.000000'), { id: 'sol_new' }),
    ]);
    expect(sortedIds(needed.workspaceIds)).toEqual(['ws_del', 'ws_new', 'ws_parent', 'ws_upd']);
    expect(sortedIds(needed.solutionIds)).toEqual(['sol_del', 'sol_new', 'sol_upd']);
    expect(needed.workspacesDeleted).toEqual(['ws_del']);
  });
});

describe('rowsToLoad', () => {
  const logged = (event: Envelope, streamName: string, version: bigint, index: number): LoggedEvent => ({
    event,
    id: `event-${index}`,
    streamName,
    version,
    position: { commit: 1n, prepare: BigInt(index) },
    stored: {
      id: `event-${index}`,
      streamName,
      version,
      type: event.type,
      data: event.data,
      metadata: event.metadata,
      position: { commit: 1n, prepare: BigInt(index) },
    },
  });

  it('leaves out the records whose stream begins in the batch, and the solutions of a workspace begun there', () => {
    const needed = rowsToLoad([
      logged(workspaceCreated(at('10:00:00.000000'), { id: 'ws_new' }), 'workspace-ws_new', 1n, 1),
      logged(solutionCreated(at('10:00:01.000000'), { id: 'sol_new', workspace_id: 'ws_new' }), 'solution-sol_new', 1n, 2),
      logged(solutionCreated(at('10:00:02.000000'), { id: 'sol_other', workspace_id: 'ws_old' }), 'solution-sol_other', 1n, 3),
      logged(solutionUpdated(at('10:00:03.000000'), { id: 'sol_old' }), 'solution-sol_old', 4n, 4),
      logged(workspaceDeleted(at('10:00:04.000000'), { id: 'ws_new' }), 'workspace-ws_new', 2n, 5),
      logged(workspaceDeleted(at('10:00:05.000000'), { id: 'ws_gone' }), 'workspace-ws_gone', 3n, 6),
    ]);
    expect(sortedIds(needed.workspaceIds)).toEqual(['ws_gone', 'ws_old']);
    expect(needed.solutionIds).toEqual(['sol_old']);
    expect(needed.workspacesDeleted).toEqual(['ws_gone']);
  });

  it('loads what rowsNeeded asks for when no stream begins in the batch', () => {
    const events = [
      logged(workspaceUpdated(at('10:00:00.000000'), { id: 'ws_1' }), 'workspace-ws_1', 2n, 1),
      logged(solutionDeleted(at('10:00:01.000000'), { id: 'sol_1' }), 'solution-sol_1', 5n, 2),
    ];
    expect(rowsToLoad(events)).toEqual(rowsNeeded(events.map((entry) => entry.event)));
  });
});

describe('applyBatch', () => {
  it('changes nothing for an empty batch', () => {
    expect(applyBatch([], loaded([workspaceRow('ws_1')], [solutionRow('sol_1', 'ws_1')]))).toEqual(noChanges());
  });

  describe('workspaces', () => {
    it('a creation inserts the row and counts one workspace for its organization', () => {
      const result = applyBatch(
        [workspaceCreated(at('10:00:00.000000'), { id: 'ws_1', organization_id: 'org_a', attributes: { k: 1 } })],
        loaded(),
      );
      expect(result).toEqual(
        changes({
          upsertWorkspaces: [
            workspaceRow('ws_1', 'org_a', {
              name: 'Lab',
              attributes: { k: 1 },
              created_at: at('10:00:00.000000'),
              updated_at: at('10:00:00.000000'),
            }),
          ],
          organizationDeltas: orgDeltas({ org_a: { workspaces: 1 } }),
        }),
      );
    });

    it('an update upserts the changed row, keeps created_at and changes no count', () => {
      const row = workspaceRow('ws_1', 'org_acme', { description: 'kept', attributes: { a: 1 } });
      const result = applyBatch(
        [
          workspaceUpdated(at('10:00:00.000000'), { id: 'ws_1', name: 'First' }),
          workspaceUpdated(at('11:00:00.000000'), { id: 'ws_1', name: 'Second', attributes: { a: 2 } }),
        ],
        loaded([row]),
      );
      expect(result).toEqual(
        changes({ upsertWorkspaces: [{ ...row, name: 'Second', attributes: { a: 2 }, updated_at: at('11:00:00.000000') }] }),
      );
    });

    it('a deletion deletes the row, its loaded solutions, and their counts, and lists them for the cascade', () => {
      const result = applyBatch(
        [workspaceDeleted(at('10:00:00.000000'), { id: 'ws_1', organization_id: 'org_a' })],
        loaded(
          [workspaceRow('ws_1', 'org_a'), workspaceRow('ws_2', 'org_a')],
          [solutionRow('sol_1', 'ws_1', 'org_a'), solutionRow('sol_2', 'ws_1', 'org_a'), solutionRow('sol_3', 'ws_2', 'org_a')],
        ),
      );
      expect(result).toEqual(
        changes({
          deleteWorkspaces: ['ws_1'],
          deleteSolutions: ['sol_1', 'sol_2'],
          organizationDeltas: orgDeltas({ org_a: { workspaces: -1, solutions: -2 } }),
          workspaceSolutionDeltas: wsDeltas({ ws_1: -2 }),
          workspacesDeleted: ['ws_1'],
          pendingCascades: [
            { solution_id: 'sol_1', workspace_id: 'ws_1' },
            { solution_id: 'sol_2', workspace_id: 'ws_1' },
          ],
        }),
      );
    });

    it('a creation and deletion in the same batch writes nothing and counts nothing', () => {
      const result = applyBatch(
        [
          workspaceCreated(at('10:00:00.000000'), { id: 'ws_1' }),
          workspaceUpdated(at('10:00:01.000000'), { id: 'ws_1', name: 'Renamed' }),
          workspaceDeleted(at('10:00:02.000000'), { id: 'ws_1' }),
        ],
        loaded(),
      );
      expect(result).toEqual(changes({ workspacesDeleted: ['ws_1'] }));
    });

    it('an update of a workspace that has no row (already deleted) writes nothing', () => {
      expect(applyBatch([workspaceUpdated(at('10:00:00.000000'), { id: 'ws_gone' })], loaded())).toEqual(noChanges());
    });
  });

  describe('solutions', () => {
    it('a creation in an active workspace inserts the row and counts it for the organization and the workspace', () => {
      const result = applyBatch(
        [solutionCreated(at('10:00:00.000000'), { id: 'sol_1', workspace_id: 'ws_1', organization_id: 'org_a' })],
        loaded([workspaceRow('ws_1', 'org_a')]),
      );
      expect(result).toEqual(
        changes({
          upsertSolutions: [
            solutionRow('sol_1', 'ws_1', 'org_a', { name: 'Pump', created_at: at('10:00:00.000000'), updated_at: at('10:00:00.000000') }),
          ],
          organizationDeltas: orgDeltas({ org_a: { solutions: 1 } }),
          workspaceSolutionDeltas: wsDeltas({ ws_1: 1 }),
        }),
      );
    });

    it('a creation in a workspace created earlier in the batch shows', () => {
      const result = applyBatch(
        [
          workspaceCreated(at('10:00:00.000000'), { id: 'ws_1', organization_id: 'org_a' }),
          solutionCreated(at('10:00:01.000000'), { id: 'sol_1', workspace_id: 'ws_1', organization_id: 'org_a' }),
        ],
        loaded(),
      );
      expect(result.upsertSolutions.map((row) => row.id)).toEqual(['sol_1']);
      expect(result.organizationDeltas).toEqual(orgDeltas({ org_a: { workspaces: 1, solutions: 1 } }));
      expect(result.workspaceSolutionDeltas).toEqual(wsDeltas({ ws_1: 1 }));
      expect(result.pendingCascades).toEqual([]);
    });

    it('a creation whose workspace row is absent (deleted) never shows and is listed for the cascade', () => {
      const result = applyBatch([solutionCreated(at('10:00:00.000000'), { id: 'sol_late', workspace_id: 'ws_deleted' })], loaded());
      expect(result).toEqual(changes({ pendingCascades: [{ solution_id: 'sol_late', workspace_id: 'ws_deleted' }] }));
    });

    it('a creation after its workspace was deleted earlier in the same batch never shows', () => {
      const result = applyBatch(
        [
          workspaceDeleted(at('10:00:00.000000'), { id: 'ws_1' }),
          solutionCreated(at('10:00:01.000000'), { id: 'sol_late', workspace_id: 'ws_1' }),
          solutionUpdated(at('10:00:02.000000'), { id: 'sol_late', name: 'Still hidden' }),
        ],
        loaded([workspaceRow('ws_1')]),
      );
      expect(result).toEqual(
        changes({
          deleteWorkspaces: ['ws_1'],
          organizationDeltas: orgDeltas({ org_acme: { workspaces: -1 } }),
          workspacesDeleted: ['ws_1'],
          pendingCascades: [{ solution_id: 'sol_late', workspace_id: 'ws_1' }],
        }),
      );
    });

    it('an update upserts the changed row and counts nothing', () => {
      const row = solutionRow('sol_1', 'ws_1', 'org_acme', {
        description: 'kept',
        documentation: { blocks: [{ type: 'text', content: 'a' }] },
      });
      const documentation = { blocks: [{ type: 'text' as const, content: 'b' }] };
      const result = applyBatch([solutionUpdated(at('10:00:00.000000'), { id: 'sol_1', name: 'New', documentation })], loaded([], [row]));
      expect(result).toEqual(changes({ upsertSolutions: [{ ...row, name: 'New', documentation, updated_at: at('10:00:00.000000') }] }));
    });

    it('a deletion deletes the row and uncounts it for its organization and workspace', () => {
      const result = applyBatch(
        [solutionDeleted(at('10:00:00.000000'), { id: 'sol_1', workspace_id: 'ws_1', organization_id: 'org_b' })],
        loaded([], [solutionRow('sol_1', 'ws_1', 'org_b')]),
      );
      expect(result).toEqual(
        changes({
          deleteSolutions: ['sol_1'],
          organizationDeltas: orgDeltas({ org_b: { solutions: -1 } }),
          workspaceSolutionDeltas: wsDeltas({ ws_1: -1 }),
        }),
      );
    });

    it('a cascade deletion of a solution already hidden with its workspace writes nothing', () => {
      const result = applyBatch([solutionDeleted(at('10:00:00.000000'), { id: 'sol_1', reason: 'workspace_deleted' })], loaded());
      expect(result).toEqual(noChanges());
    });

    it('a creation and deletion in the same batch writes nothing and counts nothing', () => {
      const result = applyBatch(
        [
          solutionCreated(at('10:00:00.000000'), { id: 'sol_1', workspace_id: 'ws_1' }),
          solutionUpdated(at('10:00:01.000000'), { id: 'sol_1', name: 'Changed' }),
          solutionDeleted(at('10:00:02.000000'), { id: 'sol_1', workspace_id: 'ws_1' }),
        ],
        loaded([workspaceRow('ws_1')]),
      );
      expect(result).toEqual(noChanges());
    });
  });

  describe('a workspace deletion within a batch', () => {
    it('removes solutions created earlier in the batch without writing or counting them, and lists them for the cascade', () => {
      const result = applyBatch(
        [
          solutionCreated(at('10:00:00.000000'), { id: 'sol_new', workspace_id: 'ws_1' }),
          workspaceDeleted(at('10:00:01.000000'), { id: 'ws_1' }),
        ],
        loaded([workspaceRow('ws_1')], [solutionRow('sol_old', 'ws_1')]),
      );
      expect(result.upsertSolutions).toEqual([]);
      expect(result.deleteSolutions).toEqual(['sol_old']);
      expect(result.deleteWorkspaces).toEqual(['ws_1']);
      expect(result.organizationDeltas).toEqual(orgDeltas({ org_acme: { workspaces: -1, solutions: -1 } }));
      expect(result.workspaceSolutionDeltas).toEqual(wsDeltas({ ws_1: -1 }));
      expect(result.pendingCascades).toEqual(
        expect.arrayContaining([
          { solution_id: 'sol_old', workspace_id: 'ws_1' },
          { solution_id: 'sol_new', workspace_id: 'ws_1' },
        ]),
      );
      expect(result.pendingCascades).toHaveLength(2);
    });

    it('a workspace, its solutions and its deletion all in one batch write nothing and count nothing', () => {
      const result = applyBatch(
        [
          workspaceCreated(at('10:00:00.000000'), { id: 'ws_1' }),
          solutionCreated(at('10:00:01.000000'), { id: 'sol_1', workspace_id: 'ws_1' }),
          solutionCreated(at('10:00:02.000000'), { id: 'sol_2', workspace_id: 'ws_1' }),
          workspaceDeleted(at('10:00:03.000000'), { id: 'ws_1' }),
        ],
        loaded(),
      );
      expect(result).toEqual(
        changes({
          workspacesDeleted: ['ws_1'],
          pendingCascades: [
            { solution_id: 'sol_1', workspace_id: 'ws_1' },
            { solution_id: 'sol_2', workspace_id: 'ws_1' },
          ],
        }),
      );
    });

    it('does not list a solution deleted on its own earlier in the batch', () => {
      const result = applyBatch(
        [solutionDeleted(at('10:00:00.000000'), { id: 'sol_1' }), workspaceDeleted(at('10:00:01.000000'), { id: 'ws_1' })],
        loaded([workspaceRow('ws_1')], [solutionRow('sol_1', 'ws_1'), solutionRow('sol_2', 'ws_1')]),
      );
      expect(sortedIds(result.deleteSolutions)).toEqual(['sol_1', 'sol_2']);
      expect(result.pendingCascades).toEqual([{ solution_id: 'sol_2', workspace_id: 'ws_1' }]);
      expect(result.organizationDeltas).toEqual(orgDeltas({ org_acme: { workspaces: -1, solutions: -2 } }));
      expect(result.workspaceSolutionDeltas).toEqual(wsDeltas({ ws_1: -2 }));
    });

    it('keeps the later cascade events of its solutions from writing anything', () => {
      const result = applyBatch(
        [
          workspaceDeleted(at('10:00:00.000000'), { id: 'ws_1' }),
          solutionDeleted(at('10:00:00.000000'), { id: 'sol_1', reason: 'workspace_deleted' }),
          solutionUpdated(at('10:00:01.000000'), { id: 'sol_1', name: 'Too late' }),
        ],
        loaded([workspaceRow('ws_1')], [solutionRow('sol_1', 'ws_1')]),
      );
      expect(result.upsertSolutions).toEqual([]);
      expect(result.deleteSolutions).toEqual(['sol_1']);
      expect(result.organizationDeltas).toEqual(orgDeltas({ org_acme: { workspaces: -1, solutions: -1 } }));
    });
  });

  it('counts per organization and per workspace across a mixed batch', () => {
    const result = applyBatch(
      [
        workspaceCreated(at('10:00:00.000000'), { id: 'ws_a2', organization_id: 'org_a' }),
        solutionCreated(at('10:00:01.000000'), { id: 'sol_a2_1', workspace_id: 'ws_a2', organization_id: 'org_a' }),
        solutionCreated(at('10:00:02.000000'), { id: 'sol_a2_2', workspace_id: 'ws_a2', organization_id: 'org_a' }),
        solutionCreated(at('10:00:03.000000'), { id: 'sol_a1_2', workspace_id: 'ws_a1', organization_id: 'org_a' }),
        solutionDeleted(at('10:00:04.000000'), { id: 'sol_a1_1', workspace_id: 'ws_a1', organization_id: 'org_a' }),
        workspaceCreated(at('10:00:05.000000'), { id: 'ws_b2', organization_id: 'org_b' }),
        workspaceDeleted(at('10:00:06.000000'), { id: 'ws_b1', organization_id: 'org_b' }),
        solutionCreated(at('10:00:07.000000'), { id: 'sol_b2_1', workspace_id: 'ws_b2', organization_id: 'org_b' }),
        workspaceUpdated(at('10:00:08.000000'), { id: 'ws_a1', name: 'Renamed' }),
      ],
      loaded(
        [workspaceRow('ws_a1', 'org_a'), workspaceRow('ws_b1', 'org_b')],
        [solutionRow('sol_a1_1', 'ws_a1', 'org_a'), solutionRow('sol_b1_1', 'ws_b1', 'org_b'), solutionRow('sol_b1_2', 'ws_b1', 'org_b')],
      ),
    );
    expect(result.organizationDeltas).toEqual(
      orgDeltas({ org_a: { workspaces: 1, solutions: 2 }, org_b: { workspaces: 0, solutions: -1 } }),
    );
    expect(result.workspaceSolutionDeltas).toEqual(wsDeltas({ ws_a2: 2, ws_a1: 0, ws_b1: -2, ws_b2: 1 }));
    expect(sortedIds(result.upsertWorkspaces.map((row) => row.id))).toEqual(['ws_a1', 'ws_a2', 'ws_b2']);
    expect(result.deleteWorkspaces).toEqual(['ws_b1']);
    expect(sortedIds(result.upsertSolutions.map((row) => row.id))).toEqual(['sol_a1_2', 'sol_a2_1', 'sol_a2_2', 'sol_b2_1']);
    expect(sortedIds(result.deleteSolutions)).toEqual(['sol_a1_1', 'sol_b1_1', 'sol_b1_2']);
    expect(result.workspacesDeleted).toEqual(['ws_b1']);
    expect(result.pendingCascades).toEqual([
      { solution_id: 'sol_b1_1', workspace_id: 'ws_b1' },
      { solution_id: 'sol_b1_2', workspace_id: 'ws_b1' },
    ]);
  });

  it('is pure: the loaded rows and maps are left as they were', () => {
    const rows = loaded([workspaceRow('ws_1')], [solutionRow('sol_1', 'ws_1')]);
    const before = structuredClone(rows);
    applyBatch(
      [
        workspaceUpdated(at('10:00:00.000000'), { id: 'ws_1', name: 'X', attributes: { changed: true } }),
        solutionUpdated(at('10:00:00.000000'), { id: 'sol_1', name: 'Y' }),
        workspaceDeleted(at('10:00:01.000000'), { id: 'ws_1' }),
      ],
      rows,
    );
    expect(rows).toEqual(before);
  });

  it('gives the same result for the same input', () => {
    const events = [
      workspaceCreated(at('10:00:00.000000'), { id: 'ws_1' }),
      solutionCreated(at('10:00:01.000000'), { id: 'sol_1', workspace_id: 'ws_1' }),
    ];
    expect(applyBatch(events, loaded())).toEqual(applyBatch(events, loaded()));
  });
});
