// `sluice doctor`: what this machine gives Sluice — version, platform, native libraries,
// execution providers and why not, CUDA libraries, directories, models.
import { accessSync, constants, existsSync, mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import ortPkg from "onnxruntime-node/package.json" with { type: "json" };
import { discoverModelDirs } from "../engine/discovery.ts";
import { describeSamplingDefaults } from "../protocol/sampling.ts";
import { healthFilePath, readHealthFile, writerAlive } from "../engine/health-file.ts";
import type { WorkerHealth } from "../engine/types.ts";
import { checkCudaLibraries, chooseProviders, missingRequired, onnxRuntimeLibDir, type Device } from "../engine/providers.ts";
import { probeCApi } from "../engine/capi/probe.ts";
import type { OrtBinding } from "../engine/ort-binding.ts";
import { describeOrtTelemetry, keepOrtTelemetryOff } from "../engine/runtime/ort-telemetry.ts";
import { VERSION } from "../version.ts";
import { resolveCacheDir } from "../packaging/cache-dir.ts";
import { cudaSearchDirs, linkCudaLibraries, nvidiaGpuPresent } from "../packaging/cuda.ts";
import { embeddedManifest, isPackaged, nativeDir } from "../packaging/native.ts";
import { verifyUnpacked } from "../packaging/unpack.ts";

export interface DoctorOptions {
  dataDir: string;
  modelsDir: string;
  device: Device;
  /** The binding serve would be given (CUDA always takes the C API). */
  binding: OrtBinding;
}

function writable(dir: string): string {
  try {
    mkdirSync(dir, { recursive: true });
    accessSync(dir, constants.W_OK);
    return "writable";
  } catch (e) {
    return `NOT writable (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`;
  }
}

const at = (ms: number | null) => (ms === null ? "?" : new Date(ms).toISOString());

function describeWorker(w: WorkerHealth): string {
  const history = w.crashes > 0 ? `${w.crashes} crash${w.crashes === 1 ? "" : "es"}, ${w.restarts} restart${w.restarts === 1 ? "" : "s"}; last crash at ${at(w.lastCrashAt)}: ${w.lastError}` : "no crashes";
  switch (w.state) {
    case "unavailable":
      return `UNAVAILABLE (crash loop; requests get 503) until ${at(w.retryAt)}; ${history}`;
    case "restarting":
      return `restarting after a crash; ${history}`;
    case "loading":
      return "loading";
    case "ready":
      return `ready; ${history}`;
  }
}

/**
 * The report as lines; the exit status is non-zero when the chosen device cannot be used, or when
 * a running server reports a model unavailable after a crash loop.
 */
export function doctorReport(opts: DoctorOptions): { lines: string[]; ok: boolean } {
  const out: string[] = [];
  let ok = true;
  out.push(`sluice ${VERSION}`);
  out.push(`platform: ${process.platform}-${process.arch}, runtime bun ${Bun.version}${isPackaged() ? " (embedded in this binary)" : " (development)"}`);
  out.push(`onnx runtime: ${ortPkg.version} (onnxruntime-node)`);

  const cache = resolveCacheDir(process.env);
  out.push(`cache directory: ${cache.dir} (from ${cache.from}; ${writable(cache.dir)})`);

  let libDir: string | null = null;
  if (isPackaged()) {
    try {
      libDir = nativeDir()!;
      const manifest = embeddedManifest()!;
      const verified = verifyUnpacked(libDir, manifest);
      out.push(`native libraries: ${libDir}`);
      for (const v of verified) out.push(`  ${v.ok ? "ok     " : "BROKEN "} ${v.name.padEnd(28)} ${v.detail}`);
      if (verified.some((v) => !v.ok)) ok = false;
    } catch (e) {
      out.push(`native libraries: cannot be unpacked: ${(e as Error).message}`);
      ok = false;
    }
  } else {
    libDir = onnxRuntimeLibDir();
    out.push(`native libraries: ${libDir} (npm package; the binary unpacks its own copy)`);
  }

  out.push(`nvidia gpu: ${nvidiaGpuPresent() ? "present (driver loaded)" : "none found (no /proc/driver/nvidia, no /dev/nvidiaN)"}`);
  const dirs = cudaSearchDirs();
  out.push("cuda search directories (in order):");
  for (const d of dirs) out.push(`  ${d.dir} (${d.from}${existsSync(d.dir) ? "" : ", absent"})`);
  if (libDir && isPackaged()) {
    const linked = linkCudaLibraries(libDir, dirs);
    for (const error of linked.errors) out.push(`  link failed: ${error}`);
  }

  const checks = libDir ? checkCudaLibraries(libDir, dirs) : [];
  out.push("cuda libraries (by dlopen; the CUDA provider by its ELF header, see docs/GPU.md):");
  for (const c of checks) {
    const where = c.found ? `${c.path}${c.version ? `, version ${c.version}` : ""}` : `${c.detail}${c.optional ? " (optional)" : ""}`;
    out.push(`  ${c.found ? "found  " : "missing"} ${c.role.padEnd(30)} ${c.name.padEnd(36)} ${where}`);
  }
  const cudaOk = checks.length > 0 && missingRequired(checks).length === 0;
  let providers: string[] = ["cpu"];
  let refused: string | null = null;
  try {
    providers = libDir ? chooseProviders(opts.device, libDir, dirs).providers : ["cpu"];
  } catch (e) {
    refused = (e as Error).message;
    ok = false;
  }
  out.push(`execution providers: ${refused ? `none, --device ${opts.device} refuses to start` : `${providers.join(", ")} (--device ${opts.device})`}`);
  out.push(`  cpu: available`);
  const missing = missingRequired(checks).map((c) => c.name);
  // The table above says why each one is missing.
  out.push(`  cuda: ${cudaOk ? "available" : `unavailable: ${checks.length ? `missing ${missing.join(", ")}` : "native libraries missing"}`}`);
  if (refused) out.push(`  ${refused}`);
  out.push(`onnx runtime telemetry: ${describeOrtTelemetry(keepOrtTelemetryOff())}`);
  const binding = providers[0] === "cuda" ? "capi" : opts.binding;
  out.push(`onnx runtime binding: ${describeBinding(binding, opts.binding, providers[0]!)}`);
  if (libDir) {
    const capi = probeCApi(libDir);
    out.push(`  C API: ${capi.ok ? `ONNX Runtime ${capi.version} (${capi.path})` : `unavailable: ${capi.error}`}`);
    if (!capi.ok && binding === "capi") ok = false;
  }

  const data = resolve(opts.dataDir);
  out.push(`data directory: ${data} (${existsSync(join(data, "sluice.db")) ? "database present" : "no database yet"})`);
  const health = readHealthFile(healthFilePath(data));
  if (health) {
    const live = writerAlive(health);
    const reported = `as serve, pid ${health.pid}${live ? "" : ", which no longer runs,"} reported them at ${new Date(health.updatedAt).toISOString()}`;
    if (health.models.length === 0) out.push(`model workers: none (no model loaded; ${reported})`);
    else out.push(`model workers (${reported}):`);
    for (const w of health.models) out.push(`  ${w.model}: ${describeWorker(w)}`);
    if (live && health.models.some((w) => w.state === "unavailable")) ok = false;
  }
  const models = resolve(opts.modelsDir);
  const found = existsSync(models) ? discoverModelDirs(models) : [];
  out.push(`models directory: ${models} (${existsSync(models) ? `${found.length} model${found.length === 1 ? "" : "s"}` : "absent"})`);
  for (const m of found) {
    const sampling = describeSamplingDefaults(m.samplingDefaults);
    out.push(`  ${m.id}: ${m.problem ? `not servable: ${m.problem}` : `would run on ${providers[0]} through ${binding === "capi" ? "the C API (capi)" : "onnxruntime-node (node)"}${sampling ? `, sampling by default: ${sampling}` : ""}`} (${m.dir})`);
  }
  if (found.length === 0) out.push("  (none: serve generates the demo model sluice/demo, random weights)");
  return { lines: out, ok };
}

/** Which binding runs the models, and why when it is not the one asked for. */
function describeBinding(binding: OrtBinding, asked: OrtBinding, provider: string): string {
  const what = binding === "capi" ? "capi (ONNX Runtime's C API: the KV cache stays in the execution provider's memory)" : "node (onnxruntime-node's JavaScript binding: every run is handed its KV cache from host memory)";
  return binding === asked ? `${what} (--ort-binding ${asked})` : `${what}: ${provider} always runs through the C API (--ort-binding ${asked} applies to the CPU)`;
}
