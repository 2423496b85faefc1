// ONNX Runtime's own telemetry, kept off unless the operator turns it on.
//
// The Linux builds of onnxruntime-node (1.29 and 1.30 alike) send usage events to Microsoft
// (1DS): at its first session a process writes a device id and an offline event store under
// ~/.cache/Microsoft/DeveloperTools/.onnxruntime (XDG_CACHE_HOME) and an empty
// /tmp/mat-debug-<pid>.log, then tries to upload. Sluice runs accounts' requests on an operator's
// box: nothing about them, or about the box, is to leave it unless the operator says so.
//
// ONNX Runtime reads ORT_DISABLE_TELEMETRY from the C environment once, when it creates its
// environment (the first session of the process). Bun's `process.env` is a copy: writing to it
// does not reach getenv, so the variable is set through libc's setenv. An operator's own value (0
// turns telemetry on) is left as it is. Called at the start of the process, before any thread
// that could read the environment exists: setenv is not safe against a concurrent getenv.
import { dlopen, FFIType } from "bun:ffi";

export const ORT_TELEMETRY_VARIABLE = "ORT_DISABLE_TELEMETRY";

export type OrtTelemetry =
  /** Sluice set ORT_DISABLE_TELEMETRY=1. */
  | { state: "off" }
  /** The operator's environment already had the variable; its value is theirs. */
  | { state: "operator"; value: string }
  /** libc could not be reached (not glibc): ONNX Runtime's default stands. */
  | { state: "unavailable"; reason: string };

let decided: OrtTelemetry | null = null;

function cString(s: string): Uint8Array {
  return new TextEncoder().encode(`${s}\0`);
}

/** Sets ORT_DISABLE_TELEMETRY=1 unless the environment has it; once per process. */
export function keepOrtTelemetryOff(): OrtTelemetry {
  if (decided) return decided;
  const own = process.env[ORT_TELEMETRY_VARIABLE];
  if (own !== undefined) return (decided = { state: "operator", value: own });
  try {
    const libc = dlopen("libc.so.6", {
      setenv: { args: [FFIType.ptr, FFIType.ptr, FFIType.i32], returns: FFIType.i32 },
    });
    try {
      // overwrite 0: a value set since the process started (another library) also stands.
      if (libc.symbols.setenv(cString(ORT_TELEMETRY_VARIABLE), cString("1"), 0) !== 0) {
        return (decided = { state: "unavailable", reason: "setenv failed" });
      }
    } finally {
      libc.close();
    }
  } catch (e) {
    return (decided = { state: "unavailable", reason: e instanceof Error ? e.message : String(e) });
  }
  return (decided = { state: "off" });
}

/** The state as `sluice doctor` prints it. */
export function describeOrtTelemetry(t: OrtTelemetry): string {
  switch (t.state) {
    case "off":
      return `off (${ORT_TELEMETRY_VARIABLE}=1)`;
    case "operator":
      return `as the environment sets it (${ORT_TELEMETRY_VARIABLE}=${t.value})`;
    case "unavailable":
      return `ONNX Runtime's default: could not set ${ORT_TELEMETRY_VARIABLE} (${t.reason}); set it in the environment`;
  }
}
