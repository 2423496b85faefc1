// Operator commands for rate limits: per account, or per key on top of its account's.
import type { RateLimits, Store } from "../store/index.ts";
import { findAccount, seeCommand, STORE_OPTIONS, withStore } from "./commands.ts";
import { requireString, UsageError, type Command, type CommandArgs } from "./framework.ts";

const DIMENSIONS = [
  { flag: "rpm", field: "requestsPerMinute", help: "Requests per minute" },
  { flag: "tpm", field: "tokensPerMinute", help: "Tokens per minute (prompt estimate + max_tokens when admitted, settled with the real count)" },
  { flag: "concurrent", field: "maxConcurrent", help: "Chat requests running at once" },
] as const;


async function scopeOf(store: Store, args: CommandArgs): Promise<{ accountId: number; keyId: string | null; modelId: string | null; label: string }> {
  const name = requireString(args, "account");
  const a = await findAccount(store, args, name);
  const keyId = typeof args.values.key === "string" && args.values.key !== "" ? args.values.key : null;
  if (keyId && !(await store.keys.list(a.id)).some((k) => k.id === keyId)) throw new UsageError(`account ${name} has no key ${keyId} (see: ${seeCommand(args, "keys", "list", "--account", name)})`);
  const modelId = typeof args.values.model === "string" && args.values.model !== "" ? args.values.model : null;
  if (modelId && !(await store.catalog.get(modelId))) throw new UsageError(`no model ${modelId} in the catalog (see: ${seeCommand(args, "models", "list")})`);
  const label = `${keyId ? `key ${keyId} of ${name}` : `account ${name}`}${modelId ? ` for ${modelId}` : ""}`;
  return { accountId: a.id, keyId, modelId, label };
}

/** "none" (or 0) clears a dimension; absent keeps what is set. */
function parseLimit(v: string | boolean | undefined, flag: string, current: number | null): number | null {
  if (typeof v !== "string") return current;
  if (v === "none" || v === "0") return null;
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) throw new UsageError(`--${flag} must be a positive integer, or none`);
  return n;
}

const show = (l: RateLimits) =>
  DIMENSIONS.map((d) => `${d.flag}=${l[d.field] ?? "unlimited"}`).join(" ");

const SCOPE_OPTIONS = [
  ...STORE_OPTIONS,
  { name: "account", type: "string" as const, help: "The account" },
  { name: "key", type: "string" as const, help: "A key id of the account (key_…): limits for that key only, on top of the account's" },
  { name: "model", type: "string" as const, help: "A model id: limits for requests for that model only, on top of the others (the OpenAI rate-limit headers report the tightest)" },
];

export const limitsCommands: Command[] = [
  {
    path: ["limits", "set"],
    usage: "--account NAME [--key ID] [--model ID] [--rpm N] [--tpm N] [--concurrent N]",
    summary: "Set rate limits of an account (or one of its keys), for every model or (--model) for one. Omitted limits stay as they are; 'none' removes one. Accounts without limits are unlimited. Applies on the next request.",
    options: [...SCOPE_OPTIONS, ...DIMENSIONS.map((d) => ({ name: d.flag, type: "string" as const, help: `${d.help}, or none`, env: `SLUICE_LIMIT_${d.flag.toUpperCase()}` }))],
    run: (args) =>
      withStore(args, async (s) => {
        const scope = await scopeOf(s, args);
        const current = (await s.limits.get(scope.accountId, scope.keyId, scope.modelId)) ?? { requestsPerMinute: null, tokensPerMinute: null, maxConcurrent: null };
        const next: RateLimits = { ...current };
        for (const d of DIMENSIONS) next[d.field] = parseLimit(args.values[d.flag], d.flag, current[d.field]);
        if (DIMENSIONS.every((d) => args.values[d.flag] === undefined)) throw new UsageError("give at least one of --rpm, --tpm, --concurrent (a number, or none)");
        await s.limits.set(scope.accountId, scope.keyId, next, scope.modelId);
        console.log(`${scope.label}: ${show(next)}`);
        return 0;
      }),
  },
  {
    path: ["limits", "clear"],
    usage: "--account NAME [--key ID] [--model ID]",
    summary: "Remove every rate limit of an account (or of one of its keys; with --model, those for that model only).",
    options: SCOPE_OPTIONS,
    run: (args) =>
      withStore(args, async (s) => {
        const scope = await scopeOf(s, args);
        await s.limits.set(scope.accountId, scope.keyId, { requestsPerMinute: null, tokensPerMinute: null, maxConcurrent: null }, scope.modelId);
        console.log(`${scope.label}: unlimited`);
        return 0;
      }),
  },
  {
    path: ["limits", "list"],
    usage: "[--account NAME]",
    summary: "List the rate limits that are set (accounts and keys not listed are unlimited).",
    options: [...STORE_OPTIONS, { name: "account", type: "string", help: "Only this account" }, { name: "json", type: "boolean", help: "Print JSON", env: "SLUICE_JSON" }],
    run: (args) =>
      withStore(args, async (s) => {
        let accountId: number | undefined;
        if (typeof args.values.account === "string") {
          accountId = (await findAccount(s, args, args.values.account)).id;
        }
        const rows = await s.limits.list(accountId);
        if (args.values.json) console.log(JSON.stringify(rows, null, 2));
        else if (rows.length === 0) console.log("(no limits set: every account is unlimited)");
        else for (const r of rows) console.log(`${r.accountName.padEnd(16)} ${(r.keyId ?? "(account)").padEnd(22)} ${(r.modelId ?? "(all models)").padEnd(24)} ${show(r)}`);
        return 0;
      }),
  },
];
