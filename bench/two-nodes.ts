// The two-node figure of bench/load.ts: /v1/models and streaming-chat throughput of one node
// against two nodes on one PostgreSQL, side by side in one run (and chats forwarded by a node
// that does not serve the model). Each node is a `sluice serve` process of its own; wrk and the
// chat clients split evenly over the nodes measured.
import OpenAI from "openai";
import type { SyntheticSpec } from "../src/modelkit/index.ts";
import { startCluster, type ClusterNode } from "../test/helpers/cluster.ts";
import { postgresMissing } from "../test/helpers/postgres.ts";
import { median, percentile, table } from "./report.ts";
import { streamChat } from "./stream-chat.ts";

const MODEL = "bench/tiny";
const OTHER = "bench/other";
const WRK_CONNECTIONS = 32;
const CHAT_CLIENTS = 8;

export interface WrkRun {
  requests: number;
  errors: number;
}

interface Figure {
  label: string;
  modelsRps: number | null;
  modelsErrors: number;
  chatRps: number;
  chatTokensPerS: number;
  chatP50: number;
  chatP99: number;
  chatErrors: number;
}

/** Streaming chats from `clients` loops spread over the nodes for `seconds`. */
async function chats(nodes: ClusterNode[], key: string, seconds: number, clients: number) {
  const until = performance.now() + seconds * 1000;
  const latency: number[] = [];
  let tokens = 0;
  let errors = 0;
  await Promise.all(
    Array.from({ length: clients }, async (_, c) => {
      const client = new OpenAI({ apiKey: key, baseURL: `${nodes[c % nodes.length]!.url}/v1`, maxRetries: 0 });
      for (let i = 0; performance.now() < until; i++) {
        const t0 = performance.now();
        try {
          const r = await streamChat(client, MODEL, `client ${c} request ${i}`, 16);
          latency.push(performance.now() - t0);
          tokens += r.tokens;
        } catch {
          errors++;
        }
      }
    }),
  );
  return { rps: latency.length / seconds, tokensPerS: tokens / seconds, p50: median(latency), p99: percentile(latency, 99), errors };
}

export async function twoNodeFigure(opts: {
  seconds: number;
  wrk: (url: string, seconds: number, connections: number, headers: Record<string, string>) => Promise<WrkRun>;
}): Promise<string | null> {
  if (postgresMissing) {
    console.log(`two-node figure skipped: ${postgresMissing}`);
    return null;
  }
  const spec = (id: string, seed: number): SyntheticSpec => ({ preset: "tiny-bytes", seed, id });
  const cluster = await startCluster([{ models: { "bench-two-tiny": spec(MODEL, 3) }, args: ["--log-level", "error"] }]);
  const figures: Figure[] = [];
  try {
    const auth = { authorization: `Bearer ${cluster.key}` };
    const measure = async (label: string, nodes: ClusterNode[], chatNodes = nodes, models = true) => {
      // /v1/models: the same connections in total, split over the nodes, all at once.
      let modelsRps: number | null = null;
      let modelsErrors = 0;
      if (models) {
        for (const n of nodes) await opts.wrk(`${n.url}/v1/models`, 1, 8, auth); // warm
        const runs = await Promise.all(nodes.map((n) => opts.wrk(`${n.url}/v1/models`, opts.seconds, WRK_CONNECTIONS / nodes.length, auth)));
        modelsRps = runs.reduce((s, r) => s + r.requests, 0) / opts.seconds;
        modelsErrors = runs.reduce((s, r) => s + r.errors, 0);
      }
      await chats(chatNodes, cluster.key, 1, CHAT_CLIENTS); // warm
      const c = await chats(chatNodes, cluster.key, opts.seconds, CHAT_CLIENTS);
      figures.push({ label, modelsRps, modelsErrors, chatRps: c.rps, chatTokensPerS: c.tokensPerS, chatP50: c.p50, chatP99: c.p99, chatErrors: c.errors });
      console.log(`${label}: /v1/models ${modelsRps?.toFixed(0) ?? "-"}/s, chat ${c.rps.toFixed(1)}/s (${c.tokensPerS.toFixed(0)} tokens/s)`);
    };
    const [a] = cluster.nodes as [ClusterNode];
    await measure("one node", [a]);
    const b = await cluster.startNode({ models: { "bench-two-tiny": spec(MODEL, 3) }, args: ["--log-level", "error"] });
    await measure("two nodes, both serving the model", [a, b]);
    // A third node without the model: every chat sent to it is forwarded to A or B.
    const c = await cluster.startNode({ models: { "bench-two-other": spec(OTHER, 4) }, args: ["--log-level", "error"] });
    await measure("chats sent to a third node, forwarded to the two", [a, b], [c], false);
  } finally {
    await cluster.stop();
  }
  const one = figures[0]!;
  const two = figures[1]!;
  return [
    `**Two nodes against one** on one PostgreSQL (Debian's, in a temp dir, durability off), every node its own \`sluice serve\` process with the tiny synthetic byte-level model, one intra-op thread; ${opts.seconds} s per figure, same run. /v1/models: wrk with ${WRK_CONNECTIONS} connections in total, split evenly over the nodes measured, all at once; chat: ${CHAT_CLIENTS} clients streaming max_tokens 16 through the openai client, spread over the nodes. Two nodes give **${(two.modelsRps! / one.modelsRps!).toFixed(2)}×** the /v1/models throughput and **${(two.chatRps / one.chatRps).toFixed(2)}×** the chat throughput of one. On this two-core machine the nodes, wrk, the clients and PostgreSQL share the same cores, so this shows the cluster's own cost more than the gain a second machine would bring.`,
    "",
    table(
      ["configuration", "/v1/models req/s", "chat req/s", "chat tokens/s", "chat p50 / p99 ms", "errors"],
      figures.map((f) => [
        f.label,
        f.modelsRps === null ? "-" : f.modelsRps.toFixed(0),
        f.chatRps.toFixed(1),
        f.chatTokensPerS.toFixed(0),
        `${f.chatP50.toFixed(1)} / ${f.chatP99.toFixed(1)}`,
        f.modelsErrors + f.chatErrors,
      ]),
    ),
  ].join("\n");
}
