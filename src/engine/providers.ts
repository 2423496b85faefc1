// Chooses ONNX Runtime execution providers. CUDA is used when its provider library and the CUDA
// libraries it links to can be loaded; otherwise CPU, and the reason is reported once.
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import ortPkg from "onnxruntime-node/package.json" with { type: "json" };
import { CUDA_LIBRARIES, CUDA_PROVIDER, cudaProviderProblem, cudaSearchDirs, PROVIDER_LIBRARIES, probeLibrary, tryDlopen, versionFromFileName, type SearchDir } from "../packaging/cuda.ts";
import { isPackaged, nativeDir } from "../packaging/native.ts";

export type Device = "auto" | "cuda" | "cpu";

export interface LibraryCheck {
  name: string;
  /** What the library is, for messages ("CUDA runtime", "cuDNN" …). */
  role: string;
  found: boolean;
  detail: string;
  /** Where it was loaded from (a path, or the soname the system linker resolved). */
  path?: string;
  version?: string | null;
  /** CUDA is usable without it (a library only some operators use). */
  optional?: boolean;
}

/** The checks CUDA cannot do without that failed. */
export const missingRequired = (checks: LibraryCheck[]) => checks.filter((c) => !c.found && !c.optional);

export interface ProviderChoice {
  providers: ("cuda" | "cpu")[];
  /** Why CUDA is not used, when it is not. */
  cudaUnavailable: string | null;
  checks: LibraryCheck[];
}

/** The directory holding libonnxruntime.so: the binary's unpacked copy, or the npm package's. */
export function onnxRuntimeLibDir(): string {
  const unpacked = nativeDir();
  if (unpacked) return unpacked;
  const require = createRequire(import.meta.url);
  const pkg = dirname(require.resolve("onnxruntime-node/package.json"));
  return join(pkg, "bin", "napi-v6", process.platform, process.arch);
}

/**
 * Each library the CUDA provider needs, in the order a missing one is worth naming. CUDA libraries
 * are tried with dlopen in the search directories, then next to ONNX Runtime, then through the
 * system linker, and those found stay loaded for the provider (see packaging/cuda.ts); provider
 * libraries count only next to ONNX Runtime, where it loads them, and the CUDA provider is read,
 * never loaded, here.
 */
export function checkCudaLibraries(libDir = onnxRuntimeLibDir(), dirs: SearchDir[] = cudaSearchDirs()): LibraryCheck[] {
  const checks: LibraryCheck[] = [];
  for (const lib of CUDA_LIBRARIES) {
    // The driver must be the system's: a copy would not match the kernel module.
    const local = lib.soname === "libcuda.so.1" ? [] : [...dirs.map((d) => join(d.dir, lib.soname)), join(libDir, lib.soname)];
    const p = probeLibrary(lib, [...local, lib.soname]);
    checks.push({ name: lib.soname, role: lib.role, found: p.ok, detail: p.detail, path: p.path, version: p.version, ...(lib.optional ? { optional: true } : {}) });
  }
  for (const lib of PROVIDER_LIBRARIES) {
    const path = join(libDir, lib.soname);
    if (existsSync(path)) {
      // The bridge is loaded to prove it whole; the provider itself must not be (see cudaProviderProblem).
      const error = lib.soname === CUDA_PROVIDER ? cudaProviderProblem(path, ortPkg.version) : tryDlopen(path)?.replace(`${path}: `, "") ?? null;
      checks.push(
        error === null
          ? { name: lib.soname, role: lib.role, found: true, detail: lib.soname === CUDA_PROVIDER ? `usable with ONNX Runtime ${ortPkg.version}` : "loaded", path, version: versionFromFileName(path) }
          : { name: lib.soname, role: lib.role, found: false, detail: `present at ${path} but does not load: ${error}`, path, version: null },
      );
      continue;
    }
    const elsewhere = dirs.map((d) => join(d.dir, lib.soname)).find((p) => existsSync(p));
    const looked = [...dirs.map((d) => d.dir), libDir].join(", ");
    checks.push({
      name: lib.soname,
      role: lib.role,
      found: false,
      detail: elsewhere
        ? `found at ${elsewhere} but not linked next to ONNX Runtime in ${libDir}` +
          (isPackaged() ? " (linking failed, see the log)" : " (the development build does not link: use the binary, or copy it there)")
        : `not found in ${looked}`,
      path,
      version: null,
    });
  }
  return checks;
}

/** One line naming every missing piece, as `--device cuda` refuses and `auto` logs. */
export function describeMissing(checks: LibraryCheck[]): string {
  return `missing ${missingRequired(checks)
    .map((m) => `${m.role} (${m.name}: ${m.detail})`)
    .join("; ")}`;
}

export interface DeviceLine {
  level: "debug" | "info" | "warn";
  msg: string;
  fields?: Record<string, unknown>;
}

/**
 * What a start logs about devices. A machine without an NVIDIA GPU is an ordinary place to run
 * Sluice: one short line says the CPU serves and why, and the list of CUDA libraries it lacks is
 * left to `doctor` (and debug level). Where a GPU is present but cannot be used, the whole
 * explanation is a warning, since the operator most likely meant to use it.
 */
export function deviceLines(device: Device, choice: ProviderChoice, gpuPresent: boolean, doctorCommand: string): DeviceLine[] {
  if (choice.providers[0] === "cuda") return [{ level: "info", msg: `serving on the GPU: CUDA execution provider (--device ${device})` }];
  if (device === "cpu") return [{ level: "info", msg: "serving on the CPU (--device cpu)" }];
  if (!gpuPresent) {
    return [
      { level: "info", msg: `serving on the CPU: no NVIDIA GPU found (--device auto; what CUDA would need: ${doctorCommand})` },
      { level: "debug", msg: "CUDA execution provider unavailable", fields: { reason: choice.cudaUnavailable } },
    ];
  }
  return [
    {
      level: "warn",
      msg: `an NVIDIA GPU is present but the CUDA execution provider is unavailable, so the CPU serves (--device auto); see docs/GPU.md and ${doctorCommand}`,
      fields: { reason: choice.cudaUnavailable },
    },
  ];
}

export function chooseProviders(device: Device, libDir?: string, dirs?: SearchDir[]): ProviderChoice {
  if (device === "cpu") {
    return { providers: ["cpu"], cudaUnavailable: "CPU requested (--device cpu)", checks: [] };
  }
  const checks = checkCudaLibraries(libDir, dirs);
  const missing = missingRequired(checks);
  if (missing.length === 0) return { providers: ["cuda", "cpu"], cudaUnavailable: null, checks };
  const reason = describeMissing(checks);
  if (device === "cuda") {
    throw new Error(`--device cuda: the CUDA execution provider cannot be used: ${reason}. See docs/GPU.md.`);
  }
  return { providers: ["cpu"], cudaUnavailable: reason, checks };
}
