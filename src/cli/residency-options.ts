// serve's flags for residency and sharing: the memory budget loaded models share, how long an idle
// model stays loaded, which load at start, how long a request waits for memory, and how a busy
// model's queue is shared between accounts (each also read from SLUICE_<NAME>).
import type { CreateEngineOptions } from "../engine/index.ts";
import { parseKeepAlive, parseMemorySize } from "../engine/residency/settings.ts";
import { QUEUE_ORDERS, type QueueOrder } from "../engine/worker/fair-queue.ts";
import { UsageError, type CommandArgs, type OptionSpec } from "./framework.ts";

export const RESIDENCY_OPTIONS: OptionSpec[] = [
  {
    name: "memory-budget",
    type: "string",
    help: "Memory for the weights and KV budgets of all loaded models: MiB, a size (24G, 512M) or a share of the device (80%); auto: 90% of the GPU's memory with CUDA, else 75% of RAM. Models load on demand and idle ones are unloaded to make room",
    default: "auto",
  },
  { name: "keep-alive", type: "string", help: "How long an idle model stays loaded: 30s, 5m, 2h, seconds, 0 (unload at once) or -1 (always); per model: sluice.json's keep_alive, the admin page", default: "5m" },
  { name: "preload", type: "string", help: "Models to load at start, comma-separated ids, or all (the others load on their first request)" },
  { name: "load-wait-seconds", type: "string", help: "How long a request waits for memory to load its model (other models' requests to end) before 503", default: "60" },
  { name: "account-queue-share", type: "string", help: "Share of a model's queue (--max-queue) one account may have waiting; its requests past it get 429", default: "0.75" },
  { name: "scheduling", type: "string", help: "fair: a busy model admits by priority, then account by account by tokens served (preempting where due); fifo: first come, first served", default: "fair" },
];

export function parseResidencyOptions(
  args: CommandArgs,
): Pick<CreateEngineOptions, "memoryBudget" | "keepAliveMs" | "preload" | "loadWaitMs" | "accountQueueShare" | "scheduling"> {
  const str = (name: string) => String(args.values[name] ?? "");
  const budget = str("memory-budget");
  let memoryBudget: CreateEngineOptions["memoryBudget"] = null;
  try {
    if (budget !== "auto") memoryBudget = parseMemorySize(budget);
  } catch (e) {
    throw new UsageError(`--memory-budget: ${(e as Error).message}`);
  }
  let keepAliveMs: number;
  try {
    keepAliveMs = parseKeepAlive(str("keep-alive"));
  } catch (e) {
    throw new UsageError(`--keep-alive: ${(e as Error).message}`);
  }
  const preloadText = str("preload").trim();
  const preload = preloadText === "all" ? ("all" as const) : preloadText.split(",").map((s) => s.trim()).filter(Boolean);
  const wait = Number(str("load-wait-seconds"));
  if (!Number.isFinite(wait) || wait < 0) throw new UsageError("--load-wait-seconds must be a number ≥ 0");
  const share = Number(str("account-queue-share"));
  if (!Number.isFinite(share) || share <= 0 || share > 1) throw new UsageError("--account-queue-share must be a number in (0, 1]");
  const scheduling = str("scheduling") as QueueOrder;
  if (!QUEUE_ORDERS.includes(scheduling)) throw new UsageError(`--scheduling must be ${QUEUE_ORDERS.join(" or ")}`);
  return { memoryBudget, keepAliveMs, preload, loadWaitMs: Math.round(wait * 1000), accountQueueShare: share, scheduling };
}
