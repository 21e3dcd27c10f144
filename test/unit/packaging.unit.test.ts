import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import semver from 'semver';
import { describe, expect, it } from 'vitest';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const project = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as {
  engines: { node: string };
  allowScripts: Record<string, boolean>;
};

type Manifest = { name: string; version: string; engines?: { node?: string }; scripts?: Record<string, string> };

/** Every package installed under node_modules, nested ones included. */
function installed(directory = path.join(root, 'node_modules')): Manifest[] {
  const found: Manifest[] = [];
  for (const entry of readdirSync(directory, { withFileTypes: true })) {
    if (!entry.isDirectory() || entry.name.startsWith('.')) continue;
    const folder = path.join(directory, entry.name);
    if (entry.name.startsWith('@')) {
      found.push(...installed(folder));
      continue;
    }
    try {
      found.push(JSON.parse(readFileSync(path.join(folder, 'package.json'), 'utf8')) as Manifest);
    } catch {
      continue; // not a package (a bin folder, for instance)
    }
    try {
      found.push(...installed(path.join(folder, 'node_modules')));
    } catch {
      // no nested node_modules: nothing more below this package
    }
  }
  return found;
}

describe('what `npm ci` installs (it must print no warning of the project’s making)', () => {
  const packages = installed();

  it('declares a Node range that includes the Node running the tests', () => {
    expect(semver.satisfies(process.version, project.engines.node)).toBe(true);
  });

  it('installs no package whose engines exclude that Node (npm would warn EBADENGINE)', () => {
    const excluding = packages
      .filter(
        (manifest) => manifest.engines?.node && !semver.satisfies(process.version, manifest.engines.node, { includePrerelease: true }),
      )
      .map((manifest) => `${manifest.name}@${manifest.version} needs node ${manifest.engines!.node}`);
    expect(excluding).toEqual([]);
  });

  it('decides for every package with an install script whether it may run (npm warns otherwise)', () => {
    const undecided = packages
      .filter((manifest) => ['preinstall', 'install', 'postinstall'].some((script) => manifest.scripts?.[script]))
      .filter((manifest) => !(manifest.name in project.allowScripts))
      .map((manifest) => manifest.name);
    expect(undecided).toEqual([]);
  });
});
