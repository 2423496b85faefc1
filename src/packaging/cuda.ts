// Finding the CUDA execution provider's libraries on an operator's machine. They are not in the
// npm package (too large), so the binary looks where the operator says, then in lib/ beside the
// binary, then in the cache directory, and links what it finds next to the unpacked ONNX Runtime,
// the only directory ONNX Runtime loads provider libraries from.
//
// The provider Sluice documents (docs/GPU.md) is ONNX Runtime 1.29.0's, built for CUDA 13. Its
// ELF header NEEDs libcudart.so.13, libcublas.so.13, libcublasLt.so.13, libcurand.so.10 and
// libcuda.so.1, has no RUNPATH, and opens cuDNN (libcudnn.so.9) and cuFFT (libcufft.so.12) itself
// when an operator first needs them. The dynamic linker satisfies a NEEDED soname with a library
// already loaded under that soname, so each CUDA library found is loaded from its path here and
// kept loaded: the provider then resolves without LD_LIBRARY_PATH (onnxruntime's Python package
// preloads the same way, preload_dlls()).
import { dlopen, FFIType, ptr } from "bun:ffi";
import { existsSync, lstatSync, readdirSync, readlinkSync, realpathSync, statSync, symlinkSync, unlinkSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { CUDA_LIB_DIR_ENV, resolveCacheDir } from "./cache-dir.ts";
import { containsCString, readElfDynamic } from "./elf.ts";
import { isPackaged } from "./native.ts";

/**
 * Whether this machine has an NVIDIA GPU whose kernel driver is loaded: the driver creates
 * /proc/driver/nvidia and the /dev/nvidiaN device nodes (containers given a GPU see the latter).
 * Without one, the CUDA libraries being absent is the normal state of a CPU machine, not a fault.
 */
export function nvidiaGpuPresent(procDir = "/proc", devDir = "/dev"): boolean {
  if (existsSync(join(procDir, "driver", "nvidia"))) return true;
  try {
    return readdirSync(devDir).some((n) => /^nvidia\d+$/.test(n));
  } catch {
    return false;
  }
}

export interface SearchDir {
  dir: string;
  /** Which rule put it in the list, for messages ("--cuda-lib-dir/SLUICE_CUDA_LIB_DIR", "beside the binary", "cache"). */
  from: string;
}

/** The directories searched for CUDA and provider libraries, in order of preference. */
export function cudaSearchDirs(env: Record<string, string | undefined> = process.env, packaged = isPackaged()): SearchDir[] {
  const dirs: SearchDir[] = [];
  if (env[CUDA_LIB_DIR_ENV]) dirs.push({ dir: resolve(env[CUDA_LIB_DIR_ENV]!), from: `--cuda-lib-dir/${CUDA_LIB_DIR_ENV}` });
  // In development process.execPath is Bun itself, whose directory is no place for Sluice's libraries.
  if (packaged) dirs.push({ dir: join(dirname(process.execPath), "lib"), from: "lib/ beside the binary" });
  dirs.push({ dir: join(resolveCacheDir(env).dir, "cuda"), from: "cache directory" });
  return dirs;
}

/** Libraries that must never be taken from a search directory: ours, and the driver (only the system's matches the kernel module). */
const NOT_LINKED = /^(libonnxruntime\.so|libcuda\.so)/;
const SHARED_LIBRARY = /^lib.+\.so(\.\d+)*$/;

export interface LinkResult {
  linked: { name: string; target: string }[];
  errors: string[];
}

/**
 * Symlinks every shared library of the search directories into `nativeDir` (the first directory
 * holding a name wins): ONNX Runtime loads the provider libraries only from beside itself, and
 * the checks (checkCudaLibraries) find the CUDA libraries there too.
 */
export function linkCudaLibraries(nativeDir: string, dirs: SearchDir[]): LinkResult {
  const result: LinkResult = { linked: [], errors: [] };
  const taken = new Set<string>();
  for (const { dir } of dirs) {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      continue;
    }
    for (const name of names.sort()) {
      if (!SHARED_LIBRARY.test(name) || NOT_LINKED.test(name) || taken.has(name)) continue;
      taken.add(name);
      const target = join(dir, name);
      const link = join(nativeDir, name);
      try {
        const st = lstatSync(link, { throwIfNoEntry: false });
        if (st?.isSymbolicLink()) {
          if (readlinkSync(link) === target) {
            result.linked.push({ name, target });
            continue;
          }
          unlinkSync(link);
        } else if (st) {
          continue; // a real file we unpacked ourselves
        }
        symlinkSync(target, link);
        result.linked.push({ name, target });
      } catch (e) {
        result.errors.push(`cannot link ${target} into ${nativeDir}: ${(e as Error).message}`);
      }
    }
  }
  // Links left from a search directory that no longer holds the library would dangle.
  try {
    for (const name of readdirSync(nativeDir)) {
      const link = join(nativeDir, name);
      if (lstatSync(link).isSymbolicLink() && !existsSync(link)) unlinkSync(link);
    }
  } catch {
    // best effort: a dangling link only makes a check report the library missing
  }
  return result;
}

