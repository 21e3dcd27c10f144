import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rename, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { chromium, type Browser } from 'playwright-core';

/** Where Debian's `chromium` package puts the browser. */
const debianChromium = '/usr/bin/chromium';

/** Root (as in CI containers) needs --no-sandbox; the rest keeps Chromium off the network it would call home on. */
const launchFlags = ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

/** A headless Chromium, kept off the network, from {@link chromiumExecutable}. */
export async function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: await chromiumExecutable(), args: launchFlags });
}

/**
 * The Chromium named by CHROMIUM_PATH, else Debian's where it is installed, else the one that the
 * `@sparticuz/chromium` dev dependency ships, so the tests need nothing but `npm ci`. A set
 * CHROMIUM_PATH is an explicit choice: if nothing is there, this fails rather than pick another.
 */
export async function chromiumExecutable(): Promise<string> {
  const named = process.env.CHROMIUM_PATH;
  if (named) {
    if (!existsSync(named)) {
      throw new Error(
        `CHROMIUM_PATH is ${named}, where there is no file: point it at a Chromium, or unset it to use Debian's or the npm package's`,
      );
    }
    return named;
  }
  return existsSync(debianChromium) ? debianChromium : packagedChromium();
}

/**
 * The package's Chromium, decompressed once per version into a folder of its own (about 200 MB, a
 * few seconds; later runs reuse it). The package's own `executablePath()` writes straight into the
 * temporary directory and takes any file already there as finished, so two test files starting
 * together would run a half-written binary (spawn ETXTBSY), and a run killed midway would leave one
 * behind for good. Here it decompresses in a child whose TMPDIR is a fresh folder, which is renamed
 * into place once complete: the first rename wins, and a later one finds the folder taken.
 */
async function packagedChromium(): Promise<string> {
  const entry = createRequire(import.meta.url).resolve('@sparticuz/chromium');
  const packageJson = path.resolve(path.dirname(entry), '..', '..', 'package.json');
  const { version } = JSON.parse(readFileSync(packageJson, 'utf8')) as { version: string };
  const folder = path.join(tmpdir(), `sparticuz-chromium-${version}`);
  const executable = path.join(folder, 'chromium');
  if (existsSync(executable)) return executable;

  const partial = await mkdtemp(`${folder}.partial-`);
  try {
    const inflate = "import chromium from '@sparticuz/chromium'; await chromium.executablePath();";
    await promisify(execFile)(process.execPath, ['--input-type=module', '--eval', inflate], {
      cwd: path.dirname(fileURLToPath(import.meta.url)),
      env: { ...process.env, TMPDIR: partial },
    });
    await rename(partial, folder);
  } catch (error) {
    // Only a complete copy is ever renamed to `folder`: if one is there, another test file finished first.
    if (!existsSync(executable)) throw error;
  } finally {
    await rm(partial, { recursive: true, force: true });
  }
  return executable;
}
