// Whether ONNX Runtime's C API can be reached from this process, for `sluice doctor`.
import { ortLibrary } from "./ort-api.ts";

export type CApiProbe = { ok: true; version: string; path: string } | { ok: false; error: string };

export function probeCApi(libDir: string): CApiProbe {
  try {
    const lib = ortLibrary(libDir);
    return { ok: true, version: lib.version, path: lib.path };
  } catch (e) {
    return { ok: false, error: (e as Error).message };
  }
}
