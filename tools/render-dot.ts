/**
 * Renders a Graphviz dot file as SVG with Graphviz compiled to WebAssembly (@viz-js/viz), so that
 * `npm run architecture:graph` needs nothing installed besides Node.js.
 *
 *   node --import tsx tools/render-dot.ts docs/architecture.dot docs/architecture.svg
 */
import { readFile, writeFile } from 'node:fs/promises';
import { instance } from '@viz-js/viz';

const [input, output] = process.argv.slice(2);
if (!input || !output) {
  process.stderr.write('usage: node --import tsx tools/render-dot.ts <input.dot> <output.svg>\n');
  process.exit(2);
}
const viz = await instance();
await writeFile(output, viz.renderString(await readFile(input, 'utf8'), { format: 'svg' }));
