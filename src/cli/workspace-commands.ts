// Operator commands for the account workspace: users (who signs in) and billing (plans, credit).
import { EMAIL, MIN_PASSWORD_LENGTH, type Plan, type Store, type UserRole } from "../store/index.ts";
import { usd, usdColumn } from "../format-money.ts";
import { accountOption, findAccount, JSON_OPTION, print, seeCommand, STORE_OPTIONS, withStore } from "./commands.ts";
import { positional, requireString, UsageError, type Command, type CommandArgs, type OptionSpec } from "./framework.ts";
import { readHiddenLine, stdinIsTerminal } from "./prompt.ts";

const PASSWORD_STDIN: OptionSpec = {
  name: "password-stdin",
  type: "boolean",
  help: "Read the password from standard input, asking for it (twice, not echoed) at a terminal (else from SLUICE_PASSWORD; never from the command line)",
};


async function readPassword(args: CommandArgs, email: string): Promise<string> {
  if (args.values["password-stdin"] === true && stdinIsTerminal()) {
    const first = await readHiddenLine(`Password for ${email} (at least ${MIN_PASSWORD_LENGTH} characters): `);
    if ((await readHiddenLine("The same password again: ")) !== first) throw new UsageError("the two passwords differ; nothing was changed");
    return first;
  }
  if (args.values["password-stdin"] === true) {
    const text = await new Response(Bun.stdin.stream()).text();
    return text.replace(/\r?\n$/, "");
  }
  const env = process.env.SLUICE_PASSWORD;
  if (env) return env;
  throw new UsageError("give the password on standard input with --password-stdin, or in SLUICE_PASSWORD");
}

async function user(store: Store, args: CommandArgs, email: string) {
  const u = await store.users.getByEmail(email);
  if (!u) throw new UsageError(`no user with email ${email} (see: ${seeCommand(args, "users", "list")})`);
  return u;
}

const date = (ms: number) => new Date(ms).toISOString().replace(/\.\d+Z$/, "Z");

