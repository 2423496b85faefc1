// One decode-benchmark runner in a process of its own: Sluice through HTTP (the openai client),
// Sluice's engine in-process, or transformers.js in-process. Each system is then measured as its
// users run it, in a process that does nothing else: sharing one process had the client's
// parsing and the engines' code share a heap and a JIT with transformers.js and ONNX Runtime
// sessions made and dropped every run, which slowed whichever ran there.
//
// The parent (bench/decode.ts, bench/concurrency.ts) starts a RunnerProcess per runner and asks
// it for runs over IPC.
import { AutoModelForCausalLM, env, Tensor } from "@huggingface/transformers";
import OpenAI from "openai";
import { keepOrtTelemetryOff } from "../src/engine/runtime/ort-telemetry.ts";
import type { SpeculateMode } from "../src/engine/types.ts";
import { InProcessEngine, type Measure } from "./in-process-engine.ts";
import { streamChat } from "./stream-chat.ts";

export type RunnerSpec =
  | { kind: "http"; baseURL: string; key: string; model: string; prompt: string; eos: number[]; tokens: number; prompts?: string[]; keys?: string[] }
  | { kind: "engine"; dir: string; id: string; prompt: string; eos: number[]; tokens: number; prompts?: string[]; speculate?: SpeculateMode; oneAccount?: boolean }
  | { kind: "transformers"; root: string; dir: string; promptIds: number[]; threads: number; tokens: number; dtype?: "fp32" | "q4" };

type Request = { op: "init"; spec: RunnerSpec } | { op: "run" } | { op: "generate"; prompts: string[]; maxTokens: number } | { op: "close" };
/** What a batch of concurrent requests made: tokens in all, and the wall time from first to last. */
export interface Generated {
  tokens: number;
  ms: number;
  /** Of ms, the time inside ONNX Runtime's runs. */
  onnxMs: number;
}
type Reply = { ok: true; measure?: Measure; generated?: Generated } | { ok: false; error: string };

/** A runner process, driven from the benchmark. */
export class RunnerProcess {
  private pending: ((reply: Reply) => void) | null = null;
  private readonly proc: ReturnType<typeof Bun.spawn>;

  private constructor() {
    this.proc = Bun.spawn([process.execPath, import.meta.path], {
      ipc: (message) => this.pending?.(message as Reply),
      stdout: "inherit",
      stderr: "inherit",
    });
  }

  static async start(spec: RunnerSpec): Promise<RunnerProcess> {
    const p = new RunnerProcess();
    await p.ask({ op: "init", spec });
    return p;
  }

  /** The child's answer; rejects with its error. */
  private ask(request: Request): Promise<Extract<Reply, { ok: true }>> {
    return new Promise((resolve, reject) => {
      this.pending = (reply) => {
        this.pending = null;
        if (reply.ok) resolve(reply);
        else reject(new Error(reply.error));
      };
      this.proc.send(request);
    });
  }

  /** The runner's process id (its CPU time is in /proc). */
  get pid(): number {
    return this.proc.pid;
  }

  async run(): Promise<Measure> {
    return (await this.ask({ op: "run" })).measure!;
  }

  /** The engine runner only: greedy requests for all the prompts at once (see InProcessEngine.generate). */
  async generate(prompts: string[], maxTokens: number): Promise<Generated> {
    return (await this.ask({ op: "generate", prompts, maxTokens })).generated!;
  }

  async close(): Promise<void> {
    await this.ask({ op: "close" });
    await this.proc.exited;
  }
}

/** One streamed greedy request through the HTTP API: TTFT and decode rate, client-side. */
async function sluiceRun(client: OpenAI, spec: Extract<RunnerSpec, { kind: "http" }>, run: number): Promise<Measure> {
  // With `prompts`, each run takes the next one.
  const prompt = spec.prompts ? spec.prompts[run % spec.prompts.length]! : spec.prompt;
  const r = await streamChat(client, spec.model, prompt, spec.tokens, { logitBias: Object.fromEntries(spec.eos.map((e) => [e, -100])) });
  if (r.tokens !== spec.tokens) throw new Error(`expected ${spec.tokens} tokens, got ${r.tokens}`);
  return { ttftMs: r.ttft, tokPerS: (spec.tokens - 1) / (r.span / 1000) };
}