export interface CudaLibrary {
  soname: string;
  role: string;
  /** Reads the version through the library's own API once loaded. */
  version?: (path: string) => string | null;
  /** Used by a few operators only: listed, but CUDA is usable without it. */
  optional?: boolean;
  /** Files beside it that it opens by name itself (cuDNN's sub-libraries), kept loaded with it. */
  companions?: RegExp;
}

function intOut(path: string, symbol: string): number | null {
  const lib = dlopen(path, { [symbol]: { args: [FFIType.ptr], returns: FFIType.i32 } });
  try {
    const out = new Int32Array(1);
    const status = (lib.symbols[symbol] as unknown as (p: unknown) => number)(ptr(out));
    return status === 0 ? out[0]! : null;
  } finally {
    lib.close();
  }
}

/**
 * Total memory of CUDA device 0 in bytes, through the driver API (cuInit, cuDeviceGet,
 * cuDeviceTotalMem_v2: no context is created, so nothing is allocated on the device); null when
 * the driver is absent or answers with an error.
 */
export function cudaDeviceMemoryBytes(driver = "libcuda.so.1"): number | null {
  if (tryDlopen(driver) !== null) return null;
  let lib;
  try {
    lib = dlopen(driver, {
      cuInit: { args: [FFIType.u32], returns: FFIType.i32 },
      cuDeviceGet: { args: [FFIType.ptr, FFIType.i32], returns: FFIType.i32 },
      cuDeviceTotalMem_v2: { args: [FFIType.ptr, FFIType.i32], returns: FFIType.i32 },
    });
  } catch {
    return null;
  }
  try {
    if (lib.symbols.cuInit(0) !== 0) return null;
    const dev = new Int32Array(1);
    if (lib.symbols.cuDeviceGet(ptr(dev), 0) !== 0) return null;
    const bytes = new BigUint64Array(1);
    if (lib.symbols.cuDeviceTotalMem_v2(ptr(bytes), dev[0]!) !== 0) return null;
    return Number(bytes[0]);
  } finally {
    lib.close();
  }
}

// The C library's own dlopen, because bun:ffi's refuses a library without naming a symbol, and a
// check must load exactly as ONNX Runtime will: every dependency resolved now (RTLD_NOW).
const RTLD_NOW = 2;
let libdl: { open(path: string, keep: boolean): string | null } | null = null;

function systemDlopen(): { open(path: string, keep: boolean): string | null } {
  if (libdl) return libdl;
  const libc = dlopen("libc.so.6", {
    dlopen: { args: [FFIType.cstring, FFIType.i32], returns: FFIType.ptr },
    dlclose: { args: [FFIType.ptr], returns: FFIType.i32 },
    dlerror: { args: [], returns: FFIType.cstring },
  });
  libdl = {
    open(path: string, keep: boolean): string | null {
      const handle = libc.symbols.dlopen(ptr(new TextEncoder().encode(`${path}\0`)), RTLD_NOW);
      if (!handle) return String(libc.symbols.dlerror() ?? "dlopen failed");
      if (!keep) libc.symbols.dlclose(handle);
      return null;
    },
  };
  return libdl;
}

