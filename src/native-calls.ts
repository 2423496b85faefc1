// Asynchronous calls into native addons (an ONNX Runtime run, a tokenizer's encode, an image
// decode) in flight in this thread, counted in memory shared with whoever may end the thread.
// A worker thread must not be torn down while one is in flight: the call completes into a
// JavaScript environment that no longer exists, and the addon aborts the whole process (seen with
// onnxruntime-node: "terminate called after throwing an instance of 'Napi::Error'"). A thread that
// is to end (it crashed, or was found stuck) first stops starting such calls, and is ended only
// once none is in flight. Threads without shared flags (the HTTP thread, tests) just call.

const IN_FLIGHT = 0;
const STOP = 1;

/** The shared flags a thread's owner creates and passes to it. */
export function nativeCallFlags(): SharedArrayBuffer {
  return new SharedArrayBuffer(8);
}

let flags: Int32Array | null = null;

/** Called once in a worker thread with the flags its owner created. */
export function shareNativeCallFlags(buffer: SharedArrayBuffer): void {
  flags = new Int32Array(buffer);
}

/**
 * Counts a call as in flight, unless the thread is stopping (then false, and nothing counted).
 * Counted before the flag is read, so an owner that sets the flag and then sees no call in flight
 * knows none will start (sequentially consistent atomics).
 */
function enter(f: Int32Array): boolean {
  Atomics.add(f, IN_FLIGHT, 1);
  if (Atomics.load(f, STOP) === 0) return true;
  Atomics.sub(f, IN_FLIGHT, 1);
  return false;
}

/** Runs `call` counted as in flight; once the thread is stopping, the call never starts (nor settles). */
export async function nativeCall<T>(call: () => Promise<T>): Promise<T> {
  const f = flags;
  if (f === null) return call();
  if (!enter(f)) return new Promise<T>(() => {});
  try {
    return await call();
  } finally {
    Atomics.sub(f, IN_FLIGHT, 1);
  }
}

/**
 * A synchronous native call (a decoder run through onnxruntime-node's binding directly, see
 * engine/runtime/native-session.ts), counted the same way: the owner waits for it to return
 * before ending the thread, as the binding still builds its results through N-API after the run.
 * Once the thread is stopping it never starts, and what an awaiting caller gets never settles.
 */
export function nativeCallSync<T>(call: () => T): T | Promise<T> {
  const f = flags;
  if (f === null) return call();
  if (!enter(f)) return new Promise<T>(() => {});
  try {
    return call();
  } finally {
    Atomics.sub(f, IN_FLIGHT, 1);
  }
}

/**
 * Stops new calls in the thread that shares `buffer` and resolves once none is in flight (then
 * the thread may be terminated). `onSlow` is called once if that takes longer than `slowMs`.
 * After `giveUpMs` it resolves false: a call is still counted (the thread may be stuck in
 * JavaScript with a call's completion queued behind it) and the thread must not be terminated.
 */
export async function quiesceNativeCalls(buffer: SharedArrayBuffer, onSlow?: () => void, slowMs = 10_000, giveUpMs = Infinity): Promise<boolean> {
  const f = new Int32Array(buffer);
  Atomics.store(f, STOP, 1);
  const t0 = performance.now();
  let warned = false;
  while (Atomics.load(f, IN_FLIGHT) > 0) {
    const waited = performance.now() - t0;
    if (waited > giveUpMs) return false;
    if (!warned && waited > slowMs) {
      warned = true;
      onSlow?.();
    }
    await Bun.sleep(5);
  }
  return true;
}
