import { Worker } from 'node:worker_threads';

/**
 * A worker thread running the module `name` that lies beside the caller (`callerUrl`, its
 * `import.meta.url`). When the caller runs from TypeScript source (the npm scripts, under tsx),
 * the worker registers tsx's loader first: a worker does not inherit the loader that `--import tsx`
 * registered on the main thread.
 */
export function startWorkerBeside(callerUrl: string, name: string, workerData: unknown): Worker {
  const fromSource = callerUrl.endsWith('.ts');
  const module = new URL(`./${name}.${fromSource ? 'ts' : 'js'}`, callerUrl);
  if (!fromSource) return new Worker(module, { workerData });
  const tsx = import.meta.resolve('tsx/esm/api');
  return new Worker(
    `import(${JSON.stringify(tsx)}).then(({ register }) => { register(); return import(${JSON.stringify(module.href)}); });`,
    {
      eval: true,
      workerData,
    },
  );
}
