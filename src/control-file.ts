// Where a running server tells the operator's commands how to reach its control listener: a file
// in its data directory holding the listener's loopback address and a random token, readable by
// the data directory's owner only (whoever can read it can also read the database).
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export interface ControlFile {
  url: string;
  token: string;
  pid: number;
}

export const controlFilePath = (dataDir: string) => join(dataDir, "control.json");

export function writeControlFile(dataDir: string, control: ControlFile): void {
  mkdirSync(dataDir, { recursive: true });
  const path = controlFilePath(dataDir);
  writeFileSync(path, JSON.stringify(control) + "\n", { mode: 0o600 });
  // An existing file keeps its mode through writeFileSync: set it either way.
  chmodSync(path, 0o600);
}

export function readControlFile(dataDir: string): ControlFile | null {
  const path = controlFilePath(dataDir);
  if (!existsSync(path)) return null;
  try {
    const v = JSON.parse(readFileSync(path, "utf8")) as Partial<ControlFile>;
    return typeof v.url === "string" && typeof v.token === "string" ? { url: v.url, token: v.token, pid: Number(v.pid) } : null;
  } catch {
    return null;
  }
}

/** Removes the file if it is still this process's (a newer server may have replaced it). */
export function removeControlFile(dataDir: string, token: string): void {
  if (readControlFile(dataDir)?.token === token) rmSync(controlFilePath(dataDir), { force: true });
}
