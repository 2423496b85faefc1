// The operator's commands. Each opens the store the server uses: the same SQLite file (WAL mode
// allows this while the server runs) or, with --database, the PostgreSQL database several nodes
// share. Catalog, key and limit changes take effect on every server's next request (within a
// second on a shared database).
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { describeKeepAlive, keepAliveSeconds, parseKeepAlive } from "../engine/residency/settings.ts";
import { commandLine } from "../invocation.ts";
import { describeBudget, keyLimitsFrom, parseBudget, parsePeriod } from "../key-limits.ts";
import { hostname, userInfo } from "node:os";
import { auditedStore, openStore, periodStart, type Account, type ApiKeyInfo, type AuditActor, type BudgetPeriod, type KeyLimits, type Store } from "../store/index.ts";
import { describeSamplingDefaults } from "../protocol/sampling.ts";
import { positional, requireString, UsageError, type Command, type CommandArgs, type OptionSpec } from "./framework.ts";

export const DATA_OPTION: OptionSpec = { name: "data", type: "string", help: "Data directory (SQLite file)", default: "./data" };
export const DATABASE_OPTION: OptionSpec = {
  name: "database",
  type: "string",
  help: "PostgreSQL URL (postgres://user:pass@host:5432/db) of a store shared by several nodes; without it, the SQLite file under --data",
};
/** Where a command finds the store: --database, else --data. */
export const STORE_OPTIONS: OptionSpec[] = [DATA_OPTION, DATABASE_OPTION];
export const JSON_OPTION: OptionSpec = { name: "json", type: "boolean", help: "Print JSON instead of a table" };
/** `--account NAME`: the account a command acts on. */
export const accountOption = (help: string): OptionSpec => ({ name: "account", type: "string", help, argument: true });

export const databaseOf = (args: CommandArgs) =>
  typeof args.values.database === "string" && args.values.database !== "" ? args.values.database : undefined;

export function openStoreFor(args: CommandArgs): Promise<Store> {
  return openStore({ database: databaseOf(args), dataDir: String(args.values.data) });
}

/** The operator running a command, as the audit log names them: the OS user, on this host. */
export function cliActor(): AuditActor {
  let name = process.env.USER ?? process.env.LOGNAME ?? `uid ${process.getuid?.() ?? "unknown"}`;
  try {
    name = userInfo().username;
  } catch {}
  return { kind: "cli", name, source: `cli@${hostname()}` };
}


/**
 * Opens the store for one command (its changes recorded in the audit log under cliActor) and
 * closes it however the command ends. A command that only reads (`reads`) never creates an SQLite
 * file: where there is none, it says where it looked.
 */
export async function withStore<T>(args: CommandArgs, fn: (store: Store) => Promise<T> | T, opts: { reads?: boolean } = {}): Promise<T> {
  if (opts.reads && !databaseOf(args)) {
    const file = join(String(args.values.data), "sluice.db");
    if (!existsSync(file)) {
      throw new Error(`there is no database in ${String(args.values.data)} (looked for ${resolve(file)}); this command only reads, and creates none. A server started with this --data creates it: ${seeCommand(args, "serve")}`);
    }
  }
  const store = await openStoreFor(args);
  try {
    return await fn(auditedStore(store, cliActor()));
  } finally {
    await store.close();
  }
}

function table(rows: Record<string, unknown>[], columns: string[]): string {
  if (rows.length === 0) return "(none)";
  const cell = (v: unknown) => (v === null || v === undefined ? "-" : String(v));
  const widths = columns.map((c) => Math.max(c.length, ...rows.map((r) => cell(r[c]).length)));
  // Numbers and amounts line up on their last digit.
  const numeric = columns.map((c) => rows.every((r) => /^(-|[−-]?\$?[\d,]+(\.\d+)?)$/.test(cell(r[c]))));
  const line = (vals: string[]) => vals.map((v, i) => (numeric[i] ? v.padStart(widths[i]!) : v.padEnd(widths[i]!))).join("  ").trimEnd();
  return [line(columns), ...rows.map((r) => line(columns.map((c) => cell(r[c]))))].join("\n");
}

