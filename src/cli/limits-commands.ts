// Operator commands for rate limits: per account, or per key on top of its account's.
import type { RateLimits, Store } from "../store/index.ts";
import { accountOption, findAccount, JSON_OPTION, print, seeCommand, STORE_OPTIONS, withStore } from "./commands.ts";
import { requireString, UsageError, type Command, type CommandArgs } from "./framework.ts";

const DIMENSIONS = [
  { flag: "rpm", field: "requestsPerMinute", help: "Requests per minute" },
  { flag: "tpm", field: "tokensPerMinute", help: "Tokens per minute (prompt estimate + max_tokens when admitted, settled with the real count)" },
  { flag: "concurrent", field: "maxConcurrent", help: "Chat requests running at once" },
] as const;


async function scopeOf(store: Store, args: CommandArgs): Promise<{ accountId: number; keyId: string | null; label: string }> {
  const name = requireString(args, "account");
  const a = await findAccount(store, args, name);
  const keyId = typeof args.values.key === "string" && args.values.key !== "" ? args.values.key : null;
  if (keyId && !(await store.keys.list(a.id)).some((k) => k.id === keyId)) throw new UsageError(`account ${name} has no key ${keyId} (see: ${seeCommand(args, "keys", "list", "--account", name)})`);
  return { accountId: a.id, keyId, label: keyId ? `key ${keyId} of ${name}` : `account ${name}` };
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
  accountOption("The account"),
  { name: "key", type: "string" as const, help: "A key id of the account (key_…): limits for that key only, on top of the account's", argument: true },
];

export const limitsCommands: Command[] = [
  {
    path: ["limits", "set"],
    usage: "--account NAME [--key ID] [--rpm N] [--tpm N] [--concurrent N]",
    summary: "Set rate limits of an account (or one of its keys). Omitted limits stay as they are; 'none' removes one. Accounts without limits are unlimited. Applies on the next request.",
    options: [...SCOPE_OPTIONS, ...DIMENSIONS.map((d) => ({ name: d.flag, type: "string" as const, help: `${d.help}, or none`, argument: true }))],
    run: (args) =>
      withStore(args, async (s) => {
        const scope = await scopeOf(s, args);
        const current = (await s.limits.get(scope.accountId, scope.keyId)) ?? { requestsPerMinute: null, tokensPerMinute: null, maxConcurrent: null };
        const next: RateLimits = { ...current };
        for (const d of DIMENSIONS) next[d.field] = parseLimit(args.values[d.flag], d.flag, current[d.field]);
        await s.limits.set(scope.accountId, scope.keyId, next);
        console.log(`${scope.label}: ${show(next)}`);
        return 0;
      }),
  },
  {
    path: ["limits", "clear"],
    usage: "--account NAME [--key ID]",
    summary: "Remove every rate limit of an account (or of one of its keys).",
    options: SCOPE_OPTIONS,
    run: (args) =>
      withStore(args, async (s) => {
        const scope = await scopeOf(s, args);
        await s.limits.set(scope.accountId, scope.keyId, { requestsPerMinute: null, tokensPerMinute: null, maxConcurrent: null });
        // An account's keys may keep limits of their own: it is unlimited only if none does.
        const kept = scope.keyId ? [] : (await s.limits.list(scope.accountId)).filter((r) => r.keyId !== null);
        if (kept.length === 0) console.log(`${scope.label}: unlimited`);
        else {
          const name = requireString(args, "account");
          console.log(`${scope.label}: no limits of its own; ${kept.map((r) => `key ${r.keyId} keeps ${show(r)}`).join(", ")} (clear ${kept.length === 1 ? "it" : "each"}: ${seeCommand(args, "limits", "clear", "--account", name, "--key", kept.length === 1 ? kept[0]!.keyId! : "KEY_ID")})`);
        }
        return 0;
      }),
  },
  {
    path: ["limits", "list"],
    usage: "[--account NAME]",
    summary: "List the rate limits that are set (accounts and keys not listed are unlimited).",
    options: [...STORE_OPTIONS, accountOption("Only this account"), JSON_OPTION],
    run: (args) =>
      withStore(args, async (s) => {
        let accountId: number | undefined;
        if (typeof args.values.account === "string") {
          accountId = (await findAccount(s, args, args.values.account)).id;
        }
        const rows = await s.limits.list(accountId);
        if (args.values.json) console.log(JSON.stringify(rows, null, 2));
        else if (rows.length === 0) console.log(`(no limits set: ${accountId === undefined ? "every account is" : `${args.values.account} and its keys are`} unlimited)`);
        else {
          const cell = (v: number | null) => v ?? "unlimited";
          print(args, rows.map((r) => ({ account: r.accountName, key: r.keyId ?? "(account)", rpm: cell(r.requestsPerMinute), tpm: cell(r.tokensPerMinute), concurrent: cell(r.maxConcurrent) })), ["account", "key", "rpm", "tpm", "concurrent"]);
        }
        return 0;
      }, { reads: true }),
  },
];
