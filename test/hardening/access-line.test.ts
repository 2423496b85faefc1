// The access line of the fast /v1/models route (served from Bun's router, serialised by hand) has
// the fields, order and values of every other route's line.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { startHarness, type Harness } from "./harness.ts";

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h.cleanup());

test("GET /v1/models: one line with the request id, route, path, status, latency and account", async () => {
  const res = await fetch(`${h.url}/v1/models?x=1`, { headers: { authorization: `Bearer ${h.key}`, "x-request-id": "line-1.a:b" } });
  expect(res.status).toBe(200);
  expect(res.headers.get("x-request-id")).toBe("line-1.a:b");
  await res.arrayBuffer();
  const lines = h.logs.filter((l) => l.request_id === "line-1.a:b");
  expect(lines).toHaveLength(1);
  const line = lines[0]!;
  expect(Object.keys(line)).toEqual(["time", "level", "msg", "request_id", "method", "route", "path", "status", "latency_ms", "account_id"]);
  expect(line).toMatchObject({ level: "info", msg: "request", method: "GET", route: "/v1/models", path: "/v1/models", status: 200, account_id: (await h.store.accounts.get("local"))!.id });
  expect(typeof line.latency_ms).toBe("number");
  expect(Number.isNaN(Date.parse(line.time as string))).toBe(false);
  // The same shape as the line of a route served through Elysia.
  await (await fetch(`${h.url}/v1/integrations`, { headers: { "x-request-id": "line-2" } })).arrayBuffer();
  const other = h.logs.find((l) => l.request_id === "line-2")!;
  expect(Object.keys(other)).toEqual(Object.keys(line));
});

test("an unusable x-request-id is replaced, and the line carries the id the response does", async () => {
  const res = await fetch(`${h.url}/v1/models`, { headers: { authorization: `Bearer ${h.key}`, "x-request-id": 'bad"id' } });
  const id = res.headers.get("x-request-id")!;
  expect(id).not.toContain('"');
  await res.arrayBuffer();
  expect(h.logs.filter((l) => l.request_id === id)).toHaveLength(1);
});
