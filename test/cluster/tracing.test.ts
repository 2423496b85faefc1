// A request forwarded between two real nodes on one PostgreSQL gives one trace: the node the
// client called has its server span, its admission and a client span for the hop; the node that
// runs the model continues the trace under that hop, with its own server span, the hop's
// authentication and the generation. One node is configured by OpenTelemetry's environment
// variables, the other by serve's flags; both send to one real OTLP/HTTP receiver.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { startCluster, type ClusterNode, type TestCluster } from "../helpers/cluster.ts";
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from "../helpers/otlp-receiver.ts";
import { postgresMissing } from "../helpers/postgres.ts";

const B_MODEL = "cluster/traced-b";
let c: TestCluster;
let a: ClusterNode;
let b: ClusterNode;
let collector: OtlpReceiver;

describe.skipIf(postgresMissing !== null)("tracing across two nodes", () => {
  beforeAll(async () => {
    collector = startOtlpReceiver();
    c = await startCluster([
      { models: {}, env: { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_SERVICE_NAME: "sluice-a", OTEL_BSP_SCHEDULE_DELAY: "20" } },
      {
        models: { "traced-b": { preset: "tiny-bytes", seed: 41, id: B_MODEL } },
        args: ["--otlp-traces-endpoint", `${collector.url}/v1/traces`, "--service-name", "sluice-b"],
        env: { OTEL_BSP_SCHEDULE_DELAY: "20" },
      },
    ]);
    [a, b] = c.nodes as [ClusterNode, ClusterNode];
  }, 120_000);
  afterAll(async () => {
    await c?.stop();
    collector?.stop();
  });

  const one = (spans: ReceivedSpan[], name: string, service: string) => {
    const found = spans.filter((s) => s.name === name && s.resource["service.name"] === service);
    expect(found.map((s) => `${s.resource["service.name"]} ${s.name}`)).toEqual([`${service} ${name}`]);
    return found[0]!;
  };

  test("a request forwarded to the node that serves its model is one trace across both nodes", async () => {
    const traceId = Buffer.from(crypto.getRandomValues(new Uint8Array(16))).toString("hex");
    const parentId = Buffer.from(crypto.getRandomValues(new Uint8Array(8))).toString("hex");
    const res = await fetch(`${a.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${c.key}`, "content-type": "application/json", traceparent: `00-${traceId}-${parentId}-01` },
      body: JSON.stringify({ model: B_MODEL, messages: [{ role: "user", content: "Tell me a story" }], max_tokens: 6, stream: true }),
      signal: AbortSignal.timeout(30_000),
    });
    expect(res.status).toBe(200);
    expect(await res.text()).toContain("[DONE]");
    expect(res.headers.get("x-trace-id")).toBe(traceId);
    const spans = await collector.waitFor((all) => {
      const mine = all.filter((s) => s.traceId === traceId);
      return mine.filter((s) => s.kind === 2).length === 2 && mine.some((s) => s.name === "sluice.forward") && mine.some((s) => s.name === "sluice.decode");
    });
    const trace = spans.filter((s) => s.traceId === traceId);
    // The node the client called: its server span under the client's, its admission, the hop.
    const aServer = one(trace, "POST /v1/chat/completions", "sluice-a");
    expect(aServer.parentSpanId).toBe(parentId);
    expect(aServer.resource["service.instance.id"]).toMatch(/^node_/);
    expect(one(trace, "sluice.admit", "sluice-a").parentSpanId).toBe(aServer.spanId);
    const hop = one(trace, "sluice.forward", "sluice-a");
    expect(hop.kind).toBe(3);
    expect(hop.parentSpanId).toBe(aServer.spanId);
    expect(hop.attributes["http.response.status_code"]).toBe(200);
    // The node that ran it: under the hop.
    const bServer = one(trace, "POST /v1/chat/completions", "sluice-b");
    expect(bServer.parentSpanId).toBe(hop.spanId);
    expect(bServer.resource["service.instance.id"]).not.toBe(aServer.resource["service.instance.id"]);
    expect(one(trace, "sluice.authenticate", "sluice-b").attributes["sluice.hop"]).toBe(true);
    const gen = one(trace, `chat ${B_MODEL}`, "sluice-b");
    expect(gen.parentSpanId).toBe(bServer.spanId);
    expect(gen.attributes["sluice.request_id"]).toBe(aServer.attributes["sluice.request_id"]);
    expect(one(trace, "sluice.decode", "sluice-b").parentSpanId).toBe(gen.spanId);
    // Neither node ran the other's part: no generation on A, no admission on B.
    expect(trace.filter((s) => s.resource["service.name"] === "sluice-a" && s.name.startsWith("chat "))).toEqual([]);
    expect(trace.filter((s) => s.resource["service.name"] === "sluice-b" && s.name === "sluice.admit")).toEqual([]);
    // The hop spans the other node's whole answer.
    expect(hop.start).toBeLessThanOrEqual(bServer.start + 5);
    expect(hop.end).toBeGreaterThanOrEqual(bServer.start);
  });
});
