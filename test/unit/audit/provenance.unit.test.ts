import { describe, expect, it } from 'vitest';
import {
  fieldsAt,
  foldUntil,
  initialProvenance,
  pointerToken,
  provenanceEvolve,
  recordPatch,
  sameJson,
  solutionFold,
  workspaceFold,
  type FieldProvenance,
  type ProvenanceState,
} from '../../../src/audit/provenance.js';
import type { Envelope, SolutionEvent, WorkspaceEvent } from '../../../src/domain/events.js';
import type { JsonObject } from '../../../src/domain/merge-patch.js';
import { fromMicros, toMicros, type Timestamp } from '../../../src/domain/timestamp.js';
import { decideWorkspace, evolveWorkspace, initialWorkspaceState, type WorkspaceCommand } from '../../../src/domain/workspace.js';
import { seededRandom } from '../../support/generate.js';
import { applyJsonPatch } from '../../support/json-patch.js';
import { at, solutionCreated, solutionUpdated, workspaceCreated, workspaceDeleted, workspaceUpdated } from '../fixtures.js';

const by = (actor: string) => ({ actor });

/** Provenance over a stream's events given one after another from its start, with nothing of another program's between. */
const inStreamOrder =
  <State, Event extends WorkspaceEvent | SolutionEvent>(
    evolve: (state: ProvenanceState<State>, event: Envelope<Event>, version: bigint) => ProvenanceState<State>,
  ) =>
  (state: ProvenanceState<State>, event: Envelope<Event>) =>
    evolve(state, event, BigInt(state.version + 1));

/** Given a workspace's events, when provenance is folded up to `until`, the fields with their origins. */
const workspaceProvenance = (events: Envelope<WorkspaceEvent>[], until?: Timestamp): FieldProvenance[] => [
  ...Object.values(foldUntil(inStreamOrder(provenanceEvolve(workspaceFold)), initialProvenance(workspaceFold), events, until).state.fields),
];
const solutionProvenance = (events: Envelope<SolutionEvent>[], until?: Timestamp): FieldProvenance[] => [
  ...Object.values(foldUntil(inStreamOrder(provenanceEvolve(solutionFold)), initialProvenance(solutionFold), events, until).state.fields),
];

const origin = (fields: FieldProvenance[], path: string) => {
  const field = fields.find((candidate) => candidate.path === path);
  return field && { value: field.value, version: field.version, set_by: field.set_by, set_at: field.set_at };
};

