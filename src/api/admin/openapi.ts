// The admin API as an OpenAPI 3.1 document, written from the route table and its TypeBox schemas
// (JSON Schema already, which OpenAPI 3.1 takes as it is): the document cannot drift from what
// the handler routes and validates.
import type { TSchema } from "@sinclair/typebox";
import { VERSION } from "../../version.ts";
import type { AdminRoute } from "./routes.ts";
import { ErrorBody } from "./schemas.ts";

/** A schema without TypeBox's symbol-keyed bookkeeping: plain JSON Schema. */
const plain = (s: TSchema): unknown => JSON.parse(JSON.stringify(s));

const ERRORS: Record<string, string> = {
  "400": "Invalid request (the message and param say what)",
  "401": "Missing, unknown or revoked admin token",
  "404": "No such account, key or model",
  "429": "Rate limit of the token reached",
};

export function openApiDocument(routes: readonly AdminRoute[]) {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) {
    const params = [...r.path.matchAll(/\{([a-z]+)\}/g)].map((m) => ({
      name: m[1],
      in: "path",
      required: true,
      schema: { type: "string" },
      ...(m[1] === "model" ? { description: "a model id; its slashes may be sent as they are or as %2F" } : {}),
    }));
    const query = Object.entries(r.query ?? {}).map(([name, q]) => ({ name, in: "query", required: q.required ?? false, description: q.description, schema: plain(q.schema) }));
    const error = { content: { "application/json": { schema: plain(ErrorBody) } } };
    (paths[r.path] ??= {})[r.method.toLowerCase()] = {
      summary: r.summary,
      operationId: `${r.method.toLowerCase()}${r.path.replace(/\{([a-z]+)\}/g, "By_$1").replace(/[^A-Za-z0-9]+(.)?/g, (_, c: string | undefined) => (c ?? "").toUpperCase())}`,
      ...(params.length || query.length ? { parameters: [...params, ...query] } : {}),
      ...(r.body ? { requestBody: { required: true, content: { "application/json": { schema: plain(r.body) } } } } : {}),
      responses: {
        [String(r.status ?? 200)]: { description: "OK", content: { "application/json": { schema: plain(r.response) } } },
        ...Object.fromEntries(Object.entries(ERRORS).map(([code, description]) => [code, { description, ...error }])),
      },
    };
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "Sluice admin API",
      version: VERSION,
      description: "Operators' automation: accounts, keys, limits, prices, credit and plans, model access, load and unload, usage reports and the audit log. Every change is recorded in the audit log under the token's label.",
    },
    servers: [{ url: "/admin/v1" }],
    components: { securitySchemes: { adminToken: { type: "http", scheme: "bearer", description: "An operator token, sk-sluice-admin-…, from: sluice admin tokens create --label L" } } },
    security: [{ adminToken: [] }],
    paths,
  };
}
