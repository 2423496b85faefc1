// Logger.json writes the very line info/warn/… would write for the same fields (the fast
// /v1/models route relies on that), for a plain logger and for a child with base fields.
import { expect, test } from "bun:test";
import { createLogger } from "../../src/log.ts";

const fields = { request_id: "abc-1", method: "GET", route: "/v1/models", path: "/v1/models", status: 200, latency_ms: 0.3, account_id: null, note: 'q"uote\\n' };

function pair(make: (write: (l: string) => void) => ReturnType<typeof createLogger>) {
  const lines: string[] = [];
  const log = make((l) => lines.push(l));
  log.info("request", fields);
  log.json("info", "request", JSON.stringify(fields));
  return lines;
}

test("json(): the same bytes as info() with the same fields, time aside", () => {
  const [a, b] = pair((write) => createLogger({ write }));
  const strip = (l: string) => l.replace(/"time":"[^"]+"/, '"time":"T"');
  expect(strip(b!)).toBe(strip(a!));
  expect(Object.keys(JSON.parse(b!))).toEqual(["time", "level", "msg", ...Object.keys(fields)]);
});

test("json() on a child logger keeps the base fields, as info() does", () => {
  const [a, b] = pair((write) => createLogger({ write }).child({ room: "api" }));
  const pa = JSON.parse(a!) as Record<string, unknown>;
  const pb = JSON.parse(b!) as Record<string, unknown>;
  delete pa.time;
  delete pb.time;
  expect(pb).toEqual(pa);
  expect(pb.room).toBe("api");
});

test("json() respects the level and empty fields", () => {
  const lines: string[] = [];
  const log = createLogger({ level: "warn", write: (l) => lines.push(l) });
  log.json("info", "request", '{"a":1}');
  expect(lines).toHaveLength(0);
  log.json("warn", "w", "{}");
  expect(JSON.parse(lines[0]!)).toEqual({ time: expect.any(String), level: "warn", msg: "w" });
});