export const workspaceCommands: Command[] = [
  {
    path: ["users", "create"],
    usage: "EMAIL --account NAME [--operator] [--password-stdin]",
    summary: "Create a workspace user (email and password, argon2id-hashed) in an account. Operators also see the admin pages.",
    options: [...STORE_OPTIONS, accountOption("The account the user belongs to"), { name: "operator", type: "boolean", help: "Make the user an operator" }, PASSWORD_STDIN],
    run: (args) =>
      withStore(args, async (s) => {
        const email = positional(args, 0, "EMAIL");
        const a = await findAccount(s, args, requireString(args, "account"));
        // Refused before a password is asked for, not after it was typed twice.
        if (!EMAIL.test(email)) throw new UsageError(`give the user's email address, not ${JSON.stringify(email)}`);
        if (await s.users.getByEmail(email)) throw new UsageError(`a user with email ${email} already exists (see: ${seeCommand(args, "users", "list")})`);
        const role: UserRole = args.values.operator === true ? "operator" : "member";
        try {
          const u = await s.users.create({ accountId: a.id, email, password: await readPassword(args, email), role });
          console.log(`created ${u.role} ${u.email} in account ${u.accountName}`);
        } catch (e) {
          if (e instanceof UsageError) throw e;
          throw new UsageError((e as Error).message);
        }
        return 0;
      }),
  },
  {
    path: ["users", "list"],
    usage: "[--account NAME]",
    summary: "List workspace users.",
    options: [...STORE_OPTIONS, accountOption("Only this account's users"), JSON_OPTION],
    run: (args) =>
      withStore(args, async (s) => {
        const id = typeof args.values.account === "string" ? (await findAccount(s, args, args.values.account)).id : undefined;
        const rows = (await s.users.list(id)).map((u) => ({ email: u.email, account: u.accountName, role: u.role, created: date(u.createdAt) }));
        print(args, rows, ["email", "account", "role", "created"]);
        return 0;
      }, { reads: true }),
  },
  {
    path: ["users", "password"],
    usage: "EMAIL [--password-stdin]",
    summary: "Set a user's password; the user's sessions end.",
    options: [...STORE_OPTIONS, PASSWORD_STDIN],
    run: (args) =>
      withStore(args, async (s) => {
        const u = await user(s, args, positional(args, 0, "EMAIL"));
        try {
          await s.users.setPassword(u.id, await readPassword(args, u.email));
        } catch (e) {
          if (e instanceof UsageError) throw e;
          throw new UsageError((e as Error).message);
        }
        console.log(`set the password of ${u.email}`);
        return 0;
      }),
  },
  {
    path: ["users", "remove"],
    usage: "EMAIL",
    summary: "Remove a workspace user and end its sessions (the account and its keys stay).",
    options: [...STORE_OPTIONS],
    run: (args) =>
      withStore(args, async (s) => {
        const u = await user(s, args, positional(args, 0, "EMAIL"));
        await s.users.remove(u.id);
        console.log(`removed ${u.email}`);
        return 0;
      }),
  },
  {
    path: ["billing", "topup"],
    usage: "ACCOUNT --usd AMOUNT [--note TEXT]",
    summary: "Add credit to an account.",
    options: [...STORE_OPTIONS, { name: "usd", type: "string", help: "Amount in USD", argument: true }, { name: "note", type: "string", help: "Shown in the account's billing history", argument: true }],
    run: (args) =>
      withStore(args, async (s) => {
        const a = await findAccount(s, args, positional(args, 0, "ACCOUNT"));
        const amount = Number(requireString(args, "usd"));
        if (!Number.isFinite(amount) || amount <= 0) throw new UsageError("--usd must be a positive number");
        await s.billing.topUp(a.id, amount, typeof args.values.note === "string" ? args.values.note : "top-up by the operator");
        console.log(`added ${usd(amount)} to ${a.name}; balance ${usd(await s.billing.balanceUsd(a.id))}`);
        return 0;
      }),
  },
  {
    path: ["billing", "plan"],
    usage: "ACCOUNT prepaid|unlimited",
    summary: "Set an account's plan: prepaid accounts are refused (429 insufficient_quota) once their credit is used up; unlimited ones never.",
    options: [...STORE_OPTIONS],
    run: (args) =>
      withStore(args, async (s) => {
        const a = await findAccount(s, args, positional(args, 0, "ACCOUNT"));
        const plan = positional(args, 1, "PLAN") as Plan;
        if (plan !== "prepaid" && plan !== "unlimited") throw new UsageError("the plan is prepaid or unlimited");
        await s.billing.setPlan(a.id, plan);
        console.log(`${a.name} is on the ${plan} plan`);
        return 0;
      }),
  },
  {
    path: ["billing", "show"],
    usage: "ACCOUNT",
    summary: "Show an account's plan, balance and recent charges and top-ups.",
    options: [...STORE_OPTIONS, JSON_OPTION],
    run: (args) =>
      withStore(args, async (s) => {
        const a = await findAccount(s, args, positional(args, 0, "ACCOUNT"));
        const out = { account: a.name, plan: await s.billing.plan(a.id), balance_usd: await s.billing.balanceUsd(a.id), history: await s.billing.history(a.id, { limit: 20 }) };
        if (args.values.json) console.log(JSON.stringify(out, null, 2));
        else {
          // One number of decimals for the balance and every row, so that they read alike and add up.
          const money = usdColumn([out.balance_usd, ...out.history.map((e) => e.amountUsd)]);
          console.log(`${out.account}: ${out.plan} plan, balance ${money(out.balance_usd)}`);
          if (out.history.length) {
            console.log(`last ${out.history.length} charges and top-ups (UTC):`);
            print(args, out.history.map((e) => ({ time: date(e.createdAt), type: e.kind === "topup" ? "top-up" : "charge", amount: money(e.amountUsd), details: e.modelId ?? e.note ?? "" })), ["time", "type", "amount", "details"]);
          }
        }
        return 0;
      }, { reads: true }),
  },
];
