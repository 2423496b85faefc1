// What a running server holds in memory, and loading or unloading a model there now. These talk to
// the server through its control listener (see api/control.ts), whose address and token the server
// writes to control.json in its data directory: they act on the server started with that --data.
import { readControlFile, type ControlFile } from "../control-file.ts";
import type { ModelResidency, ResidencySummary } from "../engine/types.ts";
import { describeKeepAlive } from "../engine/residency/settings.ts";
import { formatBytes } from "../format-bytes.ts";
import { DATA_OPTION, JSON_OPTION, print, seeCommand } from "./commands.ts";
import { positional, UsageError, type Command, type CommandArgs } from "./framework.ts";

function controlOf(args: CommandArgs): ControlFile {
  const data = String(args.values.data);
  const control = readControlFile(data);
  if (!control) throw new UsageError(`no server is running with the data directory ${data} (it has no control.json); start one: ${seeCommand(args, "serve")}`);
  return control;
}

async function ask<T>(args: CommandArgs, path: string, body?: unknown): Promise<T> {
  const control = controlOf(args);
  let res: Response;
  try {
    res = await fetch(`${control.url}${path}`, {
      method: body === undefined ? "GET" : "POST",
      headers: { authorization: `Bearer ${control.token}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    throw new Error(`the server that wrote ${String(args.values.data)}/control.json (pid ${control.pid}) does not answer at ${control.url}: is it still running?`);
  }
  const answer = (await res.json()) as T & { error?: { message: string } };
  if (!res.ok) throw new Error(answer.error?.message ?? `the server answered ${res.status}`);
  return answer;
}

const when = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString().replace(/\.\d+Z$/, "Z"));

function row(m: ModelResidency) {
  return {
    model: m.model,
    state: m.state,
    memory: m.state === "unloaded" ? "-" : formatBytes(m.bytes),
    weights: formatBytes(m.weightsBytes),
    kv_budget: formatBytes(m.kvBytes),
    in_flight: m.activeRequests,
    keep_alive: describeKeepAlive(m.keepAliveMs),
    unloads_at: when(m.unloadAt),
    last_load_ms: m.lastLoadMs,
    problem: m.lastError,
  };
}

function line(m: ModelResidency): string {
  if (m.state === "unloaded") return `${m.model} is not loaded`;
  return `${m.model} is ${m.state}: ${formatBytes(m.bytes)} (weights ${formatBytes(m.weightsBytes)}, KV budget ${formatBytes(m.kvBytes)}), stays loaded ${m.keepAliveMs === -1 ? "always" : `${describeKeepAlive(m.keepAliveMs)} once idle`}`;
}

export const residencyCommands: Command[] = [
  {
    path: ["models", "resident"],
    usage: "",
    summary: "What the running server has loaded: each model's state and memory (weights, KV budget), requests in flight and keep-alive, under its memory budget.",
    options: [DATA_OPTION, JSON_OPTION],
    async run(args) {
      const s = await ask<ResidencySummary>(args, "/residency");
      if (args.values.json) {
        console.log(JSON.stringify(s, null, 2));
        return 0;
      }
      console.log(`memory budget ${formatBytes(s.budgetBytes)}, in use ${formatBytes(s.usedBytes)}`);
      print(args, s.models.map(row), ["model", "state", "memory", "weights", "kv_budget", "in_flight", "keep_alive", "unloads_at", "last_load_ms", "problem"]);
      return 0;
    },
  },
  {
    path: ["models", "load"],
    usage: "ID",
    summary: "Load a model in the running server now (unloading idle ones if it needs the room), instead of on its first request.",
    options: [DATA_OPTION, JSON_OPTION],
    async run(args) {
      const m = await ask<ModelResidency>(args, "/residency/load", { model: positional(args, 0, "model ID") });
      console.log(args.values.json ? JSON.stringify(m, null, 2) : `${line(m)}; loaded in ${m.lastLoadMs ?? 0} ms`);
      return 0;
    },
  },
  {
    path: ["models", "unload"],
    usage: "ID",
    summary: "Unload a model from the running server now (refused while requests use it); it loads again on its next request.",
    options: [DATA_OPTION, JSON_OPTION],
    async run(args) {
      const m = await ask<ModelResidency>(args, "/residency/unload", { model: positional(args, 0, "model ID") });
      console.log(args.values.json ? JSON.stringify(m, null, 2) : m.state === "unloaded" ? `unloaded ${m.model}; it loads again on its next request` : line(m));
      return 0;
    },
  },
];
