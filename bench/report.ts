// Shared by the benchmark scripts: a printed table, the machine's description, and writing one
// `## Section` of docs/BENCHMARKS.md without touching the others.
import { existsSync, readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { dirname, join } from "node:path";

export const BENCHMARKS_MD = join(import.meta.dir, "..", "docs", "BENCHMARKS.md");

export function machine(): string {
  const cpu = cpus()[0]?.model ?? "unknown CPU";
  return `${cpus().length} × ${cpu.trim()}, ${Math.round(totalmem() / 2 ** 30)} GiB, ${process.platform}-${process.arch}, Bun ${Bun.version}`;
}

export function table(header: string[], rows: (string | number)[][]): string {
  const cells = [header, ...rows.map((r) => r.map(String))];
  const widths = header.map((_, i) => Math.max(...cells.map((r) => r[i]!.length)));
  const line = (r: string[]) => `| ${r.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`;
  return [line(header), `| ${widths.map((w) => "-".repeat(w)).join(" | ")} |`, ...cells.slice(1).map(line)].join("\n");
}

/** Replaces (or appends) `## title` in docs/BENCHMARKS.md with `body`. */
export function writeSection(title: string, body: string): void {
  mkdirSync(dirname(BENCHMARKS_MD), { recursive: true });
  const head = "# Benchmarks\n\nEach section is written by the script named in it; rerun the script to refresh it.\n";
  const text = existsSync(BENCHMARKS_MD) ? readFileSync(BENCHMARKS_MD, "utf8") : head;
  const section = `## ${title}\n\n${body.trim()}\n`;
  const re = new RegExp(`## ${title.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\n[\\s\\S]*?(?=\\n## |$)`);
  const next = re.test(text) ? text.replace(re, section) : `${text.trimEnd()}\n\n${section}`;
  writeFileSync(BENCHMARKS_MD, next.trimEnd() + "\n");
}

export const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? (s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2) : NaN;
};

export const percentile = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]! : NaN;
};

/**
 * `items` in round `round`'s order for interleaved runs: each round starts one later, so every
 * runner is first in turn and none always follows the same other (what one leaves behind, a
 * process's threads winding down or a cache it filled, falls on each alike).
 */
export function rotated<T>(items: readonly T[], round: number): T[] {
  const k = items.length ? round % items.length : 0;
  return [...items.slice(k), ...items.slice(0, k)];
}
