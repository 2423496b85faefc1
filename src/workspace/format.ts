// Display formats shared by the pages; all times are UTC so that charts, tables and CSV agree.

export const DAY_MS = 86_400_000;

export const isoDay = (ms: number) => new Date(ms).toISOString().slice(0, 10);

export const dateTime = (ms: number | null) =>
  ms === null ? "—" : new Date(ms).toISOString().slice(0, 16).replace("T", " ");

/** Parses YYYY-MM-DD as the start of that UTC day, or null. */
export function parseDay(s: string | null): number | null {
  if (!s || !/^\d{4}-\d{2}-\d{2}$/.test(s)) return null;
  const ms = Date.parse(`${s}T00:00:00Z`);
  return Number.isFinite(ms) && isoDay(ms) === s ? ms : null;
}

export const integer = (n: number) => Math.round(n).toLocaleString("en-US");

/** USD with enough digits that per-request charges of cheap models are not shown as $0.00. */
export function usd(n: number): string {
  const abs = Math.abs(n);
  // Whole cents print as cents; anything finer keeps micro-dollars, so $4.999956 never shows as $5.00.
  const digits = Math.abs(abs * 100 - Math.round(abs * 100)) < 1e-6 ? 2 : 6;
  const s = abs.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  return `${n < 0 ? "−" : ""}$${s}`;
}

export const price = (perMTok: number) => (perMTok === 0 ? "free" : `$${perMTok.toLocaleString("en-US", { maximumFractionDigits: 4 })}`);
