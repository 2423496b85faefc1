// The native files the compiled binary carries, and the manifest the build records for them.
// Only linux-x64 is built today; the table is keyed by platform so adding one is a table entry.

export interface NativeFileSpec {
  /** Name inside the unpacked directory (what the loaders ask for). */
  name: string;
  /** Path of the source file relative to the repository root. */
  source: string;
  /** Why it is there, for doctor and the release notices. */
  role: string;
  /** npm package the file comes from (its licence goes into the release notices). */
  pkg: string;
}

export interface NativeManifestEntry {
  name: string;
  /** Where the bytes live inside the running binary (a /$bunfs/ path) or on disk in tests. */
  embedded: string;
  sha256: string;
  size: number;
}

export interface NativeManifest {
  /** A hash over all entries: a new build with different native files gets a new cache directory. */
  id: string;
  files: NativeManifestEntry[];
}

export const LIBVIPS = "libvips-cpp.so.8.18.7";
export const SHARP_BINDING = "sharp.node";

const ORT_DIR = "node_modules/onnxruntime-node/bin/napi-v6/linux/x64";

export const NATIVE_FILES: Record<string, NativeFileSpec[]> = {
  "linux-x64": [
    // The addon's RUNPATH is $ORIGIN, so the library must sit beside it: that is why both are
    // unpacked into one directory instead of letting Bun extract the addon alone.
    { name: "libonnxruntime.so.1", source: `${ORT_DIR}/libonnxruntime.so.1`, role: "ONNX Runtime", pkg: "onnxruntime-node" },
    { name: "onnxruntime_binding.node", source: `${ORT_DIR}/onnxruntime_binding.node`, role: "ONNX Runtime Node-API addon", pkg: "onnxruntime-node" },
    { name: "tokenizers.node", source: "node_modules/tokenizers/tokenizers.linux-x64-gnu.node", role: "Hugging Face tokenizers addon", pkg: "tokenizers" },
    // sharp's addon finds libvips through an RPATH into node_modules, so the loader the build
    // substitutes loads libvips first (by path); the addon's dependency then resolves by soname.
    { name: LIBVIPS, source: `node_modules/@img/sharp-libvips-linux-x64/lib/${LIBVIPS}`, role: "libvips (image decoding and resizing)", pkg: "@img/sharp-libvips-linux-x64" },
    { name: SHARP_BINDING, source: "node_modules/@img/sharp-linux-x64/lib/sharp-linux-x64-0.35.5.node", role: "sharp Node-API addon (images)", pkg: "@img/sharp-linux-x64" },
  ],
};

export const ORT_BINDING = "onnxruntime_binding.node";
export const TOKENIZERS_BINDING = "tokenizers.node";
