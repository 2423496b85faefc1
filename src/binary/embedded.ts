// Binary builds only: registers the embedded native manifest and the worker's embedded path.
// `sluice:native-manifest` is a module the build script generates (see build.ts).
// @ts-expect-error resolved by the build plugin, absent in development
import manifest from "sluice:native-manifest";
import type { NativeManifest } from "../packaging/native-files.ts";
import { registerEmbeddedNative } from "../packaging/native.ts";

registerEmbeddedNative(manifest as NativeManifest, new URL("./worker-entry.ts", import.meta.url).href);