/** Loads and unloads a library the way the dynamic linker would for ONNX Runtime; null when it loads, else dlerror's message. */
export function tryDlopen(path: string): string | null {
  return systemDlopen().open(path, false);
}

/**
 * Loads a library and keeps it loaded for the life of the process, so that a library loaded later
 * that NEEDs its soname is given this one (see the top of this file); null when it loads.
 */
export function dlopenAndKeep(path: string): string | null {
  return systemDlopen().open(path, true);
}

const cudaStyle = (v: number | null) => (v === null ? null : `${Math.floor(v / 1000)}.${Math.floor((v % 1000) / 10)}`);

/**
 * What the CUDA provider needs, in loading order (a library before those that NEED it): its ELF
 * NEEDED entries (driver, runtime, cuBLASLt, cuBLAS, cuRAND, all CUDA 13), then what it opens by
 * name on first use (cuDNN 9, built for CUDA 13; cuFFT, for the FFT operators only).
 */
export const CUDA_LIBRARIES: CudaLibrary[] = [
  { soname: "libcuda.so.1", role: "NVIDIA driver", version: (p) => cudaStyle(intOut(p, "cuDriverGetVersion")) },
  { soname: "libcudart.so.13", role: "CUDA runtime", version: (p) => cudaStyle(intOut(p, "cudaRuntimeGetVersion")) },
  { soname: "libcublasLt.so.13", role: "cuBLASLt" },
  { soname: "libcublas.so.13", role: "cuBLAS" },
  // Linked by the provider, though most models never call it.
  { soname: "libcurand.so.10", role: "cuRAND" },
  {
    soname: "libcudnn.so.9",
    role: "cuDNN",
    // cuDNN 9's libcudnn.so.9 opens its engines (libcudnn_graph.so.9, libcudnn_ops.so.9 …) by name.
    companions: /^libcudnn_[a-z_]+\.so\.9$/,
    version: (p) => {
      const lib = dlopen(p, { cudnnGetVersion: { args: [], returns: FFIType.u64 } });
      try {
        const v = Number(lib.symbols.cudnnGetVersion());
        return `${Math.floor(v / 10000)}.${Math.floor((v % 10000) / 100)}.${v % 100}`;
      } finally {
        lib.close();
      }
    },
  },
  { soname: "libcufft.so.12", role: "cuFFT (FFT operators only)", optional: true },
];

export const PROVIDER_LIBRARIES = [
  { soname: "libonnxruntime_providers_shared.so", role: "ONNX Runtime provider bridge" },
  { soname: "libonnxruntime_providers_cuda.so", role: "ONNX Runtime CUDA provider" },
] as const;

/** The version a file name carries past its soname (libcudart.so.12.4.127 → 12.4.127). */
export function versionFromFileName(path: string): string | null {
  let real = path;
  try {
    real = realpathSync(path);
  } catch {
    // keep the given name
  }
  const m = /\.so\.(\d+(?:\.\d+)+)$/.exec(basename(real));
  return m ? m[1]! : null;
}

export interface Probe {
  ok: boolean;
  /** The path or soname that loaded, or the last one tried. */
  path: string;
  detail: string;
  version: string | null;
}

/**
 * Tries each candidate with dlopen and keeps the first that loads loaded (with its companions);
 * on success reads the version (API first, then the file name).
 */
