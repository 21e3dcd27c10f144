/**
 * The plain-CRUD baseline `npm run bench` measures the service against: the same stack (fastify,
 * the same JSON body parser, jose token verification, the same zod envelope and parameter schemas,
 * pg with the same pool size) and the same answers, but one table and no events: INSERT, UPDATE,
 * SELECT, and lists with OFFSET and COUNT(*). It is what the service would be without event
 * sourcing, so the ratio between the two is the price of the log.
 *
 * Run by the bench as its own process: `node --import tsx bench/crud-baseline.ts` with DATABASE_URL,
 * AUTH_JWT_SECRET and PORT.
 */
import { randomUUID } from 'node:crypto';
import Fastify from 'fastify';
import { customAlphabet } from 'nanoid';
import pg from 'pg';
import { createTokenVerifier } from '../src/api/auth.js';
import { acceptJsonBodies } from '../src/api/json-body.js';
import { envelopeSchema, paramsSchemas } from '../src/api/schemas.js';

const newId = customAlphabet('0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_-', 21);
const poolSize = 20;

const columns = `id, organization_id,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at,
  to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS updated_at,
  name, description, attributes`;

class Refusal extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
  ) {
    super(code);
  }
}

export async function startCrudBaseline(options: { databaseUrl: string; secret: string; port: number }) {
  const pool = new pg.Pool({ connectionString: options.databaseUrl, max: poolSize });
  await pool.query(`CREATE TABLE IF NOT EXISTS crud_workspaces (
    id text PRIMARY KEY, organization_id text NOT NULL, name text NOT NULL, description text NOT NULL,
    attributes jsonb NOT NULL, created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL)`);
  await pool.query('CREATE INDEX IF NOT EXISTS crud_workspaces_list ON crud_workspaces (organization_id, created_at, id)');
  const verify = createTokenVerifier({ kind: 'secret', secret: options.secret });

  const app = Fastify({ genReqId: () => randomUUID() });
  acceptJsonBodies(app);
  app.setErrorHandler((error, request, reply) => {
    const refusal = error instanceof Refusal ? error : new Refusal(500, 'internal_error');
    return reply.code(refusal.status).send({ error: { code: refusal.code, message: refusal.code, request_id: request.id } });
  });

  app.post('/api', async (request) => {
    const principal = await verify(request.headers.authorization).catch(() => {
      throw new Refusal(401, 'unauthenticated');
    });
    const envelope = envelopeSchema.safeParse(request.body);
    if (!envelope.success) throw new Refusal(400, 'bad_request');
    const organizations = [...principal.organizations];
    switch (envelope.data.query) {
      case 'create_workspace': {
        const params = paramsSchemas.create_workspace.safeParse(envelope.data.params);
        if (!params.success) throw new Refusal(400, 'validation_error');
        if (!principal.organizations.has(params.data.organization_id)) throw new Refusal(403, 'forbidden');
        const { rows } = await pool.query(
          `INSERT INTO crud_workspaces VALUES ($1, $2, $3, $4, $5, clock_timestamp(), clock_timestamp()) RETURNING ${columns}`,
          [`ws_${newId()}`, params.data.organization_id, params.data.name, params.data.description ?? '', params.data.attributes ?? {}],
        );
        return { data: rows[0] };
      }
      case 'update_workspace': {
        const params = paramsSchemas.update_workspace.safeParse(envelope.data.params);
        if (!params.success) throw new Refusal(400, 'validation_error');
        // A shallow merge with nulls removed: cheaper than the service's RFC 7396 merge, which favours the baseline.
        const { rows } = await pool.query(
          `UPDATE crud_workspaces SET name = $2, description = COALESCE($3, description),
             attributes = jsonb_strip_nulls(attributes || $4::jsonb), updated_at = clock_timestamp()
           WHERE id = $1 AND organization_id = ANY($5) RETURNING ${columns}`,
          [params.data.id, params.data.name, params.data.description ?? null, params.data.attributes ?? {}, organizations],
        );
        if (rows.length === 0) throw new Refusal(404, 'not_found');
        return { data: rows[0] };
      }
      case 'get_workspace': {
        const params = paramsSchemas.get_workspace.safeParse(envelope.data.params);
        if (!params.success) throw new Refusal(400, 'validation_error');
        const { rows } = await pool.query(`SELECT ${columns} FROM crud_workspaces WHERE id = $1 AND organization_id = ANY($2)`, [
          params.data.id,
          organizations,
        ]);
        if (rows.length === 0) throw new Refusal(404, 'not_found');
        return { data: rows[0] };
      }
      case 'list_workspaces': {
        const params = paramsSchemas.list_workspaces.safeParse(envelope.data.params);
        if (!params.success) throw new Refusal(400, 'validation_error');
        const { page, size } = params.data;
        const [items, count] = await Promise.all([
          pool.query(`SELECT ${columns} FROM crud_workspaces WHERE organization_id = ANY($1) ORDER BY created_at, id OFFSET $2 LIMIT $3`, [
            organizations,
            (page - 1) * size,
            size,
          ]),
          pool.query<{ total: string }>('SELECT count(*) AS total FROM crud_workspaces WHERE organization_id = ANY($1)', [organizations]),
        ]);
        return { data: { total: Number(count.rows[0]!.total), page, size, items: items.rows } };
      }
      default:
        throw new Refusal(400, 'unknown_operation');
    }
  });

  await app.listen({ port: options.port, host: '127.0.0.1' });
  return {
    close: async () => {
      await app.close();
      await pool.end();
    },
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const baseline = await startCrudBaseline({
    databaseUrl: process.env.DATABASE_URL!,
    secret: process.env.AUTH_JWT_SECRET!,
    port: Number(process.env.PORT),
  });
  process.once('SIGTERM', () => void baseline.close().then(() => process.exit(0)));
}
