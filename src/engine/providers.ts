// Chooses ONNX Runtime execution providers. CUDA is used when its provider library and the CUDA
// libraries it links to can be loaded; otherwise CPU, and the reason is reported once.
import { dlopen } from "bun:ffi";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

export type Device = "auto" | "cuda" | "cpu";

export interface LibraryCheck {
  name: string;
  /** What the library is, for messages ("CUDA runtime", "cuDNN" …). */
  role: string;
  found: boolean;
  detail: string;
}

export interface ProviderChoice {
  providers: ("cuda" | "cpu")[];
  /** Why CUDA is not used, when it is not. */
  cudaUnavailable: string | null;
  checks: LibraryCheck[];
}

/** The directory holding libonnxruntime.so and the provider libraries. */
export function onnxRuntimeLibDir(): string {
  const require = createRequire(import.meta.url);
  const pkg = dirname(require.resolve("onnxruntime-node/package.json"));
  return join(pkg, "bin", "napi-v6", process.platform, process.arch);
}

function canLoad(lib: string): { ok: boolean; detail: string } {
  try {
    const h = dlopen(lib, {});
    h.close();
    return { ok: true, detail: "loaded" };
  } catch (e) {
    return { ok: false, detail: (e as Error).message.split("\n")[0]!.slice(0, 200) };
  }
}

/** Each library the CUDA provider needs, by dlopen, in the order a missing one is worth naming. */
export function checkCudaLibraries(libDir = onnxRuntimeLibDir()): LibraryCheck[] {
  const checks: LibraryCheck[] = [];
  const sys = (name: string, role: string, candidates: string[]) => {
    let detail = "";
    for (const c of candidates) {
      const r = canLoad(c);
      if (r.ok) {
        checks.push({ name: c, role, found: true, detail: "loaded" });
        return;
      }
      detail = r.detail;
    }
    checks.push({ name, role, found: false, detail });
  };
  sys("libcuda.so.1", "NVIDIA driver", ["libcuda.so.1"]);
  sys("libcudart.so.12", "CUDA runtime", ["libcudart.so.12"]);
  sys("libcublas.so.12", "cuBLAS", ["libcublas.so.12"]);
  sys("libcublasLt.so.12", "cuBLASLt", ["libcublasLt.so.12"]);
  sys("libcudnn.so.9", "cuDNN", ["libcudnn.so.9"]);
  for (const [file, role] of [
    ["libonnxruntime_providers_shared.so", "ONNX Runtime provider bridge"],
    ["libonnxruntime_providers_cuda.so", "ONNX Runtime CUDA provider"],
  ] as const) {
    const path = join(libDir, file);
    checks.push(
      existsSync(path)
        ? { name: path, role, found: true, detail: "present" }
        : { name: path, role, found: false, detail: `not in ${libDir}` },
    );
  }
  return checks;
}

export function chooseProviders(device: Device, libDir?: string): ProviderChoice {
  if (device === "cpu") {
    return { providers: ["cpu"], cudaUnavailable: "CPU requested (--device cpu)", checks: [] };
  }
  const checks = checkCudaLibraries(libDir);
  const missing = checks.filter((c) => !c.found);
  if (missing.length === 0) return { providers: ["cuda", "cpu"], cudaUnavailable: null, checks };
  const reason = `missing ${missing.map((m) => `${m.role} (${m.name})`).join(", ")}`;
  if (device === "cuda") {
    throw new Error(`--device cuda: the CUDA execution provider cannot be used: ${reason}. See docs/GPU.md.`);
  }
  return { providers: ["cpu"], cudaUnavailable: reason, checks };
}