export const print = (args: CommandArgs, rows: Record<string, unknown>[], columns: string[]) =>
  console.log(args.values.json ? JSON.stringify(rows, null, 2) : table(rows, columns));

export const date = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString().replace(/\.\d+Z$/, "Z"));

/**
 * A command to run next, for messages: with this command's --data when that is not the default,
 * or its shared database by the variable that names it (a URL may hold a password: never printed).
 */
export function seeCommand(args: CommandArgs, ...words: string[]): string {
  if (databaseOf(args)) return `${commandLine(...words)} --database "$SLUICE_DATABASE"`;
  const data = args.values.data;
  return commandLine(...words, ...(typeof data === "string" && data !== DATA_OPTION.default ? ["--data", data] : []));
}

export async function findAccount(store: Store, args: CommandArgs, name: string): Promise<Account> {
  const a = await store.accounts.get(name);
  if (!a) throw new UsageError(`no account named ${name} (see: ${seeCommand(args, "accounts", "list")})`);
  return a;
}

/** A store call whose refusal (a limit that makes no sense) is the user's mistake: a usage error. */
async function usage<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    if (e instanceof UsageError || (e as Error).name === "StoreUnavailableError") throw e;
    throw new UsageError((e as Error).message);
  }
}

const KEY_OPTIONS: OptionSpec[] = [
  { name: "label", type: "string", help: "A label to recognise the key by", argument: true },
  { name: "budget-usd", type: "string", help: "What the key may spend per period, in USD (none: no budget of its own; the account's credit still applies)", argument: true },
  { name: "budget-period", type: "string", help: "The budget's period: day or month (UTC), or total (default: total)", argument: true },
  { name: "expires", type: "string", help: "When the key stops working: a duration from now (90m, 12h, 30d, 2w), a date (2027-01-31: through that UTC day), a date-time (2027-01-31T12:00:00Z), or none", argument: true },
  { name: "models", type: "string", help: "The only models the key may use, as ID,ID… (of those its account may use), or none: all of them", argument: true },
];

