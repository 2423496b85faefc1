// The model workers' supervision state in a small JSON file beside the database, written by
// `serve` whenever it changes and read by `sluice doctor` (a separate process with no connection
// to the server): a crash loop shows there as well as in the log and /metrics.
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { WorkerHealth } from "./types.ts";

export const HEALTH_FILE = "model-health.json";

export interface HealthReport {
  pid: number;
  /** Epoch milliseconds. */
  updatedAt: number;
  models: WorkerHealth[];
}

export function healthFilePath(dataDir: string): string {
  return join(dataDir, HEALTH_FILE);
}

/** Replaces the file atomically (a reader never sees half of it). */
export function writeHealthFile(path: string, models: WorkerHealth[]): void {
  const report: HealthReport = { pid: process.pid, updatedAt: Date.now(), models };
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(report, null, 1) + "\n");
  renameSync(tmp, path);
}

/** The last report, or null when there is none (or it cannot be read). */
export function readHealthFile(path: string): HealthReport | null {
  if (!existsSync(path)) return null;
  try {
    const r = JSON.parse(readFileSync(path, "utf8")) as HealthReport;
    return Array.isArray(r.models) && typeof r.pid === "number" ? r : null;
  } catch {
    return null;
  }
}

/** Whether the process that wrote a report still runs. */
export function writerAlive(report: HealthReport): boolean {
  try {
    process.kill(report.pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}