describe('provenance: who last set each field', () => {
  it('given a workspace just created, every field was set by its creator at version 1, in the Response order, attribute keys sorted', () => {
    const fields = workspaceProvenance([
      workspaceCreated(at('10:00:00.000000'), { description: 'Lab', attributes: { size: { rooms: 3 }, owner: 'ann' } }, by('alice')),
    ]);
    expect(fields).toEqual([
      { path: '/name', value: 'Lab', version: 1, set_at: at('10:00:00.000000'), set_by: 'alice' },
      { path: '/description', value: 'Lab', version: 1, set_at: at('10:00:00.000000'), set_by: 'alice' },
      { path: '/attributes/owner', value: 'ann', version: 1, set_at: at('10:00:00.000000'), set_by: 'alice' },
      { path: '/attributes/size/rooms', value: 3, version: 1, set_at: at('10:00:00.000000'), set_by: 'alice' },
    ]);
  });

  it('given an attribute set, overwritten, removed and re-added by different actors, names the one who re-added it', () => {
    const events = [
      workspaceCreated(at('10:00:00.000000'), { attributes: { owner: 'ann', keep: 1 } }, by('alice')),
      workspaceUpdated(at('10:00:01.000000'), { attributes: { owner: 'bea', keep: 1 } }, by('bob')),
      workspaceUpdated(at('10:00:02.000000'), { attributes: { keep: 1 } }, by('carol')),
      workspaceUpdated(at('10:00:03.000000'), { attributes: { keep: 1, owner: 'bea' } }, by('dave')),
    ];
    expect(origin(workspaceProvenance(events.slice(0, 2)), '/attributes/owner')).toMatchObject({ value: 'bea', version: 2, set_by: 'bob' });
    expect(origin(workspaceProvenance(events.slice(0, 3)), '/attributes/owner')).toBeUndefined();
    const fields = workspaceProvenance(events);
    // Re-added with the value it had before its removal: still the re-adding event, not bob's.
    expect(origin(fields, '/attributes/owner')).toEqual({ value: 'bea', version: 4, set_by: 'dave', set_at: at('10:00:03.000000') });
    expect(origin(fields, '/attributes/keep')).toMatchObject({ version: 1, set_by: 'alice' });
  });

  it('given a nested object replaced by a scalar and back, the leaves follow each change', () => {
    const events = [
      workspaceCreated(at('10:00:00.000000'), { attributes: { site: { city: 'Oslo', floor: 2 } } }, by('alice')),
      workspaceUpdated(at('10:00:01.000000'), { attributes: { site: 'remote' } }, by('bob')),
      workspaceUpdated(at('10:00:02.000000'), { attributes: { site: { city: 'Oslo', floor: 2 } } }, by('carol')),
    ];
    expect(workspaceProvenance(events.slice(0, 2)).filter(({ path }) => path.startsWith('/attributes'))).toEqual([
      { path: '/attributes/site', value: 'remote', version: 2, set_at: at('10:00:01.000000'), set_by: 'bob' },
    ]);
    expect(workspaceProvenance(events).filter(({ path }) => path.startsWith('/attributes'))).toEqual([
      { path: '/attributes/site/city', value: 'Oslo', version: 3, set_at: at('10:00:02.000000'), set_by: 'carol' },
      { path: '/attributes/site/floor', value: 2, version: 3, set_at: at('10:00:02.000000'), set_by: 'carol' },
    ]);
  });

  it('escapes "~" as ~0 and "/" as ~1 in attribute keys (RFC 6901), "~1" itself included', () => {
    const fields = workspaceProvenance([
      workspaceCreated(at('10:00:00.000000'), { attributes: { 'a/b': 1, 'm~n': { '~1': 2 }, '': 3 } }, by('alice')),
    ]);
    expect(fields.map(({ path }) => path).slice(2)).toEqual(['/attributes/', '/attributes/a~1b', '/attributes/m~0n/~01']);
    expect(pointerToken('~/')).toBe('~0~1');
  });

  it('treats arrays, scalars, null-free values and nested empty objects as leaves; empty attributes have none', () => {
    const fields = workspaceProvenance([
      workspaceCreated(at('10:00:00.000000'), { attributes: { tags: ['a', { b: 1 }], flag: false, none: {} } }, by('alice')),
    ]);
    expect(fields.map(({ path, value }) => [path, value]).slice(2)).toEqual([
      ['/attributes/flag', false],
      ['/attributes/none', {}],
      ['/attributes/tags', ['a', { b: 1 }]],
    ]);
    expect(workspaceProvenance([workspaceCreated(at('10:00:00.000000'), {}, by('alice'))]).map(({ path }) => path)).toEqual([
      '/name',
      '/description',
    ]);
  });

  it('keeps the origin of a field an update gives the value it already had (events record values, not the patch)', () => {
    const fields = workspaceProvenance([
      workspaceCreated(at('10:00:00.000000'), { name: 'Lab', attributes: { tags: [{ x: 1, y: 2 }] } }, by('alice')),
      workspaceUpdated(
        at('10:00:01.000000'),
        { name: 'Lab', description: 'now described', attributes: { tags: [{ y: 2, x: 1 }] } },
        by('bob'),
      ),
    ]);
    expect(origin(fields, '/name')).toMatchObject({ version: 1, set_by: 'alice' });
    expect(origin(fields, '/attributes/tags')).toMatchObject({ version: 1, set_by: 'alice' });
    expect(origin(fields, '/description')).toMatchObject({ value: 'now described', version: 2, set_by: 'bob' });
  });

  it('reports a solution’s documentation whole, last', () => {
    const blocks = [{ type: 'text' as const, content: 'v2' }];
    const fields = solutionProvenance([
      solutionCreated(at('10:00:00.000000'), { attributes: { a: 1 } }, by('alice')),
      solutionUpdated(at('10:00:01.000000'), { documentation: { blocks } }, by('bob')),
    ]);
    expect(fields.map(({ path }) => path)).toEqual(['/name', '/description', '/attributes/a', '/documentation']);
    expect(origin(fields, '/documentation')).toMatchObject({ value: { blocks }, version: 2, set_by: 'bob' });
  });

  it('has no fields once the record is deleted, nor before it is created', () => {
    const events = [workspaceCreated(at('10:00:00.000000')), workspaceDeleted(at('10:00:01.000000'))];
    expect(workspaceProvenance(events, at('09:59:59.999999'))).toEqual([]);
    expect(workspaceProvenance(events, at('10:00:00.999999'))).toHaveLength(2);
    expect(workspaceProvenance(events)).toEqual([]);
  });

  it('narrows to the fields at, under or holding a pointer', () => {
    const fields = workspaceProvenance([workspaceCreated(at('10:00:00.000000'), { attributes: { a: { b: 1, c: 2 }, t: [1, 2] } })]);
    const paths = (pointer: string | undefined) => fieldsAt(fields, pointer).map(({ path }) => path);
    expect(paths(undefined)).toEqual(['/name', '/description', '/attributes/a/b', '/attributes/a/c', '/attributes/t']);
    expect(paths('')).toEqual(paths(undefined));
    expect(paths('/attributes/a')).toEqual(['/attributes/a/b', '/attributes/a/c']);
    expect(paths('/attributes/t/0')).toEqual(['/attributes/t']);
    expect(paths('/attributes/a/bc')).toEqual([]);
    expect(paths('/nam')).toEqual([]);
  });
});

