// The lowest scheduling priority for the calling thread (Linux: nice 19 for this thread alone,
// through libc). The schema compile thread runs at it: when CPUs are short (two cores, or a
// machine busy with other work) a model's decode loop goes first, and compiling a hostile schema
// takes the time left over instead of the time of other accounts' streams.
import { dlopen, FFIType } from "bun:ffi";

const PRIO_PROCESS = 0;
const LOWEST = 19;

/** Lowers this thread's priority; false (and no change) where it cannot be done. */
export function lowerThreadPriority(): boolean {
  if (process.platform !== "linux") return false;
  try {
    const libc = dlopen("libc.so.6", {
      gettid: { args: [], returns: FFIType.i32 },
      setpriority: { args: [FFIType.i32, FFIType.u32, FFIType.i32], returns: FFIType.i32 },
    });
    // On Linux, a thread id as the "process" of PRIO_PROCESS sets that thread's nice value only.
    const ok = libc.symbols.setpriority(PRIO_PROCESS, libc.symbols.gettid(), LOWEST) === 0;
    libc.close();
    return ok;
  } catch {
    return false;
  }
}
