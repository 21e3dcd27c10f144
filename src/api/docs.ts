import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { openApiDocument } from './openapi.js';

/**
 * `GET /openapi.json` and the docs page at `GET /docs`, without a token: the document holds the
 * API's shape, nothing about its data. Swagger UI's files come from the swagger-ui-dist package
 * and are served by the service itself, so the page works offline and loads nothing from elsewhere.
 */

const require = createRequire(import.meta.url);
const swaggerUi = path.dirname(require.resolve('swagger-ui-dist/package.json'));
// The same relative path from src/api and from the build's dist/api.
const { version } = require('../../package.json') as { version: string };

const assets: Record<string, { file: string; type: string }> = {
  'swagger-ui.css': { file: 'swagger-ui.css', type: 'text/css; charset=utf-8' },
  'swagger-ui-bundle.js': { file: 'swagger-ui-bundle.js', type: 'text/javascript; charset=utf-8' },
  'favicon-32x32.png': { file: 'favicon-32x32.png', type: 'image/png' },
};

const page = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Workspace &amp; Solution API</title>
  <link rel="icon" type="image/png" href="/docs/favicon-32x32.png">
  <link rel="stylesheet" href="/docs/swagger-ui.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="/docs/swagger-ui-bundle.js"></script>
  <script src="/docs/init.js"></script>
</body>
</html>
`;

// A file of its own rather than an inline script, so the page runs under a CSP without 'unsafe-inline' scripts.
const init = `window.ui = SwaggerUIBundle({
  url: '/openapi.json',
  dom_id: '#swagger-ui',
  deepLinking: true,
});
`;

// Swagger UI sets inline styles and shows inline SVG and data: images; nothing is loaded from elsewhere.
const contentSecurityPolicy = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'";

export function registerApiDocs(app: FastifyInstance): void {
  let document: string | undefined;
  app.get('/openapi.json', async (_request, reply) => {
    document ??= JSON.stringify(openApiDocument(version));
    return reply.type('application/json; charset=utf-8').send(document);
  });
  app.get('/docs', async (_request, reply) =>
    reply.type('text/html; charset=utf-8').header('content-security-policy', contentSecurityPolicy).send(page),
  );
  // The page's address with a slash, as browsers and people often complete it. 302, not 301:
  // browsers keep a 301 for good, so it could not be taken back if /docs/ ever served something.
  app.get('/docs/', async (_request, reply) => reply.redirect('/docs', 302));
  app.get('/docs/init.js', async (_request, reply) => reply.type('text/javascript; charset=utf-8').send(init));
  const cache = new Map<string, Buffer>();
  for (const [name, asset] of Object.entries(assets)) {
    app.get(`/docs/${name}`, async (_request, reply) => {
      let content = cache.get(name);
      if (content === undefined) {
        content = await readFile(path.join(swaggerUi, asset.file));
        cache.set(name, content);
      }
      return reply.type(asset.type).header('cache-control', 'public, max-age=86400').send(content);
    });
  }
}
