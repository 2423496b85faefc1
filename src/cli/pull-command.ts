// `sluice models pull REPO`: a model from the Hugging Face Hub into the models directory. On a
// terminal a progress bar (cli-progress) shows bytes, rate and ETA; otherwise each file gets one
// line, so logs of scripted pulls stay readable. The Hub client and the bar are loaded when the
// command runs: every other command starts without them.
import type { MultiBar, SingleBar } from "cli-progress";
import { formatBytes } from "../format-bytes.ts";
import { commandLine } from "../invocation.ts";
import type { PullEvent } from "../modelkit/hub/pull.ts";
import type { Device, DTypeChoice } from "../modelkit/hub/select.ts";
import { ONNX_DTYPES } from "../onnx-dtypes.ts";
import { positional, UsageError, type Command, type OptionSpec } from "./framework.ts";

const str = (v: string | boolean | undefined) => (typeof v === "string" && v !== "" ? v : undefined);
const seconds = (ms: number) => (ms < 10_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 1000)} s`);
const rate = (bytes: number, ms: number) => (ms > 0 ? `${formatBytes(Math.round((bytes * 1000) / ms))}/s` : "");

/** --device of the commands whose `--dtype auto` depends on the device (pull, import gguf). */
export const AUTO_DEVICE_OPTION: OptionSpec = { name: "device", type: "string", help: "The device --dtype auto chooses for: auto (what serve would use), cuda or cpu", default: "auto" };

/** The device `--dtype auto` chooses for: the one serve would use; a usage error for anything but auto, cuda or cpu. */
export async function deviceFor(flag: string): Promise<Device> {
  if (!["auto", "cuda", "cpu"].includes(flag)) throw new UsageError("--device must be auto, cuda or cpu");
  if (flag === "cuda" || flag === "cpu") return flag;
  const [{ configureNative }, { chooseProviders }] = await Promise.all([import("../packaging/native.ts"), import("../engine/providers.ts")]);
  configureNative({});
  try {
    return chooseProviders("auto").providers[0] === "cuda" ? "cuda" : "cpu";
  } catch {
    return "cpu";
  }
}

interface Reporter {
  event(e: PullEvent): void;
  stop(): void;
}

/** Lines on stdout: what was chosen, then one line per file. */
function lineReporter(out: (line: string) => void): Reporter {
  return {
    event(e) {
      switch (e.type) {
        case "resolved":
          out(`pulling ${e.repo} at ${e.revision} (commit ${e.commit.slice(0, 12)}) as ${e.id}: ${e.note}`);
          out(`${e.files.length} files, ${formatBytes(e.totalBytes)}; ${formatBytes(e.fetchBytes)} to fetch`);
          break;
        case "checking":
          break;
        case "retry":
          out(`  retrying ${e.path} in ${seconds(e.delayMs)} (attempt ${e.attempt}): ${e.reason}`);
          break;
        case "file-done":
          if (e.action === "present") out(`  present  ${e.path} (${formatBytes(e.size)}, hash matches: not fetched)`);
          else {
            const how = e.action === "resume" ? `resumed  ${e.path}: ${formatBytes(e.transferred)} more of ${formatBytes(e.size)}` : `fetched  ${e.path}: ${formatBytes(e.size)}`;
            out(`  ${how} in ${seconds(e.ms)}${e.transferred ? ` (${rate(e.transferred, e.ms)})` : ""}, verified`);
          }
          break;
        case "importing":
          out(e.message);
          break;
        default:
          break;
      }
    },
    stop() {},
  };
}

/** A bar over all bytes of the pull, with the current file, rate and ETA. */
function barReporter(Bars: typeof MultiBar, stream: NodeJS.WriteStream): Reporter {
  const multi = new Bars(
    {
      stream,
      format: " {bar} {percentage}% | {done} of {all} | {speed} | ETA {eta_formatted} | {file}",
      hideCursor: true,
      barsize: 30,
      etaBuffer: 40,
      fps: 8,
    },
    { format: "", barCompleteChar: "█", barIncompleteChar: "░" },
  );
  let bar: SingleBar | null = null;
  let started = 0;
  let startBytes = 0;
  return {
    event(e) {
      if (e.type === "resolved") {
        multi.log(`pulling ${e.repo} at ${e.revision} (commit ${e.commit.slice(0, 12)}) as ${e.id}: ${e.note}\n`);
        multi.log(`${e.files.length} files, ${formatBytes(e.totalBytes)}; ${formatBytes(e.fetchBytes)} to fetch\n`);
        bar = multi.create(e.totalBytes, 0, { done: formatBytes(0), all: formatBytes(e.totalBytes), speed: "", file: "" });
        started = performance.now();
      } else if (e.type === "progress" && bar) {
        if (startBytes === 0 && e.totalDone > 0) startBytes = e.totalDone - e.done;
        const ms = performance.now() - started;
        bar.update(e.totalDone, { done: formatBytes(e.totalDone), speed: rate(e.totalDone - startBytes, ms), file: e.path });
      } else if (e.type === "retry") {
        multi.log(`retrying ${e.path} in ${seconds(e.delayMs)} (attempt ${e.attempt}): ${e.reason}\n`);
      } else if (e.type === "file-done" && e.action === "present") {
        multi.log(`present ${e.path} (hash matches: not fetched)\n`);
      } else if (e.type === "importing") {
        multi.log(`${e.message}\n`);
      }
    },
    stop() {
      multi.stop();
    },
  };
}

export const pullCommand: Command = {
  path: ["models", "pull"],
  usage: "REPO[:QUANT] [--file NAME.gguf] [--revision REV] [--dtype DTYPE] [--id ID] [--models DIR]",
  summary:
    "Fetch a model from the Hugging Face Hub into the models directory: an ONNX export (configs, tokenizer and one dtype's graphs), or weights it converts: a safetensors checkpoint, or one GGUF file (REPO:QUANT as llama-server -hf and Ollama's hf.co/ take it, e.g. Qwen/Qwen3-0.6B-GGUF:Q8_0, or --file; split files included; with neither, Q4_K_M). Resumable, SHA-256 verified, placed only when complete. HF_ENDPOINT chooses the Hub, HF_TOKEN (or huggingface-cli's token file) authenticates.",
  options: [
    { name: "revision", type: "string", help: "Branch, tag or commit", default: "main", argument: true },
    { name: "file", type: "string", help: "A GGUF file of the repo to pull and import (any part of a split one brings them all)", argument: true },
    {
      name: "dtype",
      type: "string",
      help: `auto or one of ${ONNX_DTYPES.join(", ")} (transformers.js's file names: model_q4.onnx …); auto: CUDA fp16, else q4f16; CPU q4, else fp32. A GGUF file converts to fp32, fp16, q4 or q4f16; auto keeps its precision class (4- and 5-bit types: q4)`,
      default: "auto",
      argument: true,
    },
    { name: "id", type: "string", help: "Model id to serve it as (default: the repo name, with -QUANT for a GGUF file)", argument: true },
    { name: "models", type: "string", help: "Models directory (the one serve reads)", default: "./models" },
    { name: "subfolder", type: "string", help: "Folder of the repo holding the model (onnxruntime-genai repos keep one per variant)", argument: true },
    AUTO_DEVICE_OPTION,
    { name: "stall-seconds", type: "string", help: "Cut and resume a transfer that receives nothing for this long", default: "30" },
  ],
  async run(args) {
    const repo = positional(args, 0, "REPO (a Hub model repository, e.g. onnx-community/Qwen3-0.6B-ONNX, or REPO:QUANT for a GGUF file)");
    const stall = Number(args.values["stall-seconds"]);
    if (!Number.isFinite(stall) || stall <= 0) throw new UsageError("--stall-seconds must be a positive number");
    const chosen = await deviceFor(String(args.values.device));
    const [{ hubEndpoint, hubToken }, { PullError }, { pullModel }] = await Promise.all([
      import("../modelkit/hub/auth.ts"),
      import("../modelkit/hub/errors.ts"),
      import("../modelkit/hub/pull.ts"),
    ]);
    const endpoint = hubEndpoint();
    const token = hubToken();
    const tty = process.stderr.isTTY === true;
    const out = (line: string) => console.log(line);
    const reporter = tty ? barReporter((await import("cli-progress")).MultiBar, process.stderr) : lineReporter(out);
    const onSignal = () => {
      reporter.stop();
      console.error("\ninterrupted: the partial download is kept and the next pull resumes it");
      process.exit(130);
    };
    process.once("SIGINT", onSignal);
    try {
      const r = await pullModel({
        repo,
        revision: String(args.values.revision),
        dtype: String(args.values.dtype) as DTypeChoice,
        id: str(args.values.id),
        file: str(args.values.file),
        modelsDir: String(args.values.models),
        subfolder: str(args.values.subfolder),
        endpoint,
        token,
        device: chosen,
        stallMs: stall * 1000,
        onEvent: (e) => reporter.event(e),
      });
      reporter.stop();
      out(`pulled ${r.repo} as ${r.id} into ${r.dir} (${formatBytes(r.transferredBytes)} fetched)`);
      out(`A running server on ${args.values.models} serves it within seconds (it watches the directory); or start one:`);
      out(`  ${commandLine("serve", "--models", String(args.values.models))}`);
      return 0;
    } catch (e) {
      reporter.stop();
      if (e instanceof PullError && e.kind === "usage") throw new UsageError(e.message);
      throw e;
    } finally {
      process.off("SIGINT", onSignal);
    }
  },
};
