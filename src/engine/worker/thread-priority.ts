// The schema compile thread's relation to the CPU (Linux, through libc): it runs at the lowest
// priority (nice 19 for this thread alone), so when CPUs are short (two cores, or a machine busy
// with other work) a model's decode loop goes first and compiling a hostile schema takes the time
// left over; and its time limit counts the CPU time it used, not the time it waited for a CPU.
import { dlopen, FFIType, ptr } from "bun:ffi";

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

const CLOCK_THREAD_CPUTIME_ID = 3;

/** Milliseconds of CPU time the calling thread has used, or null where it cannot be read. */
export function threadCpuClock(): (() => number) | null {
  if (process.platform !== "linux") return null;
  try {
    const libc = dlopen("libc.so.6", { clock_gettime: { args: [FFIType.i32, FFIType.ptr], returns: FFIType.i32 } });
    const ts = new BigInt64Array(2);
    const at = ptr(ts);
    const read = () => {
      libc.symbols.clock_gettime(CLOCK_THREAD_CPUTIME_ID, at);
      return Number(ts[0]!) * 1000 + Number(ts[1]!) / 1e6;
    };
    // Sanity: a clock that does not move forward is no clock.
    const a = read();
    for (let i = 0, x = 0; i < 1e5; i++) x += i;
    return read() >= a && a > 0 ? read : null;
  } catch {
    return null;
  }
}