describe('foldUntil: a record up to an instant', () => {
  const events = [
    workspaceCreated(at('10:00:00.000000'), { attributes: { n: 1 } }, by('alice')),
    workspaceUpdated(at('10:00:01.000000'), { attributes: { n: 2 } }, by('bob')),
    workspaceUpdated(at('10:00:02.000000'), { attributes: { n: 3 } }, by('carol')),
  ];

  it('takes the events that occurred at or before the instant, and stops at the first after it', () => {
    let seen = 0;
    const counting = (state: number, event: Envelope) => {
      seen++;
      return state + (event.metadata.occurred_at ? 1 : 0);
    };
    expect(foldUntil(counting, 0, events, at('10:00:01.000000'))).toEqual({ state: 2, taken: 2 });
    expect(seen).toBe(2);
    expect(foldUntil(counting, 0, events, at('09:00:00.000000')).taken).toBe(0);
    expect(foldUntil(counting, 0, events, undefined).taken).toBe(3);
  });

  it('continued from a state part-way (a snapshot) ends where the whole fold ends, versions included', () => {
    const evolve = inStreamOrder(provenanceEvolve(workspaceFold));
    const whole = foldUntil(evolve, initialProvenance(workspaceFold), events, undefined).state;
    const part = foldUntil(evolve, initialProvenance(workspaceFold), events.slice(0, 1), undefined).state;
    // Kept as a snapshot is kept: as JSON text.
    const snapshot = JSON.parse(JSON.stringify(part)) as typeof part;
    const resumed = foldUntil(evolve, snapshot, events.slice(1), undefined).state;
    expect(resumed).toEqual(whole);
    expect(resumed.fields['/attributes/n']).toMatchObject({ version: 3, set_by: 'carol' });
  });

  it("given another program's event between two of the record's, the later one's fields carry its own version in the stream", () => {
    const evolve = provenanceEvolve(workspaceFold);
    const created = evolve(initialProvenance(workspaceFold), events[0]!, 1n);
    const updated = evolve(created, events[1]!, 3n);
    expect(created.fields['/name']).toMatchObject({ version: 1 });
    expect(Object.values(updated.fields).map((field) => field.version)).toContain(3);
    expect(Object.values(updated.fields).some((field) => field.version === 2)).toBe(false);
  });
});

describe('sameJson', () => {
  it('compares JSON values structurally, object key order aside', () => {
    expect(sameJson({ a: [1, { b: 2, c: 3 }] }, { a: [1, { c: 3, b: 2 }] })).toBe(true);
    expect(sameJson([1, 2], [2, 1])).toBe(false);
    expect(sameJson({ a: undefined }, { b: undefined })).toBe(false);
    expect(sameJson({}, [])).toBe(false);
    expect(sameJson(null, {})).toBe(false);
    expect(sameJson('1', 1)).toBe(false);
  });
});

