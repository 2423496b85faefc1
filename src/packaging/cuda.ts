// Finding the CUDA execution provider's libraries on an operator's machine. They are not in the
// npm package (too large), so the binary looks where the operator says, then in lib/ beside the
// binary, then in the cache directory, and links what it finds next to the unpacked ONNX Runtime,
// the only directory ONNX Runtime loads provider libraries from.
import { dlopen, FFIType, ptr } from "bun:ffi";
import { existsSync, lstatSync, readdirSync, readlinkSync, realpathSync, symlinkSync, unlinkSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { CUDA_LIB_DIR_ENV, resolveCacheDir } from "./cache-dir.ts";
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
 * holding a name wins). The CUDA provider's RUNPATH is $ORIGIN, so its cuBLAS and cuDNN
 * dependencies are found there too, without LD_LIBRARY_PATH.
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
let libdl: { open(path: string): string | null } | null = null;

function systemDlopen(): { open(path: string): string | null } {
  if (libdl) return libdl;
  const libc = dlopen("libc.so.6", {
    dlopen: { args: [FFIType.cstring, FFIType.i32], returns: FFIType.ptr },
    dlclose: { args: [FFIType.ptr], returns: FFIType.i32 },
    dlerror: { args: [], returns: FFIType.cstring },
  });
  libdl = {
    open(path: string): string | null {
      const handle = libc.symbols.dlopen(ptr(new TextEncoder().encode(`${path}\0`)), RTLD_NOW);
      if (!handle) return String(libc.symbols.dlerror() ?? "dlopen failed");
      libc.symbols.dlclose(handle);
      return null;
    },
  };
  return libdl;
}

/** Loads and unloads a library the way the dynamic linker would for ONNX Runtime; null when it loads, else dlerror's message. */
export function tryDlopen(path: string): string | null {
  return systemDlopen().open(path);
}

const cudaStyle = (v: number | null) => (v === null ? null : `${Math.floor(v / 1000)}.${Math.floor((v % 1000) / 10)}`);

export const CUDA_LIBRARIES: CudaLibrary[] = [
  { soname: "libcuda.so.1", role: "NVIDIA driver", version: (p) => cudaStyle(intOut(p, "cuDriverGetVersion")) },
  { soname: "libcudart.so.12", role: "CUDA runtime", version: (p) => cudaStyle(intOut(p, "cudaRuntimeGetVersion")) },
  { soname: "libcublasLt.so.12", role: "cuBLASLt" },
  { soname: "libcublas.so.12", role: "cuBLAS" },
  // The CUDA provider links these two as well, though most models never call them.
  { soname: "libcufft.so.11", role: "cuFFT" },
  { soname: "libcurand.so.10", role: "cuRAND" },
  {
    soname: "libcudnn.so.9",
    role: "cuDNN",
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

/** Tries each candidate with dlopen; on success reads the version (API first, then the file name). */
export function probeLibrary(lib: CudaLibrary, candidates: string[]): Probe {
  let last: Probe = { ok: false, path: lib.soname, detail: "not found", version: null };
  for (const c of candidates) {
    if (c.includes("/") && !existsSync(c)) continue;
    const error = tryDlopen(c);
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
    return { ok: true, path: c, detail: "loaded", version: version ?? versionFromFileName(c) };
  }
  return last;
}
