// `make build`: compiles the CLI and the model worker into one executable (dist/sluice) with
// ONNX Runtime's library and addon and the tokenizers addon embedded as files.
//
// Two package loaders are substituted at bundle time, because both locate their addon relative
// to node_modules, which the binary does not have:
//  - onnxruntime-node/dist/binding.js requires ../bin/napi-v6/<platform>/<arch>/onnxruntime_binding.node;
//    Bun would embed the addon but not libonnxruntime.so.1 it links to (RUNPATH $ORIGIN).
//  - tokenizers/index.js tries a dozen per-platform addons, which would all be embedded.
// Both now load the file unpacked by src/packaging/native.ts.
import { statSync, writeFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import type { BunPlugin } from "bun";
import { LIBVIPS, NATIVE_FILES, ORT_BINDING, SHARP_BINDING, TOKENIZERS_BINDING, type NativeManifestEntry } from "./native-files.ts";
import { sha256Hex } from "./unpack.ts";

const ROOT = resolve(import.meta.dir, "../..");
const NATIVE_TS = join(ROOT, "src/packaging/native.ts");
const ORT_LOADER = "require(`../bin/napi-v6/${process.platform}/${process.arch}/onnxruntime_binding.node`)";

export interface BuildOptions {
  outfile: string;
  target: "linux-x64";
}

async function manifestModule(target: string): Promise<{ source: string; manifest: { id: string; files: Omit<NativeManifestEntry, "embedded">[] } }> {
  const specs = NATIVE_FILES[target];
  if (!specs) throw new Error(`no native file table for ${target}`);
  const files: Omit<NativeManifestEntry, "embedded">[] = [];
  for (const s of specs) {
    const bytes = await Bun.file(join(ROOT, s.source)).bytes();
    files.push({ name: s.name, sha256: sha256Hex(bytes), size: bytes.length });
  }
  const id = sha256Hex(new TextEncoder().encode(JSON.stringify(files)));
  const imports = specs.map((s, i) => `import f${i} from ${JSON.stringify(join(ROOT, s.source))} with { type: "file" };`);
  const entries = files.map((f, i) => `{ ...${JSON.stringify(f)}, embedded: f${i} }`);
  return {
    source: `${imports.join("\n")}\nexport default { id: ${JSON.stringify(id)}, files: [${entries.join(", ")}] };\n`,
    manifest: { id, files },
  };
}

function nativePlugin(manifestSource: string): BunPlugin {
  return {
    name: "sluice-native",
    setup(build) {
      build.onResolve({ filter: /^sluice:native-manifest$/ }, () => ({ path: "native-manifest", namespace: "sluice" }));
      build.onLoad({ filter: /.*/, namespace: "sluice" }, () => ({ contents: manifestSource, loader: "js" }));
      build.onLoad({ filter: /onnxruntime-node[\\/]dist[\\/]binding\.js$/ }, async (args) => {
        const text = await Bun.file(args.path).text();
        if (!text.includes(ORT_LOADER)) {
          throw new Error(`onnxruntime-node's binding.js no longer loads its addon with ${ORT_LOADER}; update src/packaging/build.ts`);
        }
        const contents = text.replace(ORT_LOADER, `require(require(${JSON.stringify(NATIVE_TS)}).nativeFilePath(${JSON.stringify(ORT_BINDING)}))`);
        return { contents, loader: "js" };
      });
      // protobufjs (under onnx-proto) finds its optional modules with a runtime require the
      // bundler cannot see; in the binary that would resolve against the working directory's
      // node_modules (or nothing). Static requires bundle the same modules development uses.
      build.onLoad({ filter: /@protobufjs[\\/]inquire[\\/]index\.js$/ }, () => ({
        contents: `module.exports = function inquire(name) {
  switch (name) {
    case "long": return require("long");
    case "buffer": return require("buffer");
    case "fs": return require("fs");
    default: return null;
  }
};\n`,
        loader: "js",
      }));
      // sharp's loader requires its addon from node_modules at run time; libvips is loaded first
      // (bun:ffi, by path) so the addon's libvips dependency resolves by soname in the flat directory.
      build.onLoad({ filter: /node_modules[\\/]sharp[\\/]dist[\\/]sharp\.(c|m)js$/ }, (args) => {
        const body = `dlopen(nativeFilePath(${JSON.stringify(LIBVIPS)}), { vips_version: { args: ["int"], returns: "int" } });
const binding = load(nativeFilePath(${JSON.stringify(SHARP_BINDING)}));\n`;
        if (args.path.endsWith(".cjs")) {
          const head = `const { dlopen } = require("bun:ffi");\nconst { nativeFilePath } = require(${JSON.stringify(NATIVE_TS)});\nconst load = require;\n`;
          return { contents: `${head}${body}module.exports = binding;\n`, loader: "js" };
        }
        const head = `import { createRequire } from "node:module";\nimport { dlopen } from "bun:ffi";\nimport { nativeFilePath } from ${JSON.stringify(NATIVE_TS)};\nconst load = createRequire(import.meta.url);\n`;
        return { contents: `${head}${body}export default binding;\n`, loader: "js" };
      });
      build.onLoad({ filter: /node_modules[\\/]tokenizers[\\/]index\.js$/ }, () => ({
        // The package's index.js only re-exports the addon's members, so the addon is the module.
        contents: `module.exports = require(require(${JSON.stringify(NATIVE_TS)}).nativeFilePath(${JSON.stringify(TOKENIZERS_BINDING)}));\n`,
        loader: "js",
      }));
    },
  };
}

/** Package directories (node_modules/<name> or node_modules/@scope/<name>) of the bundled input paths. */
export function embeddedPackages(inputs: string[]): string[] {
  const dirs = new Set<string>();
  for (const input of inputs) {
    const m = /^(.*node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(input.replace(/\\/g, "/"));
    if (m) dirs.add(relative(ROOT, resolve(ROOT, m[1]!)));
  }
  return [...dirs].sort();
}

export async function buildBinary(opts: BuildOptions): Promise<{ outfile: string; bytes: number; manifestId: string; packages: string[] }> {
  const { source, manifest } = await manifestModule(opts.target);
  const result = await Bun.build({
    entrypoints: [join(ROOT, "src/binary/main.ts"), join(ROOT, "src/binary/worker-entry.ts")],
    compile: {
      target: `bun-${opts.target}`,
      outfile: opts.outfile,
      // The operator's working directory must not change the program: a bunfig.toml, .env,
      // tsconfig.json or package.json there would otherwise be read at start.
      autoloadBunfig: false,
      autoloadDotenv: false,
      autoloadTsconfig: false,
      autoloadPackageJson: false,
    },
    minify: true,
    sourcemap: "none",
    plugins: [nativePlugin(source)],
    metafile: true,
  });
  if (!result.success) {
    for (const l of result.logs) console.error(l);
    throw new Error("bun build failed");
  }
  // The packages whose code is inside the binary, for the release's licence notices.
  const meta = (typeof result.metafile === "string" ? JSON.parse(result.metafile) : result.metafile) as { inputs?: Record<string, unknown> } | undefined;
  const inputs = Object.keys(meta?.inputs ?? {});
  const packages = embeddedPackages([...inputs, ...NATIVE_FILES[opts.target]!.map((s) => s.source)]);
  writeFileSync(`${opts.outfile}.packages.json`, JSON.stringify(packages, null, 1) + "\n");
  return { outfile: opts.outfile, bytes: statSync(opts.outfile).size, manifestId: manifest.id, packages };
}

if (import.meta.main) {
  const outfile = resolve(process.argv[2] ?? join(ROOT, "dist/sluice"));
  const t0 = performance.now();
  const r = await buildBinary({ outfile, target: "linux-x64" });
  console.log(`built ${r.outfile} (${(r.bytes / 1e6).toFixed(1)} MB, native manifest ${r.manifestId.slice(0, 16)}) in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}
