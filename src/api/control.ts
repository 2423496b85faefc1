// The operator's control listener: what `sluice models load`, `models unload` and `models resident`
// ask a running server. It listens on the loopback interface only, on a port of its own (never the
// API's, which may face the network), and every request must carry the token the server wrote to
// its data directory's control.json (see control-file.ts): being able to read that file is the
// operator's credential, as being able to read the database is.
import { timingSafeEqual } from "node:crypto";
import { EngineUnavailableError, type Engine } from "../engine/types.ts";
import type { Logger } from "../log.ts";

export interface ControlListener {
  url: string;
  stop(): Promise<void>;
}

const json = (body: unknown, status = 200) => Response.json(body, { status });
const error = (status: number, message: string, code: string) => json({ error: { message, code } }, status);

function authorised(request: Request, token: string): boolean {
  const given = Buffer.from(request.headers.get("authorization")?.replace(/^Bearer /, "") ?? "");
  const want = Buffer.from(token);
  return given.length === want.length && timingSafeEqual(given, want);
}

export function startControlListener(opts: { engine: Engine; token: string; log: Logger }): ControlListener {
  const { engine, log } = opts;
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(request) {
      if (!authorised(request, opts.token)) return error(401, "missing or wrong control token (it is in the data directory's control.json)", "unauthorized");
      const path = new URL(request.url).pathname;
      if (!engine.residency || !engine.loadModel || !engine.unloadModel) return error(501, "this server's engine keeps every model loaded", "not_supported");
      if (request.method === "GET" && path === "/residency") return json(engine.residency());
      if (request.method !== "POST" || (path !== "/residency/load" && path !== "/residency/unload")) return error(404, "no such control route", "not_found");
      let model: unknown;
      try {
        model = ((await request.json()) as { model?: unknown }).model;
      } catch {
        return error(400, "the body must be JSON: {\"model\": ID}", "invalid_body");
      }
      if (typeof model !== "string") return error(400, "the body must be JSON: {\"model\": ID}", "invalid_body");
      if (!engine.residency().models.some((m) => m.model === model)) return error(404, `no model ${model} on this server`, "model_not_found");
      const load = path === "/residency/load";
      log.info(load ? "control: load a model" : "control: unload a model", { model });
      try {
        return json(await (load ? engine.loadModel(model) : engine.unloadModel(model)));
      } catch (e) {
        if (e instanceof EngineUnavailableError) return error(503, e.message, e.code);
        return error(load ? 500 : 409, (e as Error).message, load ? "load_failed" : "in_use");
      }
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}`,
    async stop() {
      await server.stop(true);
    },
  };
}
