// @ts-check
/**
 * The layers of src/ (docs/architecture.md), checked on every `npm run lint` by `depcruise src`.
 * Each layer may import itself and the layers below it; a rule per layer names what it may import,
 * so an import upward, or of a module in no layer, fails with the rule's name and both files.
 * Type-only imports count (tsPreCompilationDeps): they tie the layers together just as well.
 */

/** Bottom layer: pure domain code, and what everything may use. */
const ground = ['^src/domain/', '^src/config[.]ts$', '^src/errors[.]ts$', '^src/infra/', '^src/observability/'];
const eventstore = ['^src/eventstore/'];
/** The capabilities to come (docs/architecture.md): each keeps its pure code apart from its adapters (`adapters/`). */
const capabilities = 'changes|webhooks|integrity|audit';
const middle = [`^src/(write|read|projections|${capabilities})/`];
const api = ['^src/api/'];
/** Start-up: what wires the layers together and runs them. Nothing below imports it. */
const top = ['^src/cli/', '^src/runtime/', '^src/main[.]ts$'];
/** The typed client, published on its own (`workspace-solution-api/client`): beside the layers, never imported by them. */
const client = ['^src/client/'];

/** @type {import('dependency-cruiser').IConfiguration} */
export default {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'Modules that import each other, directly or around a circle, cannot be understood, tested or layered one at a time.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    {
      name: 'domain-is-pure',
      comment:
        'src/domain is pure: it imports only src/domain and zod (validation without I/O). No Node built-in, no other package, ' +
        'no other part of src: time, ids and storage come in as arguments.',
      severity: 'error',
      from: { path: '^src/domain/' },
      to: { pathNot: ['^src/domain/', '(^|/)node_modules/zod/'] },
    },
    {
      name: 'no-upward-import-from-ground',
      comment: 'src/config.ts, src/errors.ts, src/infra and src/observability import only the ground layer (and packages).',
      severity: 'error',
      from: { path: ground, pathNot: '^src/domain/' },
      to: { path: '^src/', pathNot: ground },
    },
    {
      name: 'no-upward-import-from-eventstore',
      comment: 'src/eventstore imports only itself and the ground layer.',
      severity: 'error',
      from: { path: eventstore },
      to: { path: '^src/', pathNot: [...ground, ...eventstore] },
    },
    {
      name: 'no-upward-import-from-middle',
      comment:
        'src/write, src/read, src/projections and the capabilities import only the middle layer, src/eventstore and the ground layer.',
      severity: 'error',
      from: { path: middle },
      to: { path: '^src/', pathNot: [...ground, ...eventstore, ...middle] },
    },
    {
      name: 'read-has-no-domain-code',
      comment: 'src/read is plain query functions over the read tables: no domain code.',
      severity: 'error',
      from: { path: '^src/read/' },
      to: { path: '^src/domain/' },
    },
    {
      name: 'capability-pure-part-imports-no-adapters',
      comment:
        'Outside its adapters/ folder, a capability (src/changes, src/webhooks, src/integrity, src/audit) is pure: it imports ' +
        "only src/domain, src/errors.ts, the event store port's types (src/eventstore/port.ts), the pure parts of the " +
        "capabilities, zod, canonicalize (RFC 8785 canonical JSON), rfc6902 (JSON patches) and Node's crypto (hashes and " +
        'HMACs for proofs and signatures). Its I/O lives in adapters/.',
      severity: 'error',
      from: { path: `^src/(${capabilities})/(?!adapters/)` },
      to: {
        pathNot: [
          '^src/domain/',
          '^src/errors[.]ts$',
          '^src/eventstore/port[.]ts$',
          `^src/(${capabilities})/(?!adapters/)`,
          '(^|/)node_modules/zod/',
          '(^|/)node_modules/canonicalize/',
          '(^|/)node_modules/rfc6902/',
          '^crypto$',
        ],
      },
    },
    {
      name: 'no-upward-import-from-api',
      comment: 'src/api imports only itself and the layers below: the middle layer, src/eventstore and the ground layer.',
      severity: 'error',
      from: { path: api },
      to: { path: '^src/', pathNot: [...ground, ...eventstore, ...middle, ...api] },
    },
    {
      name: 'client-imports-only-types',
      comment: "The typed client ships without the server: it takes the server's types, never its code.",
      severity: 'error',
      from: { path: client },
      to: { path: '^src/', pathNot: client, dependencyTypesNot: ['type-only'] },
    },
    {
      name: 'module-outside-the-layers',
      comment: 'Every module of src/ belongs to a layer (docs/architecture.md); a new folder or root module is placed there first.',
      severity: 'error',
      from: { path: '^src/', pathNot: [...ground, ...eventstore, ...middle, ...api, ...top, ...client] },
      to: {},
    },
  ],
  options: {
    doNotFollow: { path: ['node_modules'] },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    // The graph's links open the modules from where it lives, docs/architecture.svg.
    prefix: '../',
    reporterOptions: {
      // The picture of docs/architecture.md (npm run architecture:graph): the modules of src/, coloured by layer.
      dot: {
        filters: { includeOnly: { path: '^src/' } },
        // The migrations as one box: a list, each imported only by their index.
        collapsePattern: '^src/infra/migrations/',
        theme: {
          graph: { rankdir: 'LR', splines: 'true' },
          modules: [
            { criteria: { source: ground.join('|') }, attributes: { fillcolor: '#e8f5e9' } },
            { criteria: { source: eventstore.join('|') }, attributes: { fillcolor: '#e3f2fd' } },
            { criteria: { source: middle.join('|') }, attributes: { fillcolor: '#fff8e1' } },
            { criteria: { source: api.join('|') }, attributes: { fillcolor: '#fce4ec' } },
            { criteria: { source: top.join('|') }, attributes: { fillcolor: '#ede7f6' } },
            { criteria: { source: client.join('|') }, attributes: { fillcolor: '#eeeeee' } },
          ],
        },
      },
    },
  },
};
