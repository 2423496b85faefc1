// Operator commands of governance: the audit log (list, verify) and the admin API's tokens.
import type { UsageGroup, UsageGrouping } from "../store/index.ts";
import { findAccount, withStore, date, print, STORE_OPTIONS, seeCommand } from "./commands.ts";
import { positional, requireString, UsageError, type Command, type CommandArgs, type OptionSpec } from "./framework.ts";

const UNITS_MS: Record<string, number> = { m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** --since: a date (2026-11-01, from its UTC start), a date-time with a zone, or a duration ago (90m, 24h, 7d, 2w). */
export function parseSince(value: string, now = Date.now()): number {
  const v = value.trim();
  const d = /^(\d+)(m|h|d|w)$/.exec(v);
  if (d) return now - Number(d[1]) * UNITS_MS[d[2]!]!;
  let at = NaN;
  if (/^\d{4}-\d{2}-\d{2}$/.test(v)) at = Date.parse(`${v}T00:00:00Z`);
  else if (/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(v)) at = Date.parse(v);
  if (!Number.isFinite(at)) throw new UsageError(`--since ${JSON.stringify(value)}: give a date (2026-11-01), a date-time with a zone (2026-11-01T09:00:00Z) or a duration ago (90m, 24h, 7d, 2w)`);
  return at;
}

export const FORMAT_OPTION = (formats: string[]): OptionSpec => ({ name: "format", type: "string", help: `Output format: ${formats.join(", ")}`, default: formats[0], argument: true });

export function formatOf(args: CommandArgs, formats: string[]): string {
  const f = String(args.values.format);
  if (!formats.includes(f)) throw new UsageError(`--format must be ${formats.slice(0, -1).join(", ")} or ${formats.at(-1)}, not ${JSON.stringify(f)}`);
  return f;
}

const GROUPINGS: UsageGrouping[] = ["key", "model", "user", "day"];

/** A CSV cell as RFC 4180 quotes it, with spreadsheet formulas in free text defused. */
const csvCell = (v: string | number | null) => {
  const s = v === null ? "" : String(v);
  const safe = typeof v === "string" && /^[=+\-@\t\r]/.test(s) ? `'${s}` : s;
  return /[",\n\r]/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
};

/** A usage report's rows as the CLI and the admin API print them. */
export const reportRows = (by: UsageGrouping, groups: UsageGroup[]) =>
  groups.map((g) => ({
    [by]: g.group,
    requests: g.requests,
    prompt_tokens: g.promptTokens,
    cached_tokens: g.cachedTokens,
    completion_tokens: g.completionTokens,
    reasoning_tokens: g.reasoningTokens,
    cost_usd: Number(g.costUsd.toFixed(9)),
  }));

const brief = (v: unknown) => (v === null || v === undefined ? "-" : JSON.stringify(v));

export const governanceCommands: Command[] = [
  {
    path: ["usage", "report"],
    usage: "--account NAME --by key|model|user|day [--since DATE] [--until DATE] [--format table|csv|json]",
    summary:
      "Report an account's requests, tokens and spend grouped by key, model, end user (the request's user or safety_identifier; '-' for none) or UTC day, dearest first.",
    options: [
      ...STORE_OPTIONS,
      { name: "account", type: "string", help: "The account", argument: true },
      { name: "by", type: "string", help: "Group by key, model, user or day", argument: true },
      { name: "since", type: "string", help: "From: a date (2026-11-01), a date-time (2026-11-01T09:00:00Z) or a duration ago (7d); default 30 days ago", argument: true },
      { name: "until", type: "string", help: "Up to (not including): a date or date-time; default now", argument: true },
      FORMAT_OPTION(["table", "csv", "json"]),
    ],
    run: (args) =>
      withStore(args, async (s) => {
        const format = formatOf(args, ["table", "csv", "json"]);
        const by = requireString(args, "by") as UsageGrouping;
        if (!GROUPINGS.includes(by)) throw new UsageError(`--by must be key, model, user or day, not ${JSON.stringify(by)}`);
        const a = await findAccount(s, args, requireString(args, "account"));
        const since = typeof args.values.since === "string" ? parseSince(args.values.since) : Date.now() - 30 * 86_400_000;
        const until = typeof args.values.until === "string" ? parseSince(args.values.until) : Date.now() + 1;
        if (until <= since) throw new UsageError("--until must be after --since");
        const rows = reportRows(by, await s.usageReports.grouped(a.id, by, since, until));
        if (format === "json") console.log(JSON.stringify({ account: a.name, by, since: new Date(since).toISOString(), until: new Date(until).toISOString(), rows }, null, 2));
        else if (format === "csv") {
          const head = Object.keys(reportRows(by, [{ group: null, requests: 0, promptTokens: 0, completionTokens: 0, cachedTokens: 0, reasoningTokens: 0, costUsd: 0 }])[0]!);
          process.stdout.write([head.join(","), ...rows.map((r) => head.map((h) => csvCell((r as Record<string, string | number | null>)[h]!)).join(","))].join("\r\n") + "\r\n");
        } else print(args, rows, Object.keys(rows[0] ?? { [by]: 0 }).length > 1 ? Object.keys(rows[0]!) : [by, "requests", "prompt_tokens", "cached_tokens", "completion_tokens", "reasoning_tokens", "cost_usd"]);
        return 0;
      }),
  },
  {
    path: ["audit", "list"],
    usage: "[--since DATE|DURATION] [--limit N] [--format table|json]",
    summary: "List the audit log, newest first: every change made through the CLI, the workspace or the admin API, who made it (OS user, user or token label), from where, the target, and its state before and after.",
    options: [
      ...STORE_OPTIONS,
      { name: "since", type: "string", help: "Only entries from then on: a date (2026-11-01), a date-time (2026-11-01T09:00:00Z) or a duration ago (24h, 7d)", argument: true },
      { name: "limit", type: "string", help: "Most entries shown", default: "100", argument: true },
      FORMAT_OPTION(["table", "json"]),
    ],
    run: (args) =>
      withStore(args, async (s) => {
        const format = formatOf(args, ["table", "json"]);
        const since = typeof args.values.since === "string" ? parseSince(args.values.since) : 0;
        const limit = Number(args.values.limit);
        if (!Number.isInteger(limit) || limit <= 0) throw new UsageError("--limit must be a positive whole number");
        const entries = await s.audit.list({ since, limit });
        if (format === "json") {
          console.log(JSON.stringify(entries, null, 2));
          return 0;
        }
        print(
          args,
          entries.map((e) => ({ seq: e.seq, time: date(e.at), actor: `${e.actorKind}:${e.actor}`, source: e.source, action: e.action, target: e.target, before: brief(e.before), after: brief(e.after) })),
          ["seq", "time", "actor", "source", "action", "target", "before", "after"],
        );
        return 0;
      }),
  },
  {
    path: ["audit", "verify"],
    usage: "",
    summary: "Check the audit log's hash chain: every row's hash is recomputed and linked to the previous row's. Exits 1, naming the first bad row, when a row was altered or removed.",
    options: [...STORE_OPTIONS],
    run: (args) =>
      withStore(args, async (s) => {
        const v = await s.audit.verify();
        if (v.ok) {
          console.log(`audit log intact: ${v.rows} ${v.rows === 1 ? "entry" : "entries"}, hash chain verified`);
          return 0;
        }
        console.error(`audit log TAMPERED: ${v.problem}; the ${v.rows} entries before it are intact`);
        return 1;
      }),
  },
  {
    path: ["admin", "tokens", "create"],
    usage: "--label L",
    summary: "Create an operator token for the admin API (/admin/v1/, Authorization: Bearer). It is printed once; only its hash is stored. The label names it in the audit log.",
    options: [...STORE_OPTIONS, { name: "label", type: "string", help: "What the token is for, e.g. terraform, billing-sync (1 to 80 characters)", argument: true }],
    run: (args) =>
      withStore(args, async (s) => {
        const label = requireString(args, "label");
        let made;
        try {
          made = await s.adminTokens.create(label);
        } catch (e) {
          throw new UsageError((e as Error).message);
        }
        console.error(`created admin token ${made.info.id} (${made.info.label}); it is shown only this once:`);
        console.log(made.token);
        return 0;
      }),
  },
  {
    path: ["admin", "tokens", "list"],
    usage: "",
    summary: "List the admin API's operator tokens (never the tokens: their id, label and display prefix).",
    options: [...STORE_OPTIONS, { name: "json", type: "boolean", help: "Print JSON", env: "SLUICE_JSON" }],
    run: (args) =>
      withStore(args, async (s) => {
        const rows = (await s.adminTokens.list()).map((t) => ({ id: t.id, label: t.label, prefix: `${t.prefix}…`, created: date(t.createdAt), last_used: date(t.lastUsedAt), revoked: date(t.revokedAt) }));
        print(args, rows, ["id", "label", "prefix", "created", "last_used", "revoked"]);
        return 0;
      }),
  },
  {
    path: ["admin", "tokens", "revoke"],
    usage: "ID",
    summary: "Revoke an operator token: the admin API refuses it (401) from its next request.",
    options: [...STORE_OPTIONS],
    run: (args) =>
      withStore(args, async (s) => {
        const id = positional(args, 0, "token ID");
        if (!(await s.adminTokens.revoke(id))) throw new UsageError(`no active admin token ${id} (see: ${seeCommand(args, "admin", "tokens", "list")})`);
        console.log(`revoked ${id}`);
        return 0;
      }),
  },
];
