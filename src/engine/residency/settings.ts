// How operators write residency settings: keep-alive durations (serve --keep-alive, sluice.json's
// keep_alive, the admin page, `models keep-alive`) and memory sizes (serve --memory-budget).

/** Stays loaded however long it is idle. */
export const PINNED = -1;

export const DEFAULT_KEEP_ALIVE_MS = 5 * 60_000;

const UNITS_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/**
 * A keep-alive as milliseconds, or PINNED. Accepts -1 (always loaded), 0 (unloaded as soon as it
 * is idle), a number of seconds, or a number with a unit: 500ms, 30s, 5m, 2h (Ollama's forms).
 * Throws an Error naming what is accepted.
 */
export function parseKeepAlive(value: string | number): number {
  if (typeof value === "number") {
    if (value === -1) return PINNED;
    if (Number.isFinite(value) && value >= 0) return Math.round(value * 1000);
  } else {
    const v = value.trim();
    if (v === "-1") return PINNED;
    const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(v);
    if (m) return Math.round(Number(m[1]) * UNITS_MS[m[2] ?? "s"]!);
  }
  throw new Error(`keep-alive ${JSON.stringify(value)}: use -1 (always loaded), 0, seconds, or a duration such as 30s, 5m, 2h`);
}

/** Whole seconds for the catalog (rounded up, so that a short keep-alive is never 0). */
export function keepAliveSeconds(ms: number): number {
  return ms === PINNED ? PINNED : Math.ceil(ms / 1000);
}

/** How a keep-alive reads: "always", "0 s", "90 s", "5 min", "2 h". */
export function describeKeepAlive(ms: number): string {
  if (ms === PINNED) return "always";
  if (ms >= 3_600_000 && ms % 3_600_000 === 0) return `${ms / 3_600_000} h`;
  if (ms >= 60_000 && ms % 60_000 === 0) return `${ms / 60_000} min`;
  if (ms % 1000 === 0) return `${ms / 1000} s`;
  return `${ms} ms`;
}

const UNITS_BYTES: Record<string, number> = { k: 2 ** 10, m: 2 ** 20, g: 2 ** 30, t: 2 ** 40 };

/**
 * A memory size: a plain number is MiB; or with a unit (K, M, G, T, optionally followed by B or
 * iB; binary either way); or a percentage of the device's memory ("80%"). Throws on anything else.
 */
export function parseMemorySize(value: string): { bytes: number } | { fraction: number } {
  const v = value.trim();
  const pct = /^(\d+(?:\.\d+)?)%$/.exec(v);
  if (pct) {
    const f = Number(pct[1]) / 100;
    if (f > 0 && f <= 1) return { fraction: f };
  }
  const m = /^(\d+(?:\.\d+)?)\s*(?:([kmgt])(?:i?b)?)?$/i.exec(v);
  if (m && Number(m[1]) > 0) return { bytes: Math.round(Number(m[1]) * UNITS_BYTES[(m[2] ?? "m").toLowerCase()]!) };
  throw new Error(`memory size ${JSON.stringify(value)}: use MiB (4096), a size with a unit (24G, 512M) or a share of the device (80%)`);
}
