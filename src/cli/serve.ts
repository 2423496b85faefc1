import { healthFilePath, writeHealthFile } from "../engine/health-file.ts";
import { createLogger, flushLogs, type LogLevel } from "../log.ts";
import { configureNative } from "../packaging/native.ts";
import type { RunningServer } from "../server.ts";
import { DATA_OPTION, DATABASE_OPTION, databaseOf, seeCommand } from "./commands.ts";
import { UsageError, type Command, type CommandArgs } from "./framework.ts";
import { ENGINE_OPTIONS, ORT_BINDING_OPTION, parseEngineOptions, parseOrtBinding } from "./engine-options.ts";
import { LIMIT_OPTIONS, parseLimitOptions } from "./limit-options.ts";
import { parseResidencyOptions, RESIDENCY_OPTIONS } from "./residency-options.ts";
import { POST_INTERVAL_MS } from "../engine/worker/round-batcher.ts";
import { traceOptionsOf, TRACE_OPTIONS } from "./trace-options.ts";

const LEVELS = ["debug", "info", "warn", "error"];
const str = (v: string | boolean | undefined) => (typeof v === "string" && v !== "" ? v : undefined);

/**
 * What the operator reads once the server is up: where it serves, the first key, and what to run
 * next. Each command stands alone on an indented line, written the way this installation is
 * invoked here, so it can be copied as it is.
 */
async function banner(server: RunningServer, args: CommandArgs, account: string): Promise<string> {
  const served = (await server.store.catalog.listServed()).map((m) => m.id);
  const lines = ["", `Sluice is serving ${served.length ? served.join(", ") : "no models"} at ${server.url}/v1`];
  if (served.length === 0) lines.push("No model could be served; what was found and why it is left out:", `  ${seeCommand(args, "models", "list")}`);
  if (server.firstKey) {
    lines.push(
      `First start: created account '${account}' and this API key (shown once, keep it):`,
      "",
      `  ${server.firstKey}`,
      "",
      "Try it:",
      `  curl ${server.url}/v1/models -H "Authorization: Bearer ${server.firstKey}"`,
    );
  } else {
    lines.push("Create an API key (printed once):", `  ${seeCommand(args, "keys", "create", "--account", account)}`);
  }
  lines.push(`Account workspace: ${server.workspaceUrl}`);
  if (server.cluster) lines.push(`Node ${server.nodeId}, one of ${server.cluster.membership.nodes().length} live on ${server.store.location}`);
  if ((await server.store.users.list()).length === 0) {
    lines.push(
      "No one can sign in yet. Create an operator (EMAIL is yours; it asks for a password):",
      `  ${seeCommand(args, "users", "create", "EMAIL", "--account", account, "--operator", "--password-stdin")}`,
    );
  }
  return lines.join("\n") + "\n";
}

/** The warm-up per model when neither --warmup-ms nor SLUICE_WARMUP_MS says otherwise. */
const DEFAULT_WARMUP_MS = 2000;

