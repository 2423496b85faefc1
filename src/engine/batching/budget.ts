// The KV memory a model may use: running sequences' reservations plus the prefix cache. Nothing
// is allocated past it; requests that do not fit wait.
import { totalmem } from "node:os";

/** Per model: a quarter of the machine's memory, at most 8 GiB, at least 256 MiB. */
export function defaultKvBudgetBytes(): number {
  return Math.max(256 * 2 ** 20, Math.min(Math.floor(totalmem() / 4), 8 * 2 ** 30));
}

export class KvBudget {
  private reserved = 0;

  constructor(readonly totalBytes: number) {}

  get usedBytes(): number {
    return this.reserved;
  }

  get freeBytes(): number {
    return this.totalBytes - this.reserved;
  }

  tryReserve(bytes: number): boolean {
    if (bytes > this.freeBytes) return false;
    this.reserved += bytes;
    return true;
  }

  release(bytes: number): void {
    this.reserved = Math.max(0, this.reserved - bytes);
  }
}
