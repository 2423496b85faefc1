// CUDA discovery without a GPU: fake library directories stand in for an operator's lib/, so the
// fallback (auto) and refusal (cuda) messages can be checked for naming what is missing.
import { afterEach, describe, expect, test } from "bun:test";
import { appendFileSync, copyFileSync, existsSync, lstatSync, mkdirSync, readFileSync, readlinkSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import ortPkg from "onnxruntime-node/package.json" with { type: "json" };
import { checkCudaLibraries, chooseProviders, deviceLines } from "../../src/engine/providers.ts";
import { createLogger } from "../../src/log.ts";
import { cudaSearchDirs, linkCudaLibraries, nvidiaGpuPresent, tryDlopen, versionFromFileName, type SearchDir } from "../../src/packaging/cuda.ts";
import { BUN, REPO, tempDir } from "../helpers/paths.ts";

const LIBM = ["/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6", "/lib64/libm.so.6"].find((p) => existsSync(p));
/**
 * Whether the system's dynamic linker finds this library without any directory of ours (a CUDA
 * runtime installed system-wide, as some development images have): such a one is found, rightly,
 * however empty the test's directories are.
 */
const onSystem = (soname: string) => tryDlopen(soname) === null;
/** Of `wanted` (strings naming a library by its soname), those whose library the system does not have. */
const notOnSystem = (wanted: string[]) => wanted.filter((w) => !/lib[\w.+-]+\.so[.\d]*/.exec(w) || !onSystem(/lib[\w.+-]+\.so[.\d]*/.exec(w)![0]));

const dirs: { remove(): void }[] = [];
function scratch() {
  const d = tempDir("sluice-cuda-");
  dirs.push(d);
  const fake = join(d.path, "fake-lib");
  const native = join(d.path, "native");
  mkdirSync(fake);
  mkdirSync(native);
  return { root: d.path, fake, native, search: [{ dir: fake, from: "test" }] as SearchDir[] };
}
afterEach(() => {
  for (const d of dirs.splice(0)) d.remove();
});

/** Empty files with the right names: present, but the dynamic linker rejects them. */
function fakeLibraries(dir: string, names: string[]) {
  for (const n of names) writeFileSync(join(dir, n), "");
}

const ALL = [
  "libcudart.so.13",
  "libcublasLt.so.13",
  "libcublas.so.13",
  "libcurand.so.10",
  "libcudnn.so.9",
  "libonnxruntime_providers_shared.so",
  "libonnxruntime_providers_cuda.so",
];

describe("CUDA library checks", () => {
  test("nothing anywhere: every piece is named missing, auto falls back to CPU with the reason", () => {
    const s = scratch();
    const checks = checkCudaLibraries(s.native, s.search);
    expect(checks.map((c) => c.role)).toEqual([
      "NVIDIA driver",
      "CUDA runtime",
      "cuBLASLt",
      "cuBLAS",
      "cuRAND",
      "cuDNN",
      "cuFFT (FFT operators only)",
      "ONNX Runtime provider bridge",
      "ONNX Runtime CUDA provider",
    ]);
    expect(checks.filter((c) => c.found).map((c) => c.name)).toEqual(checks.filter((c) => onSystem(c.name)).map((c) => c.name));
    const provider = checks.find((c) => c.name === "libonnxruntime_providers_cuda.so")!;
    expect(provider.detail).toContain(s.fake);
    expect(provider.detail).toContain(s.native);

    const auto = chooseProviders("auto", s.native, s.search);
    expect(auto.providers).toEqual(["cpu"]);
    for (const what of notOnSystem(["NVIDIA driver (libcuda.so.1", "CUDA runtime (libcudart.so.13", "cuBLAS (libcublas.so.13", "cuRAND (libcurand.so.10", "cuDNN (libcudnn.so.9", "ONNX Runtime CUDA provider"])) {
      expect(auto.cudaUnavailable).toContain(what);
    }
    // cuFFT serves the FFT operators only: named by doctor, but its absence does not stop CUDA.
    expect(checks.find((c) => c.name === "libcufft.so.12")).toMatchObject({ found: false, optional: true });
    expect(auto.cudaUnavailable).not.toContain("cuFFT");
  });

  test("--device cuda refuses, naming driver, runtime, cuBLAS, cuDNN and the provider libraries", () => {
    const s = scratch();
    fakeLibraries(s.fake, ALL);
    let message = "";
    try {
      chooseProviders("cuda", s.native, s.search);
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toStartWith("--device cuda: the CUDA execution provider cannot be used");
    if (!onSystem("libcuda.so.1")) expect(message).toContain("NVIDIA driver (libcuda.so.1");
    // Files that are there but do not load are reported with the path and the linker's reason.
    expect(message).toContain(`CUDA runtime (libcudart.so.13: present at ${join(s.fake, "libcudart.so.13")} but does not load`);
    expect(message).toContain("cuBLAS (libcublas.so.13");
    expect(message).toContain("cuDNN (libcudnn.so.9");
    // Provider libraries in a search directory but not beside ONNX Runtime are not usable yet.
    expect(message).toContain(`found at ${join(s.fake, "libonnxruntime_providers_cuda.so")} but not linked`);
    expect(message).toContain("docs/GPU.md");
  });

  test("--device cpu checks nothing", () => {
    const s = scratch();
    const cpu = chooseProviders("cpu", s.native, s.search);
    expect(cpu.providers).toEqual(["cpu"]);
    expect(cpu.checks).toEqual([]);
  });

  test.skipIf(!LIBM)("a loadable provider library beside ONNX Runtime counts as found", () => {
    const s = scratch();
    copyFileSync(LIBM!, join(s.native, "libonnxruntime_providers_shared.so"));
    const bridge = checkCudaLibraries(s.native, s.search).find((c) => c.role === "ONNX Runtime provider bridge")!;
    expect(bridge).toMatchObject({ found: true, detail: "loaded", path: join(s.native, "libonnxruntime_providers_shared.so") });
  });

  test.skipIf(!LIBM)("a loadable library in the operator's directory is found there, with the version of its file name", () => {
    const s = scratch();
    // Any real shared object loads by path; the soname does not have to match for dlopen.
    copyFileSync(LIBM!, join(s.fake, "libcudart.so.13.0.96"));
    symlinkSync("libcudart.so.13.0.96", join(s.fake, "libcudart.so.13"));
    const rt = checkCudaLibraries(s.native, s.search).find((c) => c.role === "CUDA runtime")!;
    expect(rt.found).toBe(true);
    expect(rt.path).toBe(join(s.fake, "libcudart.so.13"));
    expect(rt.version).toBe("13.0.96");
    // Found means loaded, and kept loaded: the provider NEEDs it by soname and has no RUNPATH.
    expect(readFileSync("/proc/self/maps", "utf8")).toContain(join(s.fake, "libcudart.so.13.0.96"));
    const auto = chooseProviders("auto", s.native, s.search);
    expect(auto.cudaUnavailable).not.toContain("CUDA runtime");
    expect(auto.cudaUnavailable).toContain("cuDNN");
  });
});

describe("the CUDA provider is inspected, never loaded", () => {
  // Loading it outside ONNX Runtime runs initialisers that call into the provider bridge and crash
  // the process, so its ELF header and version string are read instead. Any real shared object
  // stands in for it.
  const provider = (s: ReturnType<typeof scratch>) => join(s.native, "libonnxruntime_providers_cuda.so");
  const check = (s: ReturnType<typeof scratch>) => checkCudaLibraries(s.native, s.search).find((c) => c.role === "ONNX Runtime CUDA provider")!;

  test.skipIf(!LIBM)("one from another ONNX Runtime release is refused, naming the version it lacks", () => {
    const s = scratch();
    copyFileSync(LIBM!, provider(s));
    expect(check(s)).toMatchObject({ found: false });
    expect(check(s).detail).toBe(
      `present at ${provider(s)} but does not load: it is not from ONNX Runtime ${ortPkg.version} (it does not carry that version string); the provider must come from the same release as the runtime, see docs/GPU.md`,
    );
  });

  test.skipIf(!LIBM)("one that carries the runtime's version and whose NEEDED libraries load is usable", () => {
    const s = scratch();
    copyFileSync(LIBM!, provider(s));
    appendFileSync(provider(s), Buffer.from(`\0${ortPkg.version}\0`));
    expect(check(s)).toMatchObject({ found: true, path: provider(s), detail: `usable with ONNX Runtime ${ortPkg.version}` });
  });

  test.skipIf(!LIBM)("a NEEDED library that does not load is named", () => {
    const s = scratch();
    // libm NEEDs libc.so.6: renamed in its string table to one that exists nowhere.
    const bytes = readFileSync(LIBM!);
    const at = bytes.indexOf(Buffer.from("\0libc.so.6\0"));
    expect(at).toBeGreaterThan(0);
    bytes.write("libq", at + 1, "latin1");
    writeFileSync(provider(s), Buffer.concat([bytes, Buffer.from(`\0${ortPkg.version}\0`)]));
    expect(check(s).detail).toStartWith(`present at ${provider(s)} but does not load: it needs libq.so.6, which does not load`);
  });
});

describe("what a start logs about devices", () => {
  /** The JSON lines a logger at `level` writes for these device lines. */
  function logged(lines: ReturnType<typeof deviceLines>, level: "info" | "debug" = "info") {
    const out: string[] = [];
    const log = createLogger({ level, write: (l) => out.push(l) });
    for (const l of lines) log[l.level](l.msg, l.fields);
    return out.map((l) => ({ text: l, ...(JSON.parse(l) as { level: string; msg: string; reason?: string }) }));
  }

  test("a CPU machine: one short info line saying the CPU serves and why; the libraries only at debug level", () => {
    const s = scratch();
    const choice = chooseProviders("auto", s.native, s.search);
    const lines = deviceLines("auto", choice, false, "./sluice doctor");
    const info = logged(lines);
    expect(info).toHaveLength(1);
    expect(info[0]!.level).toBe("info");
    expect(info[0]!.msg).toBe("serving on the CPU: no NVIDIA GPU found (--device auto; what CUDA would need: ./sluice doctor)");
    expect(info[0]!.text.length).toBeLessThan(200);
    const debug = logged(lines, "debug");
    expect(debug).toHaveLength(2);
    expect(debug[1]!.reason).toContain("cuDNN (libcudnn.so.9");
    expect(logged(deviceLines("cpu", chooseProviders("cpu"), false, "./sluice doctor"))).toEqual([
      expect.objectContaining({ level: "info", msg: "serving on the CPU (--device cpu)" }),
    ]);
  });

  test("a GPU present but its libraries missing: the whole explanation, as a warning", () => {
    const s = scratch();
    const choice = chooseProviders("auto", s.native, s.search);
    const [line, ...rest] = logged(deviceLines("auto", choice, true, "./sluice doctor"));
    expect(rest).toEqual([]);
    expect(line!.level).toBe("warn");
    expect(line!.msg).toContain("NVIDIA GPU is present");
    expect(line!.msg).toContain("docs/GPU.md");
    for (const what of notOnSystem(["NVIDIA driver (libcuda.so.1", "CUDA runtime (libcudart.so.13", "cuBLAS (libcublas.so.13", "cuDNN (libcudnn.so.9", "ONNX Runtime CUDA provider"])) {
      expect(line!.reason).toContain(what);
    }
  });

  test("an NVIDIA GPU is recognised by its driver's /proc entry or its device nodes", () => {
    const s = scratch();
    const proc = join(s.root, "proc");
    const dev = join(s.root, "dev");
    mkdirSync(proc);
    mkdirSync(dev);
    writeFileSync(join(dev, "nvidiactl"), "");
    expect(nvidiaGpuPresent(proc, dev)).toBe(false);
    writeFileSync(join(dev, "nvidia0"), "");
    expect(nvidiaGpuPresent(proc, dev)).toBe(true);
    mkdirSync(join(proc, "driver", "nvidia"), { recursive: true });
    expect(nvidiaGpuPresent(proc, join(s.root, "absent"))).toBe(true);
  });
});

describe("linking into the native directory", () => {
  test("links the first directory's libraries, never the driver or ONNX Runtime itself, and replaces stale links", () => {
    const s = scratch();
    const second = join(s.root, "second");
    mkdirSync(second);
    fakeLibraries(s.fake, ["libonnxruntime_providers_cuda.so", "libcuda.so.1", "libonnxruntime.so.1", "README.txt"]);
    fakeLibraries(second, ["libonnxruntime_providers_cuda.so", "libcudnn.so.9"]);
    writeFileSync(join(s.native, "libonnxruntime.so.1"), "ours");
    symlinkSync(join(s.root, "gone", "libcublas.so.13"), join(s.native, "libcublas.so.13"));

    const r = linkCudaLibraries(s.native, [...s.search, { dir: second, from: "second" }]);
    expect(r.errors).toEqual([]);
    expect(readlinkSync(join(s.native, "libonnxruntime_providers_cuda.so"))).toBe(join(s.fake, "libonnxruntime_providers_cuda.so"));
    expect(readlinkSync(join(s.native, "libcudnn.so.9"))).toBe(join(second, "libcudnn.so.9"));
    expect(existsSync(join(s.native, "libcuda.so.1"))).toBe(false);
    expect(existsSync(join(s.native, "README.txt"))).toBe(false);
    expect(lstatSync(join(s.native, "libonnxruntime.so.1")).isSymbolicLink()).toBe(false);
    expect(lstatSync(join(s.native, "libcublas.so.13"), { throwIfNoEntry: false })).toBeUndefined();

    // Once linked, the provider library is checked where ONNX Runtime will load it.
    const provider = checkCudaLibraries(s.native, s.search).find((c) => c.role === "ONNX Runtime CUDA provider")!;
    expect(provider.found).toBe(false);
    expect(provider.detail).toBe(`present at ${join(s.native, "libonnxruntime_providers_cuda.so")} but does not load: not a shared library (file too short)`);
  });

  test("search order: the operator's directory, lib/ beside the binary, then the cache", () => {
    const env = { SLUICE_CUDA_LIB_DIR: "/opt/cuda-libs", SLUICE_CACHE_DIR: "/var/cache/sluice" };
    expect(cudaSearchDirs(env, true).map((d) => d.dir)).toEqual(["/opt/cuda-libs", join(process.execPath, "..", "lib"), "/var/cache/sluice/cuda"]);
    // In development the Bun executable's directory is not searched.
    expect(cudaSearchDirs({ SLUICE_CACHE_DIR: "/c" }, false).map((d) => d.dir)).toEqual(["/c/cuda"]);
  });

  test("version from a file name", () => {
    expect(versionFromFileName("/nonexistent/libcudnn.so.9.13.0")).toBe("9.13.0");
    expect(versionFromFileName("/nonexistent/libcudnn.so.9")).toBeNull();
  });
});

describe("the CLI", () => {
  test("serve --device cuda refuses to start and names what is missing; doctor --device cuda exits 1", () => {
    const s = scratch();
    fakeLibraries(s.fake, ALL);
    const env = { ...process.env, SLUICE_CACHE_DIR: join(s.root, "cache") };
    const serve = Bun.spawnSync(
      [BUN, join(REPO, "src/cli/main.ts"), "serve", "--device", "cuda", "--cuda-lib-dir", s.fake, "--port", "0", "--data", join(s.root, "data"), "--models", join(s.root, "models")],
      { cwd: REPO, env, stdout: "pipe", stderr: "pipe" },
    );
    expect(serve.exitCode).toBe(1);
    const err = serve.stderr.toString();
    expect(err).toContain("--device cuda: the CUDA execution provider cannot be used");
    expect(err).toContain("NVIDIA driver");
    expect(err).toContain(join(s.fake, "libcudnn.so.9"));

    const doctor = Bun.spawnSync([BUN, join(REPO, "src/cli/main.ts"), "doctor", "--device", "cuda", "--cuda-lib-dir", s.fake, "--models", join(s.root, "models")], {
      cwd: REPO,
      env,
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(doctor.exitCode).toBe(1);
    const out = doctor.stdout.toString();
    expect(out).toContain(`${s.fake} (--cuda-lib-dir/SLUICE_CUDA_LIB_DIR)`);
    expect(out).toMatch(/missing +cuDNN +libcudnn\.so\.9 +present at \S+ but does not load/);
    expect(out).toContain("execution providers: none, --device cuda refuses to start");
  }, 30_000);
});