export const serveCommand: Command = {
  path: ["serve"],
  usage: "[options]",
  summary: "Start the gateway: the OpenAI-compatible API under /v1, served from the models directory.",
  options: [
    { name: "host", type: "string", help: "Interface to listen on", default: "127.0.0.1" },
    { name: "port", type: "string", help: "TCP port (0: any free port)", default: "8080" },
    DATA_OPTION,
    DATABASE_OPTION,
    { name: "node-url", type: "string", help: "With --database: the URL other nodes reach this one at, e.g. http://10.0.0.5:8080 (default: the address it listens on)" },
    { name: "cluster-secret", type: "string", help: "With --database (required): a secret shared by every node (16 characters or more) that authenticates requests forwarded between them" },
    { name: "heartbeat-seconds", type: "string", help: "With --database: how often this node renews its registration and reads the others'", default: "1" },
    { name: "node-timeout-seconds", type: "string", help: "With --database: a node whose heartbeat is older than this is dead; its models leave the lists", default: "5" },
    { name: "models", type: "string", help: "Models directory", default: "./models" },
    { name: "public-url", type: "string", help: "Public base URL announced by /v1/integrations (without /v1)" },
    { name: "workspace-port", type: "string", help: "Serve the account workspace on this port instead of under /workspace/ of --port (0: any free port)" },
    { name: "workspace-host", type: "string", help: "Interface for --workspace-port (default: --host)" },
    { name: "log-level", type: "string", help: "debug, info, warn or error", default: "info" },
    { name: "log-prompts", type: "boolean", help: "Include prompt text in debug logs (off: never logged)" },
    { name: "no-demo", type: "boolean", help: "Do not generate the demo model when the models directory is empty" },
    { name: "no-watch", type: "boolean", help: "Do not watch the models directory (models added later are served after SIGHUP)" },
    { name: "threads", type: "string", help: "Intra-op threads per model (0: one for models under 16 MiB of weights, else ONNX Runtime's default)", default: "0" },
    { name: "device", type: "string", help: "auto, cuda or cpu", default: "auto" },
    ORT_BINDING_OPTION,
    { name: "kv-budget-mb", type: "string", help: "KV cache memory per model in MiB (0: a quarter of the memory budget, 256 MiB to 8 GiB, at most what 64 sequences at the model's full context use)", default: "0" },
    { name: "max-queue", type: "string", help: "Requests that may wait for KV memory per model before 503 (0: 64; per model: sluice.json's max_queue)", default: "0" },
    { name: "warmup-ms", type: "string", help: "Per model preloaded or loaded by an operator (not on demand: a request waits), run synthetic requests through the decoding code for up to this long so the first requests get full speed (0: none; default SLUICE_WARMUP_MS, else 2000)" },
    { name: "stream-interval-ms", type: "string", help: "A stream's tokens made within this long of the last chunk wait and go out together in one chunk (the first token and the end never wait; 0: a chunk per round of the model)", default: String(POST_INTERVAL_MS) },
    {
      name: "batch-invariant",
      type: "boolean",
      help: "Make each request's greedy and seeded output depend on the request alone: the same tokens alone or among others, with speculation on or off, after preemption, on a prefix-cache hit (GroupQueryAttention models on the CPU; costs speed, see docs/BENCHMARKS.md)",
    },
    { name: "speculate", type: "string", help: "Speculative decoding: ngram (drafts looked up in the prompt and the output, and in the account's earlier answers, verified by the model: with --batch-invariant the output is unchanged, without it an answer can differ where two tokens are nearly tied) or off", default: "ngram" },
    { name: "cuda-lib-dir", type: "string", help: "Directory holding the CUDA provider and CUDA libraries (see docs/GPU.md)" },
    { name: "cache-dir", type: "string", help: "Where the binary unpacks its native libraries (default ~/.cache/sluice)" },
    { name: "allow-image-hosts", type: "string", help: "Comma-separated hosts (name, IP or host:port) whose images may be fetched even on loopback/private/link-local addresses" },
    ...RESIDENCY_OPTIONS,
    ...LIMIT_OPTIONS,
    ...ENGINE_OPTIONS,
    ...TRACE_OPTIONS,
  ],
  async run(args) {
    const port = Number(args.values.port);
    if (!Number.isInteger(port) || port < 0 || port > 65535) throw new UsageError("--port must be 0..65535");
    const level = String(args.values["log-level"]);
    if (!LEVELS.includes(level)) throw new UsageError(`--log-level must be one of ${LEVELS.join(", ")}`);
    const threads = Number(args.values.threads);
    if (!Number.isInteger(threads) || threads < 0) throw new UsageError("--threads must be an integer ≥ 0");
    const speculate = String(args.values.speculate);
    if (speculate !== "ngram" && speculate !== "off") throw new UsageError("--speculate must be ngram or off");
    const device = String(args.values.device);
    if (!["auto", "cuda", "cpu"].includes(device)) throw new UsageError("--device must be auto, cuda or cpu");
    const binding = parseOrtBinding(args);
    configureNative({ cacheDir: str(args.values["cache-dir"]), cudaLibDir: str(args.values["cuda-lib-dir"]) });
    const wsPort = typeof args.values["workspace-port"] === "string" ? Number(args.values["workspace-port"]) : undefined;
    if (wsPort !== undefined && (!Number.isInteger(wsPort) || wsPort < 0 || wsPort > 65535)) throw new UsageError("--workspace-port must be 0..65535");
    const limits = parseLimitOptions(args);
    const residency = parseResidencyOptions(args);
    const engineOptions = parseEngineOptions(args);
    const database = databaseOf(args);
    const secret = str(args.values["cluster-secret"]);
    if (database && !secret) throw new UsageError("--cluster-secret (or SLUICE_CLUSTER_SECRET) is required with --database: it authenticates requests forwarded between nodes");
    if (secret && secret.length < 16) throw new UsageError("--cluster-secret must have at least 16 characters");
    const nodeUrl = str(args.values["node-url"]);
    if (nodeUrl && !/^https?:\/\/[^/\s]+\/?$/.test(nodeUrl)) throw new UsageError("--node-url must be http(s)://host:port, without a path");
    const seconds = (name: string, min: number) => {
      const v = Number(args.values[name]);
      if (!Number.isFinite(v) || v < min) throw new UsageError(`--${name} must be a number ≥ ${min}`);
      return Math.round(v * 1000);
    };
    const heartbeatMs = seconds("heartbeat-seconds", 0.1);
    const timeoutMs = seconds("node-timeout-seconds", 0.5);
    if (timeoutMs <= heartbeatMs) throw new UsageError("--node-timeout-seconds must be longer than --heartbeat-seconds");
    // Loaded here, not at the top: every other command starts without the server's modules.
    const [{ createEngine }, { chooseProviders }, { buildDemoModel }, { configureImagePolicy }, { claimServe, DEFAULT_ACCOUNT, startServer }, { tracingSettings, TracingConfigError }] = await Promise.all([
      import("../engine/index.ts"),
      import("../engine/providers.ts"),
      import("../modelkit/index.ts"),
      import("../vision/policy.ts"),
      import("../server.ts"),
      import("../api/tracing/settings.ts"),
    ]);
    let tracing;
    try {
      tracing = tracingSettings(traceOptionsOf(args));
    } catch (e) {
      if (e instanceof TracingConfigError) throw new UsageError(`tracing: ${e.message}`);
      throw e;
    }
    configureImagePolicy({ allowHosts: (str(args.values["allow-image-hosts"]) ?? "").split(",") });
    const host = String(args.values.host);
    const workspaceHost = typeof args.values["workspace-host"] === "string" ? args.values["workspace-host"] : undefined;
    // Before anything starts or is written: a second server on this port or data directory stops here.
    const dataLock = claimServe({ host, port, dataDir: String(args.values.data), workspaceHost, workspacePort: wsPort });
    const log = createLogger({ level: level as LogLevel, logPrompts: args.values["log-prompts"] === true });
    const count = (name: string) => {
      const v = Number(args.values[name]);
      if (!Number.isInteger(v) || v < 0) throw new UsageError(`--${name} must be an integer ≥ 0`);
      return v;
    };
    const engine = await createEngine({
      log,
      threads,
      device: device as "auto" | "cuda" | "cpu",
      binding,
      batchInvariant: args.values["batch-invariant"] === true,
      kvBudgetBytes: count("kv-budget-mb") * 1024 * 1024,
      maxQueue: count("max-queue"),
      ...residency,
      speculate,
      streamIntervalMs: count("stream-interval-ms"),
      warmupMs: typeof args.values["warmup-ms"] === "string" ? count("warmup-ms") : process.env.SLUICE_WARMUP_MS === undefined ? DEFAULT_WARMUP_MS : undefined,
      ...engineOptions,
      // Where `sluice doctor` finds crash loops (it has no connection to this process).
      onHealthChange: (health) => {
        try {
          writeHealthFile(healthFilePath(String(args.values.data)), health);
        } catch (e) {
          log.warn("could not write the model workers' health file", { error: (e as Error).message });
        }
      },
    });
    const server = await startServer({
      dataLock,
      host,
      port,
      dataDir: String(args.values.data),
      database,
      cluster: database ? { secret: secret!, nodeUrl: nodeUrl?.replace(/\/+$/, ""), heartbeatMs, timeoutMs } : undefined,
      modelsDir: String(args.values.models),
      publicUrl: typeof args.values["public-url"] === "string" ? args.values["public-url"] : undefined,
      demoModel: args.values["no-demo"] !== true,
      limits,
      workspacePort: wsPort,
      workspaceHost,
      buildDemoModel,
      log,
      engine,
      watchModels: args.values["no-watch"] !== true,
      tracing,
      // The admin page's pulls choose `auto` dtypes for the device the models run on.
      hub: { device: device === "cpu" ? "cpu" : chooseProviders(device as "auto" | "cuda").providers[0] === "cuda" ? "cuda" : "cpu" },
    });
    // startServer returns once every model has loaded and both ports listen: only now is the
    // banner true. The log lines before it go out first, so it is the last thing on the screen.
    flushLogs();
    console.log(await banner(server, args, DEFAULT_ACCOUNT));
    let stopping = false;
    const stop = async (signal: string) => {
      if (stopping) return;
      stopping = true;
      log.info("shutting down", { signal });
      await server.stop();
      process.exit(0);
    };
    process.on("SIGINT", () => void stop("SIGINT"));
    process.on("SIGTERM", () => void stop("SIGTERM"));
    return new Promise<number>(() => {});
  },
};
