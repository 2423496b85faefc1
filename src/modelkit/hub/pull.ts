// `sluice models pull`: a model from the Hugging Face Hub into the models directory, fetching
// only what it needs (configs, tokenizer, one dtype's graphs), resumable and verified, placed
// whole or not at all. The Hub API goes through @huggingface/hub (client.ts); the file rules are
// in select.ts, the transfer of one file in transfer.ts, the staging and placement in place.ts.
import { existsSync, mkdirSync, readFileSync, rmdirSync, rmSync, statfsSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { isCanonicalModelId } from "../../model-ids.ts";
import { isOnnxDType, ONNX_DTYPES, type OnnxDType } from "../../onnx-dtypes.ts";
import type { HubToken } from "./auth.ts";
import { HubClient, type RepoFile } from "./client.ts";
import { formatBytes } from "../../format-bytes.ts";
import { hubFailure, PullError } from "./errors.ts";
import { filesBelow, linkOrCopy, lockPull, placeModel, STAGING_FOLDER, stagingDir, stagingKey, targetDir } from "./place.ts";
import { safetensorsImporter } from "./safetensors-hook.ts";
import { parseGGUFQuantLabel } from "@huggingface/gguf";
import { ggufImporter } from "./gguf-hook.ts";
import { ggufQuantOf, hasGguf, hasOnnx, hasSafetensors, safetensorsFiles, selectGenai, selectGguf, selectTransformersJs, type Device, type DTypeChoice, type Selection } from "./select.ts";
import { defaultBackoff, fileMatches, resumableBytes, transferFile } from "./transfer.ts";

export interface PullOptions {
  /** owner/name, or owner/name:QUANT for one GGUF file of a repository (as llama-server -hf takes it). */
  repo: string;
  /** A GGUF file of the repository to pull (and import), e.g. model-Q4_K_M.gguf. */
  file?: string;
  /** Branch, tag or commit; default main. */
  revision?: string;
  dtype?: DTypeChoice;
  /** The model id to serve it as; default the repo name. */
  id?: string;
  modelsDir: string;
  endpoint: string;
  token: HubToken | null;
  /** The device `auto` chooses for. */
  device: Device;
  /** A folder of the repository holding the model (onnxruntime-genai repos keep one per variant). */
  subfolder?: string;
  /** Cut and resume a transfer that receives nothing for this long (default 30 s). */
  stallMs?: number;
  /** Failed attempts in a row before a file is given up (default 5). */
  retries?: number;
  backoffMs?: (attempt: number) => number;
  signal?: AbortSignal;
  onEvent?: (e: PullEvent) => void;
}

export type FileAction = "present" | "fetch" | "resume";

export type PullEvent =
  | { type: "resolved"; repo: string; revision: string; commit: string; id: string; layout: PullLayout; dtype: OnnxDType | null; note: string; files: { path: string; size: number; action: FileAction }[]; totalBytes: number; fetchBytes: number }
  | { type: "checking"; path: string; size: number }
  | { type: "file-start"; path: string; size: number; action: FileAction; from: number }
  | { type: "progress"; path: string; done: number; size: number; totalDone: number; totalBytes: number }
  | { type: "retry"; path: string; attempt: number; delayMs: number; reason: string }
  | { type: "file-done"; path: string; size: number; action: FileAction; transferred: number; ms: number }
  | { type: "importing"; message: string }
  | { type: "placed"; id: string; dir: string };

/** What the pull found: an ONNX export, or weights it converts (safetensors, a GGUF file). */
export type PullLayout = Selection["layout"] | "safetensors" | "gguf";

export interface PullResult {
  id: string;
  dir: string;
  repo: string;
  commit: string;
  layout: PullLayout;
  dtype: OnnxDType | null;
  note: string;
  files: string[];
  totalBytes: number;
  /** Bytes received from the Hub in this run. */
  transferredBytes: number;
}

/** owner/name (or a legacy single name), as the Hub spells repository ids. */
const REPO_ID = /^[A-Za-z0-9][A-Za-z0-9._-]*(\/[A-Za-z0-9][A-Za-z0-9._-]*)?$/;

const DEFAULT_STALL_MS = 30_000;
const DEFAULT_RETRIES = 5;

const joinPath = (folder: string, name: string) => (folder ? `${folder}/${name}` : name);

function readJsonIf(path: string): Record<string, unknown> | null {
  if (!existsSync(path)) return null;
  try {
    const v: unknown = JSON.parse(readFileSync(path, "utf8"));
    return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** `owner/name:QUANT` (one GGUF file of the repository, as llama-server -hf and Ollama's hf.co/ take it). */
export function splitRepoSpec(spec: string): { repo: string; quant: string | undefined } {
  const at = spec.lastIndexOf(":");
  if (at < 0) return { repo: spec, quant: undefined };
  return { repo: spec.slice(0, at), quant: spec.slice(at + 1) };
}

/** The id a pull serves the model as when none is given: the repository, with the GGUF quantisation or file asked for. */
export function defaultPullId(spec: string, file?: string): string {
  const { repo, quant } = splitRepoSpec(spec);
  if (file) return `${repo}-${ggufQuantOf(file, parseGGUFQuantLabel) ?? file.slice(file.lastIndexOf("/") + 1).replace(/(-\d{5}-of-\d{5})?\.gguf$/i, "")}`;
  return quant ? `${repo}-${quant}` : repo;
}

export function validatePullOptions(o: Pick<PullOptions, "repo" | "id" | "dtype" | "subfolder" | "file">): void {
  const { repo, quant } = splitRepoSpec(o.repo);
  if (!REPO_ID.test(repo)) throw new PullError("usage", `${JSON.stringify(repo)} is not a Hub model repository id (owner/name, e.g. onnx-community/Qwen3-0.6B-ONNX, or owner/name:QUANT for a GGUF file)`);
  if (quant !== undefined && !/^[A-Za-z0-9_-]+$/.test(quant)) throw new PullError("usage", `${JSON.stringify(quant)} after the colon is not a GGUF quantisation (like Q4_K_M or Q8_0)`);
  if (quant !== undefined && o.file !== undefined) throw new PullError("usage", "give REPO:QUANT or --file, not both");
  if (o.file !== undefined && (!o.file.endsWith(".gguf") || o.file.startsWith("/") || o.file.split("/").includes(".."))) throw new PullError("usage", `--file must be a .gguf file of the repository, like model-Q4_K_M.gguf`);
  const id = o.id ?? defaultPullId(o.repo, o.file);
  if (!isCanonicalModelId(id)) throw new PullError("usage", `${JSON.stringify(id)} is not a valid model id (segments of letters, digits, '.', '_' and '-', separated by '/')`);
  if (o.dtype !== undefined && o.dtype !== "auto" && !isOnnxDType(o.dtype)) {
    throw new PullError("usage", `--dtype must be auto or one of ${ONNX_DTYPES.join(", ")}`);
  }
  if (o.subfolder !== undefined && (o.subfolder.startsWith("/") || o.subfolder.split("/").some((s) => s === ".." || s === "."))) {
    throw new PullError("usage", `--subfolder must be a folder of the repository, like cpu-int4-rtn-block-32`);
  }
}

/** What the chat template says about tools, for the card's capabilities. */
function templateMentionsTools(dir: string): boolean {
  const texts = [readJsonIf(join(dir, "tokenizer_config.json"))?.chat_template, readJsonIf(join(dir, "chat_template.json"))?.chat_template];
  if (existsSync(join(dir, "chat_template.jinja"))) texts.push(readFileSync(join(dir, "chat_template.jinja"), "utf8"));
  return texts.some((t) => JSON.stringify(t ?? "").includes("tools"));
}

/**
 * sluice.json for the pulled model: the repository's own card if it has one, what the operator
 * set on an earlier pull (name, context, capabilities), then what this pull decides: the id, the
 * dtype the server loads, and where it came from.
 */
function writeCard(staging: string, target: string, o: { id: string; repo: string; commit: string; revision: string; endpoint: string; dtype: OnnxDType | null; vision: boolean; gguf?: string[] }): void {
  const repoCard = readJsonIf(join(staging, "sluice.json")) ?? {};
  const old = readJsonIf(join(target, "sluice.json")) ?? {};
  const kept = Object.fromEntries(["display_name", "context_length", "capabilities", "owned_by"].filter((k) => k in old).map((k) => [k, old[k]]));
  const card: Record<string, unknown> = {
    display_name: o.repo,
    description: `Pulled from the Hugging Face Hub: ${o.repo} at ${o.commit.slice(0, 12)}${o.dtype ? ` (${o.dtype})` : ""}.`,
    capabilities: { tools: templateMentionsTools(staging), structured_output: true, images: o.vision },
    ...repoCard,
    ...kept,
    id: o.id,
    source: { hub: o.endpoint, repo: o.repo, revision: o.revision, commit: o.commit, dtype: o.dtype, ...(o.gguf ? { gguf: o.gguf } : {}), pulled_at: new Date().toISOString() },
  };
  if (o.dtype) card.dtype = o.dtype;
  else delete card.dtype;
  writeFileSync(join(staging, "sluice.json"), `${JSON.stringify(card, null, 2)}\n`);
}

interface Plan {
  layout: PullResult["layout"];
  dtype: OnnxDType | null;
  note: string;
  /** Folder of the repository the model's paths are relative to ("" for the top). */
  top: string;
  /** Paths relative to `top`. */
  files: string[];
}

/** A GGUF file of the repository (anywhere in it: some keep each quantisation in a folder). */
async function planGguf(client: HubClient, want: { quant?: string; file?: string }): Promise<Plan> {
  const files = (await client.list("", true)).filter((e) => e.type === "file").map((e) => e.path);
  const s = selectGguf({ files }, want, parseGGUFQuantLabel);
  return { layout: "gguf", dtype: null, note: s.note, top: "", files: s.files };
}

/** Lists what the model needs: the top folder, onnx/, and any folder genai_config.json points into. */
async function planPull(client: HubClient, o: PullOptions, dtype: DTypeChoice, quant: string | undefined): Promise<Plan> {
  if (quant !== undefined || o.file !== undefined) return planGguf(client, { quant, file: o.file });
  const listed = new Set<string>();
  const files: string[] = [];
  let folders: string[] = [];
  const list = async (top: string, folder: string) => {
    if (listed.has(folder)) return;
    listed.add(folder);
    for (const e of await client.list(folder ? joinPath(top, folder) : top)) {
      const rel = top ? e.path.slice(top.length + 1) : e.path;
      if (e.type === "file") files.push(rel);
      else if (e.type === "directory" && !folder) folders.push(rel);
    }
  };

  let top = o.subfolder ?? "";
  await list(top, "");
  if (!files.some((f) => f === "genai_config.json" || f === "config.json") && !hasOnnx(files) && !o.subfolder && folders.length > 0) {
    // onnxruntime-genai repositories often keep each variant in a folder of its own.
    const configs = (await client.list("", true)).filter((e) => e.type === "file" && e.path.endsWith("/genai_config.json")).map((e) => dirname(e.path));
    if (configs.length > 1) {
      throw new PullError("usage", `${o.repo} holds several onnxruntime-genai exports; choose one with --subfolder: ${configs.join(", ")}`);
    }
    if (configs.length === 1) {
      top = configs[0]!;
      files.length = 0;
      folders = [];
      listed.clear();
      await list(top, "");
    }
  }
  if (folders.includes("onnx")) await list(top, "onnx");

  if (files.includes("genai_config.json")) {
    let config: unknown;
    try {
      config = JSON.parse(await client.text(joinPath(top, "genai_config.json")));
    } catch (e) {
      if (e instanceof PullError) throw e;
      throw new PullError("no_model", `genai_config.json of ${o.repo} is not valid JSON`);
    }
    for (const f of Object.values((config as { model?: Record<string, { filename?: unknown }> }).model ?? {})) {
      const name = typeof f?.filename === "string" ? f.filename : "";
      if (name.includes("/")) await list(top, dirname(name));
    }
    const s = selectGenai({ files }, config, dtype);
    return { layout: s.layout, dtype: s.dtype, note: top ? `${s.note}, from ${top}` : s.note, top, files: s.files };
  }
  if (hasOnnx(files)) {
    const s = selectTransformersJs({ files }, dtype, o.device);
    return { layout: s.layout, dtype: s.dtype, note: s.note, top, files: s.files };
  }
  if (hasSafetensors(files)) return { layout: "safetensors", dtype: null, note: "safetensors checkpoint", top, files: safetensorsFiles({ files }) };
  if (!o.subfolder && (hasGguf(files) || folders.length > 0)) {
    const all = (await client.list("", true)).filter((e) => e.type === "file" && e.path.endsWith(".gguf"));
    if (all.length > 0) return planGguf(client, {});
  }
  throw new PullError(
    "no_model",
    `${o.repo}${top ? `/${top}` : ""} has neither ONNX files, safetensors weights nor GGUF files: Sluice serves ONNX exports (transformers.js's onnx/ layout or onnxruntime-genai's genai_config.json), and converts safetensors checkpoints and GGUF files`,
  );
}

function safetensorsMessage(repo: string): string {
  return (
    `${repo} holds safetensors weights and no ONNX export, and this build converts none (src/modelkit/hub/safetensors-hook.ts); ` +
    `download the checkpoint and convert it with \`sluice models import hf DIR --id ID --out DIR\`, or pull an ONNX export of the same model (onnx-community publishes many).`
  );
}

const IMPORT_DTYPES = { fp32: "fp32", fp16: "fp16", q4: "q4", q4f16: "q4f16" } as const;

/** Pulls a model; resolves with where it was placed, or rejects with a PullError in words. */
export async function pullModel(o: PullOptions): Promise<PullResult> {
  validatePullOptions(o);
  const requested: DTypeChoice = o.dtype ?? "auto";
  const id = o.id ?? defaultPullId(o.repo, o.file);
  const { quant } = splitRepoSpec(o.repo);
  o = { ...o, repo: splitRepoSpec(o.repo).repo };
  const revision = o.revision ?? "main";
  const modelsDir = resolve(o.modelsDir);
  const client = new HubClient({ endpoint: o.endpoint, token: o.token, repo: o.repo, revision, signal: o.signal });

  const { commit, gated } = await client.resolve();
  if (gated && !client.hasToken) throw hubFailure({ status: 401, code: "GatedRepo", message: null }, client.context());
  client.revision = commit;
  const plan = await planPull(client, o, requested, quant);

  // Weights the pull converts (safetensors, GGUF) and the dtype they become; null for ONNX exports.
  let importDtype: (typeof IMPORT_DTYPES)[keyof typeof IMPORT_DTYPES] | "auto" | null = null;
  if (plan.layout === "safetensors") {
    if (!safetensorsImporter) throw new PullError("safetensors_only", safetensorsMessage(o.repo));
    const d = requested === "auto" ? (o.device === "cuda" ? "q4f16" : "q4") : requested;
    importDtype = IMPORT_DTYPES[d as keyof typeof IMPORT_DTYPES] ?? null;
    if (!importDtype) throw new PullError("usage", `a safetensors checkpoint converts to fp32, fp16, q4 or q4f16, not ${d}`);
  } else if (plan.layout === "gguf") {
    // auto: the importer keeps the file's precision class (4-bit types: q4; others: float).
    importDtype = requested === "auto" ? "auto" : (IMPORT_DTYPES[requested as keyof typeof IMPORT_DTYPES] ?? null);
    if (!importDtype) throw new PullError("usage", `a GGUF file converts to fp32, fp16, q4, q4f16 or auto, not ${requested}`);
  }

  const repoFiles = await client.files(plan.files.map((f) => joinPath(plan.top, f)));
  const rel = (f: RepoFile) => (plan.top ? f.path.slice(plan.top.length + 1) : f.path);
  mkdirSync(modelsDir, { recursive: true });
  const target = targetDir(modelsDir, id);
  const unlock = lockPull(modelsDir, id);
  try {
    const staging = stagingDir(modelsDir, id);
    // A safetensors or GGUF pull downloads the weights beside the directory the importer writes.
    const downloads = importDtype ? join(staging, "source") : staging;
    mkdirSync(downloads, { recursive: true });

    // What is already here: finished files of an earlier run, the same files in the model's
    // current directory (a pull again), and partial files to resume.
    const actions = new Map<string, { action: FileAction; from: number }>();
    for (const f of repoFiles) {
      const dest = join(downloads, rel(f));
      mkdirSync(dirname(dest), { recursive: true });
      if (existsSync(dest) || existsSync(join(target, rel(f)))) o.onEvent?.({ type: "checking", path: rel(f), size: f.size });
      if (await fileMatches(dest, f)) actions.set(f.path, { action: "present", from: f.size });
      else if (!importDtype && (await fileMatches(join(target, rel(f)), f))) {
        linkOrCopy(join(target, rel(f)), dest);
        actions.set(f.path, { action: "present", from: f.size });
      } else {
        const from = resumableBytes(dest, f);
        actions.set(f.path, { action: from > 0 ? "resume" : "fetch", from });
      }
    }
    const totalBytes = repoFiles.reduce((n, f) => n + f.size, 0);
    const fetchBytes = repoFiles.reduce((n, f) => n + f.size - actions.get(f.path)!.from, 0);
    const fs = statfsSync(modelsDir);
    const free = Number(fs.bavail) * Number(fs.bsize);
    if (fetchBytes > free) {
      throw new PullError("disk_full", `not enough disk space in ${modelsDir}: the files still to fetch take ${formatBytes(fetchBytes)} and ${formatBytes(free)} is free`);
    }
    o.onEvent?.({
      type: "resolved",
      repo: o.repo,
      revision,
      commit,
      id,
      layout: plan.layout,
      dtype: plan.dtype,
      note: plan.note,
      files: repoFiles.map((f) => ({ path: rel(f), size: f.size, action: actions.get(f.path)!.action })),
      totalBytes,
      fetchBytes,
    });

    let totalDone = 0;
    let transferredBytes = 0;
    for (const f of repoFiles) {
      const { action, from } = actions.get(f.path)!;
      const path = rel(f);
      o.onEvent?.({ type: "file-start", path, size: f.size, action, from });
      const started = performance.now();
      let transferred = 0;
      if (action !== "present") {
        if (f.size === 0) writeFileSync(join(downloads, path), "");
        else {
          const base = totalDone;
          const r = await transferFile(client, f, join(downloads, path), {
            stallMs: o.stallMs ?? DEFAULT_STALL_MS,
            retries: o.retries ?? DEFAULT_RETRIES,
            backoffMs: o.backoffMs ?? defaultBackoff,
            signal: o.signal,
            onProgress: (done) => o.onEvent?.({ type: "progress", path, done, size: f.size, totalDone: base + done, totalBytes }),
            onRetry: (attempt, delayMs, reason) => o.onEvent?.({ type: "retry", path, attempt, delayMs, reason }),
          });
          transferred = r.transferred;
        }
      }
      totalDone += f.size;
      transferredBytes += transferred;
      o.onEvent?.({ type: "progress", path, done: f.size, size: f.size, totalDone, totalBytes });
      o.onEvent?.({ type: "file-done", path, size: f.size, action, transferred, ms: performance.now() - started });
    }

    // Only the plan's files go into the model: leftovers of an earlier run's plan stay out.
    const wanted = new Set(repoFiles.map(rel));
    for (const f of filesBelow(downloads)) if (!wanted.has(f)) rmSync(join(downloads, f), { force: true });

    let placeFrom = staging;
    if (importDtype) {
      placeFrom = join(staging, "model");
      rmSync(placeFrom, { recursive: true, force: true });
      const what = plan.layout === "gguf" ? `the GGUF file ${plan.files[0]}` : "the safetensors checkpoint";
      o.onEvent?.({ type: "importing", message: `converting ${what} to ${importDtype === "auto" ? "ONNX (dtype auto: the file's precision class)" : `${importDtype} ONNX`}` });
      try {
        if (plan.layout === "gguf") await ggufImporter(join(downloads, plan.files[0]!), { id, outDir: placeFrom, dtype: importDtype, device: o.device });
        else await safetensorsImporter!(downloads, { id, outDir: placeFrom, dtype: importDtype as Exclude<typeof importDtype, "auto"> });
      } catch (e) {
        // The download stays for another try; what the importer could not convert is said as it said it.
        throw new PullError("no_model", `${o.repo} holds ${plan.layout === "gguf" ? "a GGUF file" : "a safetensors checkpoint"} that cannot be converted: ${(e as Error).message}`);
      }
    }
    const vision = plan.files.some((f) => /(^|\/)vision_encoder[^/]*\.onnx$/.test(f));
    writeCard(placeFrom, target, { id, repo: o.repo, commit, revision, endpoint: o.endpoint, dtype: plan.dtype, vision, ...(plan.layout === "gguf" ? { gguf: plan.files } : {}) });
    placeModel(placeFrom, target, join(modelsDir, STAGING_FOLDER, stagingKey(id)));
    if (importDtype) rmSync(staging, { recursive: true, force: true });
    o.onEvent?.({ type: "placed", id, dir: target });
    return { id, dir: target, repo: o.repo, commit, layout: plan.layout, dtype: plan.dtype, note: plan.note, files: [...wanted], totalBytes, transferredBytes };
  } finally {
    unlock();
    // The staging folder goes once no pull uses it (rmdir refuses while anything is left).
    try {
      rmdirSync(join(modelsDir, STAGING_FOLDER));
    } catch {}
  }
}