export function probeLibrary(lib: CudaLibrary, candidates: string[]): Probe {
  let last: Probe = { ok: false, path: lib.soname, detail: "not found", version: null };
  for (const c of candidates) {
    if (c.includes("/") && !existsSync(c)) continue;
    const error = dlopenAndKeep(c);
    if (error !== null) {
      // dlerror starts with the name it was given; the check already names it.
      const msg = error.split("\n")[0]!.replace(`${c}: `, "").slice(0, 300);
      // A file that exists but does not load (wrong architecture, missing dependency) is worth naming.
      last = { ok: false, path: c, detail: c.includes("/") ? `present at ${c} but does not load: ${msg}` : msg, version: null };
      if (c.includes("/")) return last;
      continue;
    }
    let version: string | null = null;
    try {
      version = lib.version?.(c) ?? null;
    } catch {
      version = null;
    }
    const companions = lib.companions && c.includes("/") ? keepCompanions(dirname(c), lib.companions) : [];
    const detail = companions.length ? `loaded; not loaded beside it: ${companions.join("; ")}` : "loaded";
    return { ok: true, path: c, detail, version: version ?? versionFromFileName(c) };
  }
  return last;
}

/**
 * Loads the files of `dir` matching `pattern` and keeps them loaded; they may need one another, so
 * those that fail are tried again while others still load. Returns what never loaded, with why.
 */
function keepCompanions(dir: string, pattern: RegExp): string[] {
  let pending: string[];
  try {
    pending = readdirSync(dir).filter((n) => pattern.test(n)).sort();
  } catch {
    return [];
  }
  const errors = new Map<string, string>();
  for (let progress = true; progress && pending.length; ) {
    progress = false;
    for (const name of [...pending]) {
      const error = dlopenAndKeep(join(dir, name));
      if (error === null) {
        pending = pending.filter((n) => n !== name);
        errors.delete(name);
        progress = true;
      } else errors.set(name, error.split("\n")[0]!.replace(`${join(dir, name)}: `, "").slice(0, 200));
    }
  }
  return [...errors].map(([name, error]) => `${name} (${error})`);
}

export const CUDA_PROVIDER = "libonnxruntime_providers_cuda.so";

/** Results of inspecting a provider file, by path, size and modification time: reading it for its version costs a pass over 229 MB. */
const inspected = new Map<string, string | null>();

/**
 * Why the CUDA provider at `path` cannot be used under ONNX Runtime `runtimeVersion`, or null when
 * it can, as far as can be told without loading it. It is never loaded here: its initialisers
 * call into ONNX Runtime's provider bridge and crash the process unless ONNX Runtime itself loads
 * it. So its ELF header is read instead: the architecture, and each library it NEEDs must load (a
 * CUDA 12 build names libcudart.so.12). And it must come from the same ONNX Runtime release:
 * nothing checks that when it loads (the bridge between them is a C++ interface handed over by
 * pointer), so its embedded version string (every CUDA provider carries ONNX Runtime's version
 * for its tuning results) must be the runtime's.
 */
export function cudaProviderProblem(path: string, runtimeVersion: string): string | null {
  let key: string;
  try {
    const st = statSync(path);
    key = `${path}\0${st.size}\0${st.mtimeMs}\0${runtimeVersion}`;
  } catch (e) {
    return (e as Error).message;
  }
  if (!inspected.has(key)) inspected.set(key, inspectProvider(path, runtimeVersion));
  return inspected.get(key)!;
}

function inspectProvider(path: string, runtimeVersion: string): string | null {
  let needed: string[];
  try {
    needed = readElfDynamic(path).needed;
  } catch (e) {
    return (e as Error).message;
  }
  // Loaded and kept by the checks before this one when they are found; the C library's by soname.
  const missing = needed.filter((soname) => dlopenAndKeep(soname) !== null);
  if (missing.length) {
    const cuda12 = missing.some((n) => /^libcu(dart|blas|blasLt)\.so\.12$/.test(n));
    return `it needs ${missing.join(", ")}, which ${missing.length === 1 ? "does" : "do"} not load${cuda12 ? " (a provider built for CUDA 12: Sluice's ONNX Runtime needs the CUDA 13 build, see docs/GPU.md)" : ""}`;
  }
  if (!containsCString(path, runtimeVersion)) {
    return `it is not from ONNX Runtime ${runtimeVersion} (it does not carry that version string); the provider must come from the same release as the runtime, see docs/GPU.md`;
  }
  return null;
}
