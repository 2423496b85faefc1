// Display formats shared by the pages; all times are UTC so that charts, tables and CSV agree, and
// each says so.
import { usd } from "../format-money.ts";
import { html, type Html } from "./html.ts";

export const DAY_MS = 86_400_000;

export const isoDay = (ms: number) => new Date(ms).toISOString().slice(0, 10);

/** "2026-11-28 04:57 UTC": every time the pages show says its zone. */
export const dateTime = (ms: number | null) =>
  ms === null ? "—" : `${new Date(ms).toISOString().slice(0, 16).replace("T", " ")} UTC`;

/** A time in a table: dateTime, marked up as a <time> with its exact instant. */
export const timeCell = (ms: number): Html => html`<time datetime="${new Date(ms).toISOString()}">${dateTime(ms)}</time>`;

/** Parses YYYY-MM-DD as the start of that UTC day, or null. */
export function parseDay(s: string | null): number | null {
  if (!s || !/^\d{4}-\d{2}-\d{2}$/.test(s)) return null;
  const ms = Date.parse(`${s}T00:00:00Z`);
  return Number.isFinite(ms) && isoDay(ms) === s ? ms : null;
}

export const integer = (n: number) => Math.round(n).toLocaleString("en-US");

export { usd, usdColumn } from "../format-money.ts";

/** A price per million tokens: "$0.50", "$0.075", or "free". */
export const price = (perMTok: number) => (perMTok === 0 ? "free" : usd(perMTok));
