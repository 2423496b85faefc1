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

const ORT_DIR = "node_modules/onnxruntime-node/bin/napi-v6/linux/x64";

export const NATIVE_FILES: Record<string, NativeFileSpec[]> = {
  "linux-x64": [
    // The addon's RUNPATH is $ORIGIN, so the library must sit beside it: that is why both are
    // unpacked into one directory instead of letting Bun extract the addon alone.
    { name: "libonnxruntime.so.1", source: `${ORT_DIR}/libonnxruntime.so.1`, role: "ONNX Runtime", pkg: "onnxruntime-node" },
    { name: "onnxruntime_binding.node", source: `${ORT_DIR}/onnxruntime_binding.node`, role: "ONNX Runtime Node-API addon", pkg: "onnxruntime-node" },
    { name: "tokenizers.node", source: "node_modules/tokenizers/tokenizers.linux-x64-gnu.node", role: "Hugging Face tokenizers addon", pkg: "tokenizers" },
  ],
};

export const ORT_BINDING = "onnxruntime_binding.node";
export const TOKENIZERS_BINDING = "tokenizers.node";