/** One greedy generate() of transformers.js on a freshly loaded model, as its users call it. */
async function transformersRun(spec: Extract<RunnerSpec, { kind: "transformers" }>): Promise<Measure> {
  const model = await AutoModelForCausalLM.from_pretrained(spec.dir, {
    dtype: spec.dtype ?? "fp32",
    local_files_only: true,
    ...(spec.threads > 0 ? { session_options: { intraOpNumThreads: spec.threads } } : {}),
  });
  const ids = new Tensor("int64", BigInt64Array.from(spec.promptIds, BigInt), [1, spec.promptIds.length]);
  const mask = new Tensor("int64", new BigInt64Array(spec.promptIds.length).fill(1n), [1, spec.promptIds.length]);
  const times: number[] = [];
  const streamer = { put: () => void times.push(performance.now()), end: () => {} };
  const start = performance.now();
  await model.generate({ input_ids: ids, attention_mask: mask, max_new_tokens: spec.tokens, min_new_tokens: spec.tokens, do_sample: false, streamer } as never);
  await model.dispose();
  // The first put() is the prompt itself; each later one is a generated token.
  const gen = times.slice(1);
  return { ttftMs: gen[0]! - start, tokPerS: (gen.length - 1) / ((gen.at(-1)! - gen[0]!) / 1000) };
}

/** The child's side: builds its runner on "init", runs it on each "run". */
async function serve(): Promise<void> {
  let run: (() => Promise<Measure>) | null = null;
  let engine: InProcessEngine | null = null;
  let close: () => Promise<void> = async () => {};
  const reply = (r: Reply) => process.send!(r);
  process.on("message", async (request: Request) => {
    try {
      if (request.op === "init") {
        const spec = request.spec;
        if (spec.kind === "http") {
          // With `keys`, each run takes the next one (a new account per run, say).
          const clients = (spec.keys ?? [spec.key]).map((apiKey) => new OpenAI({ apiKey, baseURL: spec.baseURL, maxRetries: 0 }));
          let runs = 0;
          run = () => sluiceRun(clients[runs % clients.length]!, spec, runs++);
        } else if (spec.kind === "engine") {
          const e = (engine = await InProcessEngine.load(spec.dir, spec.id, { speculate: spec.speculate, oneAccount: spec.oneAccount }));
          let runs = 0;
          // With `prompts`, each run takes the next one (as sluiceRun).
          run = () => e.run(spec.prompts ? spec.prompts[runs++ % spec.prompts.length]! : spec.prompt, spec.eos, spec.tokens);
          close = () => e.close();
        } else {
          env.allowRemoteModels = false;
          env.allowLocalModels = true;
          env.localModelPath = `${spec.root}/`;
          env.useFSCache = false;
          run = () => transformersRun(spec);
        }
        reply({ ok: true });
      } else if (request.op === "run") {
        reply({ ok: true, measure: await run!() });
      } else if (request.op === "generate") {
        const t0 = performance.now();
        const onnx0 = engine!.onnxMs;
        const made = await Promise.all(request.prompts.map((p) => engine!.generate(p, request.maxTokens)));
        reply({ ok: true, generated: { tokens: made.reduce((a, b) => a + b, 0), ms: performance.now() - t0, onnxMs: engine!.onnxMs - onnx0 } });
      } else {
        await close();
        reply({ ok: true });
        process.exit(0);
      }
    } catch (e) {
      reply({ ok: false, error: (e as Error).stack ?? String(e) });
    }
  });
}

if (import.meta.main) {
  // Every runner (transformers.js too) without ONNX Runtime's telemetry, as `sluice serve` runs.
  keepOrtTelemetryOff();
  await serve();
}
