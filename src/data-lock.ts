// One server per data directory. The directory holds what one process writes (the SQLite file,
// control.json, model-health.json, the demo model), so `serve` takes an exclusive lock on
// `serve.lock` in it for as long as it runs: flock(2), which the kernel releases when the process
// ends however it ends, so a crash leaves no stale lock behind. The file says which process holds
// it, for the message of a second server. Nodes that share state do so through PostgreSQL, each
// with its own data directory (docs/CLUSTER.md).
import { dlopen, FFIType } from "bun:ffi";
import { closeSync, ftruncateSync, mkdirSync, openSync, readFileSync, writeSync } from "node:fs";
import { join } from "node:path";

export const lockFilePath = (dataDir: string) => join(dataDir, "serve.lock");

/** What the holder wrote: its process, and where it serves once it listens. */
export interface LockHolder {
  pid: number;
  since: string;
  url?: string;
}

export interface DataLock {
  /** Records where the holder serves, for a second server's message. */
  note(url: string): void;
  release(): void;
}

const LOCK_EX = 2;
const LOCK_NB = 4;
const LOCK_UN = 8;

type Flock = (fd: number, op: number) => number;
let flock: Flock | null | undefined;

/** libc's flock, or null where it cannot be loaded (then a live process named in the file holds it). */
function loadFlock(): Flock | null {
  if (flock !== undefined) return flock;
  try {
    const lib = dlopen("libc.so.6", { flock: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 } });
    flock = (fd, op) => lib.symbols.flock(fd, op);
  } catch {
    flock = null;
  }
  return flock;
}

export function readLockHolder(dataDir: string): LockHolder | null {
  try {
    const v = JSON.parse(readFileSync(lockFilePath(dataDir), "utf8")) as Partial<LockHolder>;
    return typeof v.pid === "number" ? { pid: v.pid, since: String(v.since ?? ""), url: typeof v.url === "string" ? v.url : undefined } : null;
  } catch {
    return null;
  }
}

export class DataDirInUse extends Error {}

function alive(pid: number | undefined): boolean {
  if (pid === undefined || pid === process.pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as { code?: string }).code === "EPERM";
  }
}

/** Takes the data directory's lock (creating the directory), or throws DataDirInUse naming the holder. */
export function lockDataDir(dataDir: string): DataLock {
  mkdirSync(dataDir, { recursive: true });
  const path = lockFilePath(dataDir);
  const fd = openSync(path, "a+", 0o600);
  const lock = loadFlock();
  const taken = lock ? lock(fd, LOCK_EX | LOCK_NB) !== 0 : alive(readLockHolder(dataDir)?.pid);
  if (taken) {
    closeSync(fd);
    const holder = readLockHolder(dataDir);
    const who = holder ? `process ${holder.pid}${holder.url ? `, serving ${holder.url}` : ""}${holder.since ? `, since ${holder.since}` : ""}` : "another process";
    throw new DataDirInUse(
      `the data directory ${dataDir} is in use by another sluice serve (${who}): one server per data directory. Stop that one, or give this one its own --data; several nodes share accounts and keys only through one PostgreSQL database (--database, see docs/CLUSTER.md)`,
    );
  }
  const holder: LockHolder = { pid: process.pid, since: new Date().toISOString().replace(/\.\d+Z$/, "Z") };
  const write = () => {
    ftruncateSync(fd, 0);
    writeSync(fd, JSON.stringify(holder) + "\n", 0);
  };
  write();
  let held = true;
  return {
    note(url) {
      if (!held) return;
      holder.url = url;
      write();
    },
    release() {
      if (!held) return;
      held = false;
      // The file stays (removing it would let a third server lock a new file while a second one
      // still holds the old one's inode); only the lock goes.
      ftruncateSync(fd, 0);
      lock?.(fd, LOCK_UN);
      closeSync(fd);
    },
  };
}