describe('recordPatch: RFC 6902 operations from one record to another', () => {
  it('adds or removes the whole record at "" when it is absent at one end, and is empty when absent at both', () => {
    expect(recordPatch(null, { a: 1 })).toEqual([{ op: 'add', path: '', value: { a: 1 } }]);
    expect(recordPatch({ a: 1 }, null)).toEqual([{ op: 'remove', path: '' }]);
    expect(recordPatch(null, null)).toEqual([]);
    expect(applyJsonPatch({ a: 1 }, recordPatch({ a: 1 }, null))).toBeNull();
    expect(applyJsonPatch(null, recordPatch(null, { a: 1 }))).toEqual({ a: 1 });
  });

  it('lists its operations in one order whatever order the stores give the keys in', () => {
    const expected = [
      { op: 'remove', path: '/a' },
      { op: 'remove', path: '/c' },
      { op: 'add', path: '/d', value: 1 },
      { op: 'replace', path: '/n/x', value: 2 },
      { op: 'replace', path: '/n/y', value: 2 },
    ];
    expect(recordPatch({ c: 1, n: { y: 1, x: 1 }, a: 1 }, { n: { x: 2, y: 2 }, d: 1 })).toEqual(expected);
    expect(recordPatch({ a: 1, n: { x: 1, y: 1 }, c: 1 }, { d: 1, n: { y: 2, x: 2 } })).toEqual(expected);
  });

  it('given long arrays changed throughout, gives a patch that turns one into the other, without running out of stack or memory', () => {
    const numbers = (shift: number) => Array.from({ length: 30_000 }, (_, index) => (index + shift) % 10);
    const from = { attributes: { a: numbers(0) } };
    const to = { attributes: { a: numbers(1) } };
    expect(applyJsonPatch(from, recordPatch(from, to))).toEqual(to);
    const blocks = (text: string, count: number) => ({
      documentation: { blocks: Array.from({ length: count }, (_, index) => ({ type: 'text', content: `${text}${index}` })) },
    });
    expect(applyJsonPatch(blocks('a', 1000), recordPatch(blocks('a', 1000), blocks('b', 1000)))).toEqual(blocks('b', 1000));
    expect(applyJsonPatch(blocks('a', 1000), recordPatch(blocks('a', 1000), blocks('b', 600)))).toEqual(blocks('b', 600));
    expect(applyJsonPatch(blocks('a', 600), recordPatch(blocks('a', 600), blocks('b', 1000)))).toEqual(blocks('b', 1000));
    const many = Array.from({ length: 10_000 }, (_, index) => index);
    const short = many.slice(0, 100);
    for (const [before, after] of [
      [[], many],
      [many, []],
      [short, [...short, ...many]],
      [
        [...short, ...many, ...short],
        [...short, ...short],
      ],
    ]) {
      expect(applyJsonPatch({ a: before }, recordPatch({ a: before }, { a: after }))).toEqual({ a: after });
    }
  });

  it('given a long array with one element inserted, removed or changed, names just that one', () => {
    const long = Array.from({ length: 5000 }, (_, index) => index);
    const edits = [
      { changed: [...long.slice(0, 2500), -1, ...long.slice(2500)], operation: { op: 'add', path: '/a/2500', value: -1 } },
      { changed: [...long.slice(0, 2500), ...long.slice(2501)], operation: { op: 'remove', path: '/a/2500' } },
      { changed: long.map((item) => (item === 2500 ? -1 : item)), operation: { op: 'replace', path: '/a/2500', value: -1 } },
    ];
    for (const { changed, operation } of edits) expect(recordPatch({ a: long }, { a: changed })).toEqual([operation]);
  });

  it('given generated long arrays with scattered edits, applying the patch to `from` gives `to`', () => {
    const random = seededRandom(23);
    const element = () => (random() < 0.5 ? Math.floor(random() * 4) : { k: Math.floor(random() * 3), l: [Math.floor(random() * 2)] });
    for (let round = 0; round < 300; round++) {
      const from = Array.from({ length: 40 + Math.floor(random() * 100) }, element);
      const to = [...from];
      for (let edit = 1 + Math.floor(random() * 6); edit > 0; edit--) {
        const index = Math.floor(random() * (to.length + 1));
        const roll = random();
        if (roll < 0.35) to.splice(index, 0, element());
        else if (roll < 0.7) to.splice(Math.min(index, to.length - 1), 1);
        else to[Math.min(index, to.length - 1)] = element();
      }
      if (random() < 0.2) to.push(...Array.from({ length: Math.floor(random() * 80) }, element));
      const patch = recordPatch({ a: from }, { a: to });
      expect({ round, applied: applyJsonPatch({ a: from }, patch) }).toEqual({ round, applied: { a: to } });
    }
  });

  it('escapes keys in its paths', () => {
    expect(recordPatch({ attributes: { 'a/b': 1, 'c~d': 1 } }, { attributes: { 'a/b': 2 } })).toEqual(
      expect.arrayContaining([
        { op: 'remove', path: '/attributes/c~0d' },
        { op: 'replace', path: '/attributes/a~1b', value: 2 },
      ]),
    );
  });

  /**
   * Many generated histories, decided by the real decider with random merge patches (keys that
   * need escaping, objects turned scalars and back, removals, arrays); for random pairs of
   * instants, before creation and after deletion included: the patch applied to `from` by an
   * applier independent of the library gives `to`, and each field's provenance is the earliest
   * event after which the field has held its value.
   */
  it('given generated histories, applying the patch to `from` gives `to`, and provenance names the earliest unchanged event', () => {
    const random = seededRandom(17);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
    const keys = ['a', 'b', 'x/y', 'm~n', '~1', ''];
    const value = (depth: number): unknown => {
      const roll = random();
      if (roll < 0.3) return pick([0, 1, -2.5, 'v', '', true, false]);
      if (roll < 0.45) return [pick([1, 'w']), ...(random() < 0.5 ? [{ k: pick([1, 2]) }] : [])];
      if (roll < 0.55) return null;
      if (depth >= 3) return pick([3, 'deep']);
      return Object.fromEntries(Array.from({ length: 1 + Math.floor(random() * 3) }, () => [pick(keys), value(depth + 1)]));
    };
    const patch = (): JsonObject => Object.fromEntries(Array.from({ length: 1 + Math.floor(random() * 3) }, () => [pick(keys), value(1)]));
    const actors = ['alice', 'bob', 'carol'];

    for (let history = 0; history < 200; history++) {
      let micros = 1_700_000_000_000_000n + BigInt(history) * 1_000_000n;
      const context = () => ({ actor: pick(actors), requestId: 'req', now: fromMicros((micros += 1n + BigInt(Math.floor(random() * 3)))) });
      const events: Envelope<WorkspaceEvent>[] = [];
      let state = initialWorkspaceState;
      const decide = (command: WorkspaceCommand) => {
        for (const event of decideWorkspace(command, state)) {
          events.push(event);
          state = evolveWorkspace(state, event);
        }
      };
      decide({ type: 'CreateWorkspace', id: 'ws_p', organizationId: 'org_p', name: 'N', attributes: patch(), context: context() });
      const updates = Math.floor(random() * 12);
      for (let update = 0; update < updates; update++) {
        decide({
          type: 'UpdateWorkspace',
          id: 'ws_p',
          name: random() < 0.7 ? 'N' : pick(['M', 'O']),
          ...(random() < 0.3 ? { description: pick(['', 'd', 'e']) } : {}),
          ...(random() < 0.8 ? { attributes: patch() } : {}),
          context: context(),
        });
      }
      if (random() < 0.4) decide({ type: 'DeleteWorkspace', id: 'ws_p', context: context() });

      const instants = events.map((event) => event.metadata.occurred_at);
      const instant = () => {
        // One microsecond either side of an event, or on it: before creation and after deletion come up too.
        return fromMicros(toMicros(pick(instants)) + pick([-1n, 0n, 1n]));
      };
      const [from, to] = [instant(), instant()].sort();
      const recordAt = (until: Timestamp) =>
        workspaceFold.present(foldUntil(evolveWorkspace, initialWorkspaceState, events, until).state) ?? null;
      const before = recordAt(from!);
      const after = recordAt(to!);
      const operations = recordPatch(before, after);
      expect(operations.every(({ op }) => op === 'add' || op === 'remove' || op === 'replace')).toBe(true);
      expect(applyJsonPatch(before, operations)).toEqual(after);

      const taken = foldUntil(evolveWorkspace, initialWorkspaceState, events, to).taken;
      const states = events
        .slice(0, taken)
        .map((_, index) =>
          workspaceFold.present(foldUntil(evolveWorkspace, initialWorkspaceState, events.slice(0, index + 1), undefined).state),
        );
      const valueAt = (record: object | undefined, path: string): unknown => {
        let current: unknown = record;
        for (const token of path
          .slice(1)
          .split('/')
          .map((part) => part.replaceAll('~1', '/').replaceAll('~0', '~'))) {
          if (typeof current !== 'object' || current === null || !Object.hasOwn(current, token)) return undefined;
          current = (current as Record<string, unknown>)[token];
        }
        return current;
      };
      for (const field of workspaceProvenance(events, to)) {
        expect(sameJson(valueAt(after!, field.path), field.value)).toBe(true);
        for (const later of states.slice(field.version - 1)) expect(sameJson(valueAt(later, field.path), field.value)).toBe(true);
        if (field.version > 1) expect(sameJson(valueAt(states[field.version - 2], field.path), field.value)).toBe(false);
        expect(field.set_by).toBe(events[field.version - 1]!.metadata.actor);
      }
    }
  });
});