/** The key limits a command was given (absent options: unchanged), with every model id checked against the catalog. */
async function keyLimitOptions(s: Store, args: CommandArgs): Promise<Partial<KeyLimits>> {
  const str = (n: string) => (typeof args.values[n] === "string" ? (args.values[n] as string) : undefined);
  let limits: Partial<KeyLimits>;
  try {
    limits = keyLimitsFrom({ budgetUsd: str("budget-usd"), budgetPeriod: str("budget-period"), expires: str("expires"), models: str("models") });
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  for (const m of limits.models ?? []) {
    if (!(await s.catalog.get(m))) throw new UsageError(`--models: no model ${m} in the catalog (see: ${seeCommand(args, "models", "list")})`);
  }
  return limits;
}

/** ", budget $5/month, expires …, models a,b" for a message; "" without limits. */
function describeKey(k: ApiKeyInfo): string {
  const parts = [describeBudget(k) && `budget ${describeBudget(k)}`, k.expiresAt !== null && `expires ${date(k.expiresAt)}`, k.models && `models ${k.models.join(",")}`].filter(Boolean);
  return parts.length ? `, ${parts.join(", ")}` : "";
}

const accountId = async (store: Store, args: CommandArgs, name: string) => (await findAccount(store, args, name)).id;

export const storeCommands: Command[] = [
  {
    path: ["accounts", "create"],
    usage: "NAME",
    summary: "Create an account.",
    options: [...STORE_OPTIONS],
    run: (args) =>
      withStore(args, async (s) => {
        const a = await s.accounts.create(positional(args, 0, "account NAME"));
        console.log(`created account ${a.name}`);
        return 0;
      }),
  },
  {
    path: ["accounts", "list"],
    usage: "",
    summary: "List accounts.",
    options: [...STORE_OPTIONS, JSON_OPTION],
    run: (args) =>
      withStore(args, async (s) => {
        const rows = [];
        for (const a of await s.accounts.list()) {
          rows.push({ name: a.name, model_access: a.modelAccess, priority: a.priority, keys: await s.keys.count(a.id), created: date(a.createdAt) });
        }
        print(args, rows, ["name", "model_access", "priority", "keys", "created"]);
        return 0;
      }, { reads: true }),
  },
  {
    path: ["accounts", "set"],
    usage: "NAME [--priority N] [--user-budget-usd X|none] [--user-budget-period day|month|total]",
    summary:
      "Set an account's priority (-100 to 100, default 0: on a busy model its requests are admitted before those of lower priorities, whose running requests are paused for them when memory runs out) and its budget per end user (what one `user` or `safety_identifier` of its requests may spend per period; requests that could pass it get 429 insufficient_quota). Applies to the next request.",
    options: [
      ...STORE_OPTIONS,
      { name: "priority", type: "string", help: "Whole number from -100 to 100", argument: true },
      { name: "user-budget-usd", type: "string", help: "What one end user may spend per period, in USD, or none", argument: true },
      { name: "user-budget-period", type: "string", help: "The period of the budget per end user: day or month (UTC), or total (default: month)", argument: true },
    ],
    run: (args) =>
      withStore(args, async (s) => {
        const a = await findAccount(s, args, positional(args, 0, "account NAME"));
        const given = (n: string) => (typeof args.values[n] === "string" ? (args.values[n] as string) : undefined);
        if (given("priority") === undefined && given("user-budget-usd") === undefined && given("user-budget-period") === undefined) {
          throw new UsageError("nothing to change: give --priority, --user-budget-usd or --user-budget-period");
        }
        const said: string[] = [];
        if (given("priority") !== undefined) {
          const priority = Number(given("priority"));
          try {
            await s.accounts.setPriority(a.id, priority);
          } catch (e) {
            throw new UsageError(`--priority: ${(e as Error).message}`);
          }
          said.push(`priority ${priority}`);
        }
        if (given("user-budget-usd") !== undefined || given("user-budget-period") !== undefined) {
          let usd: number | null;
          let period: BudgetPeriod;
          try {
            usd = given("user-budget-usd") !== undefined ? parseBudget(given("user-budget-usd")!) : a.userBudgetUsd;
            period = given("user-budget-period") !== undefined ? parsePeriod(given("user-budget-period")!) : (a.userBudgetPeriod ?? "month");
          } catch (e) {
            throw new UsageError((e as Error).message);
          }
          if (usd === null && given("user-budget-period") !== undefined) throw new UsageError("--user-budget-period needs a budget (--user-budget-usd)");
          await usage(() => s.accounts.setUserBudget(a.id, usd, period));
          said.push(usd === null ? "no budget per end user" : `a budget of $${usd} per end user ${period === "total" ? "in total" : `per UTC ${period}`}`);
        }
        console.log(`${a.name} now has ${said.join(" and ")}`);
        return 0;
      }),
  },
  {
    path: ["keys", "create"],
    usage: "--account NAME [--label L] [--budget-usd X] [--budget-period day|month|total] [--expires DURATION|DATE] [--models ID,ID…]",
    summary:
      "Create an API key, optionally with limits of its own: a budget (refused with 429 insufficient_quota once spent, the worst case reserved per request), an expiry (refused with 401 afterwards) and a model list (other models are not found). The key is printed once; only its hash is stored.",
    options: [...STORE_OPTIONS, accountOption("Account that owns the key"), ...KEY_OPTIONS],
    run: (args) =>
      withStore(args, async (s) => {
        const id = await accountId(s, args, requireString(args, "account"));
        const label = typeof args.values.label === "string" ? args.values.label : null;
        const limits = await keyLimitOptions(s, args);
        const { key, info } = await usage(() => s.keys.create(id, label, limits));
        console.error(`created key ${info.id} for account ${info.accountName}${describeKey(info)}; it is shown only this once:`);
        console.log(key);
        return 0;
      }),
  },
  {
    path: ["keys", "update"],
    usage: "ID [--label L] [--budget-usd X|none] [--budget-period day|month|total] [--expires DURATION|DATE|none] [--models ID,ID…|none]",
    summary: "Change an API key's label and limits; options not given stay as they are, none removes one. Applies to the key's next request on every node.",
    options: [...STORE_OPTIONS, ...KEY_OPTIONS],
    run: (args) =>
      withStore(args, async (s) => {
        const id = positional(args, 0, "key ID");
        const limits = await keyLimitOptions(s, args);
        const label = typeof args.values.label === "string" ? { label: args.values.label === "none" ? null : args.values.label } : {};
        if (Object.keys(limits).length === 0 && !("label" in label)) throw new UsageError("nothing to change: give --label, --budget-usd, --budget-period, --expires or --models");
        const info = await usage(() => s.keys.update(id, { ...limits, ...label }));
        if (!info) throw new UsageError(`no key ${id} (see: ${seeCommand(args, "keys", "list")})`);
        console.log(`updated ${info.id} of ${info.accountName}: ${describeKey(info).slice(2) || "no limits of its own"}`);
        return 0;
      }),
  },
  {
    path: ["keys", "list"],
    usage: "[--account NAME]",
    summary: "List API keys (never the keys themselves: their id and display prefix), with their limits and what they spent in their budget's period.",
    options: [...STORE_OPTIONS, JSON_OPTION, accountOption("Only this account's keys")],
    run: (args) =>
      withStore(args, async (s) => {
        const acct = typeof args.values.account === "string" ? await accountId(s, args, args.values.account) : undefined;
        const rows = [];
        for (const k of await s.keys.list(acct)) {
          rows.push({
            id: k.id,
            account: k.accountName,
            prefix: k.prefix + "…",
            label: k.label,
            budget: describeBudget(k),
            spent: k.budgetPeriod ? Number((await s.keys.spendUsd(k.id, periodStart(k.budgetPeriod))).toFixed(6)) : null,
            expires: date(k.expiresAt),
            models: k.models?.join(",") ?? null,
            created: date(k.createdAt),
            last_used: date(k.lastUsedAt),
            revoked: date(k.revokedAt),
          });
        }
        print(args, rows, ["id", "account", "prefix", "label", "budget", "spent", "expires", "models", "created", "last_used", "revoked"]);
        return 0;
      }, { reads: true }),
  },
  {
    path: ["keys", "revoke"],
    usage: "ID",
    summary: "Revoke an API key; it stops working on the next request.",
    options: [...STORE_OPTIONS],
    run: (args) =>
      withStore(args, async (s) => {
        const id = positional(args, 0, "key ID");
        if (!(await s.keys.revoke(id))) throw new UsageError(`no active key ${id} (see: ${seeCommand(args, "keys", "list")})`);
        console.log(`revoked ${id}`);
        return 0;
      }),
  },
  {
    path: ["models", "list"],
    usage: "",
    summary: "List the model catalog, including models that are disabled or failed to load.",
    options: [...STORE_OPTIONS, JSON_OPTION],
    run: (args) =>
      withStore(args, async (s) => {
        const served = new Set((await s.catalog.listServed()).map((m) => m.id));
        const rows = (await s.catalog.list()).map((m) => ({
          id: m.id,
          status: m.status,
          served: served.has(m.id) ? "yes" : "no",
          context: m.contextLength,
          "in$/M": m.inputPricePerMTok,
          "cached$/M": m.cachedInputPricePerMTok ?? m.inputPricePerMTok,
          "out$/M": m.outputPricePerMTok,
          images: m.supportsImages ? "yes" : "no",
          sampling: describeSamplingDefaults(m.samplingDefaults) || "API defaults",
          problem: m.loadError ?? (m.present ? null : "directory missing"),
          dir: m.sourceDir,
        }));
        print(args, rows, ["id", "status", "served", "context", "in$/M", "cached$/M", "out$/M", "images", "sampling", "problem", "dir"]);
        return 0;
      }, { reads: true }),
  },
  ...(["enable", "disable"] as const).map(
    (verb): Command => ({
      path: ["models", verb],
      usage: "ID",
      summary: verb === "enable" ? "Serve a model again." : "Stop serving a model (it stays in the catalog).",
      options: [...STORE_OPTIONS],
      run: (args) =>
        withStore(args, async (s) => {
          const id = positional(args, 0, "model ID");
          if (!(await s.catalog.setStatus(id, verb === "enable" ? "active" : "inactive"))) {
            throw new UsageError(`no model ${id} in the catalog (see: ${seeCommand(args, "models", "list")})`);
          }
          console.log(`${verb}d ${id}`);
          return 0;
        }),
    }),
  ),
  {
    path: ["models", "keep-alive"],
    usage: "ID DURATION|default",
    summary:
      "How long a model stays loaded once idle: -1 (always), 0, seconds, or 30s, 5m, 2h; default: its sluice.json's keep_alive, else serve --keep-alive. A running server applies it from its next idle check.",
    options: [...STORE_OPTIONS],
    run: (args) =>
      withStore(args, async (s) => {
        const id = positional(args, 0, "model ID");
        const given = positional(args, 1, "DURATION (or default)");
        let seconds: number | null = null;
        if (given !== "default") {
          try {
            seconds = keepAliveSeconds(parseKeepAlive(given));
          } catch (e) {
            throw new UsageError((e as Error).message);
          }
        }
        if (!(await s.catalog.setKeepAlive(id, seconds))) throw new UsageError(`no model ${id} in the catalog (see: ${seeCommand(args, "models", "list")})`);
        console.log(seconds === null ? `${id} keeps the default keep-alive` : `${id} stays loaded ${seconds === -1 ? "always" : `for ${describeKeepAlive(seconds * 1000)} once idle`}`);
        return 0;
      }),
  },
  ...(["grant", "revoke"] as const).map(
    (verb): Command => ({
      path: ["models", verb],
      usage: "ID --account NAME",
      summary:
        verb === "grant"
          ? "Allow an account to use a model. An account sees every model until its access is restricted; the first grant or revoke restricts it to an explicit list (starting from what it could use)."
          : "Take a model away from an account (restricting the account to an explicit list).",
      options: [...STORE_OPTIONS, accountOption("The account")],
      run: (args) =>
        withStore(args, async (s) => {
          const id = positional(args, 0, "model ID");
          const acct = await accountId(s, args, requireString(args, "account"));
          try {
            await s.catalog[verb](acct, id);
          } catch (e) {
            throw new UsageError((e as Error).message);
          }
          console.log(`${verb === "grant" ? "granted" : "revoked"} ${id} ${verb === "grant" ? "to" : "from"} ${args.values.account}; it now has: ${(await s.catalog.grants(acct)).join(", ") || "(nothing)"}`);
          return 0;
        }),
    }),
  ),
  {
    path: ["models", "allow-all"],
    usage: "--account NAME",
    summary: "Lift an account's model restriction: it sees every served model again, including new ones.",
    options: [...STORE_OPTIONS, accountOption("The account")],
    run: (args) =>
      withStore(args, async (s) => {
        await s.catalog.allowAll(await accountId(s, args, requireString(args, "account")));
        console.log(`${args.values.account} may use every served model`);
        return 0;
      }),
  },
  {
    path: ["models", "price"],
    usage: "ID --input USD --output USD [--cached-input USD|none]",
    summary:
      "Set a model's prices in USD per million input and output tokens, and optionally for prompt tokens served from the prefix cache (left as it was when not given; none: they cost the input price).",
    options: [
      ...STORE_OPTIONS,
      { name: "input", type: "string", help: "USD per million prompt tokens", argument: true },
      { name: "output", type: "string", help: "USD per million completion tokens", argument: true },
      { name: "cached-input", type: "string", help: "USD per million prompt tokens served from the prefix cache, or none", argument: true },
    ],
    run: (args) =>
      withStore(args, async (s) => {
        const id = positional(args, 0, "model ID");
        const num = (n: string) => {
          const v = Number(requireString(args, n));
          if (!Number.isFinite(v) || v < 0) throw new UsageError(`--${n} must be a number ≥ 0`);
          return v;
        };
        const cached = args.values["cached-input"];
        const cachedPrice = cached === undefined ? undefined : cached === "none" ? null : num("cached-input");
        if (!(await s.catalog.setPrices(id, num("input"), num("output"), cachedPrice))) throw new UsageError(`no model ${id} in the catalog`);
        console.log(`priced ${id}`);
        return 0;
      }),
  },
];
