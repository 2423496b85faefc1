// A small command framework over node:util's parseArgs: every command has --help, errors are one
// clear line with a non-zero exit, and settings also come from the environment by one rule:
// `--some-option` reads SLUICE_SOME_OPTION. Only settings do (where the store is, how serve runs):
// switches (`--operator`, `--password-stdin`, `--json`, …) and a command's arguments (the account,
// key, amount or model it acts on) are given on the command line only, so that a variable left in
// a shell can neither widen access nor change what a command does to whom. A setting that a
// standard defines a variable for (OpenTelemetry's OTEL_*) reads that one instead.
import { parseArgs } from "node:util";
import { commandName } from "../invocation.ts";

export interface OptionSpec {
  name: string;
  type: "string" | "boolean";
  help: string;
  default?: string;
  /** What this one command acts on (an account, a key, an amount, a model id): command line only, as every switch is. */
  argument?: boolean;
  /**
   * A standard variable another specification defines for this setting (OpenTelemetry's
   * OTEL_EXPORTER_OTLP_ENDPOINT …), read instead of SLUICE_<OPTION> so a deployment configured the
   * standard way needs nothing of ours.
   */
  env?: string;
}

export interface CommandArgs {
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
  /** Environment variables that were set but are not read, each with why (printed as warnings). */
  ignored?: string[];
}

export interface Command {
  path: string[];
  summary: string;
  usage: string;
  options: OptionSpec[];
  run(args: CommandArgs): Promise<number> | number;
}

export class UsageError extends Error {}

/** SLUICE_<NAME> with dashes as underscores. */
const variableOf = (o: OptionSpec) => `SLUICE_${o.name.toUpperCase().replace(/-/g, "_")}`;

/** The environment variable a setting reads; null for switches and arguments (command line only). */
export const envName = (o: OptionSpec): string | null => (o.type === "boolean" || o.argument ? null : (o.env ?? variableOf(o)));

/** Names this installation read once, now retired: set, they would otherwise be ignored without a word. */
const RETIRED: Record<string, { option: string; now?: string }> = {
  SLUICE_DATABASE_URL: { option: "database", now: "SLUICE_DATABASE" },
  SLUICE_PULL_STALL_SECONDS: { option: "stall-seconds", now: "SLUICE_STALL_SECONDS" },
  SLUICE_PULL_REVISION: { option: "revision" },
  SLUICE_PULL_DTYPE: { option: "dtype" },
  SLUICE_PULL_ID: { option: "id" },
  SLUICE_PULL_SUBFOLDER: { option: "subfolder" },
  SLUICE_LIMIT_RPM: { option: "rpm" },
  SLUICE_LIMIT_TPM: { option: "tpm" },
  SLUICE_LIMIT_CONCURRENT: { option: "concurrent" },
};

export function commandHelp(c: Command): string {
  const lines = [`Usage: ${commandName()} ${c.path.join(" ")} ${c.usage}`.trimEnd(), "", c.summary, ""];
  const flags = c.options.map((o) => (o.type === "string" ? `--${o.name} ${o.name.split("-").pop()!.toUpperCase()}` : `--${o.name}`));
  const width = Math.max("--help".length, ...flags.map((f) => f.length));
  if (c.options.length) {
    lines.push("Options:");
    c.options.forEach((o, i) => {
      const def = o.default !== undefined ? ` (default: ${o.default})` : "";
      const env = envName(o);
      lines.push(`  ${flags[i]!.padEnd(width)}  ${o.help}${def}${env ? ` [env ${env}]` : ""}`);
    });
  }
  lines.push(`  ${"--help".padEnd(width)}  Show this help`);
  const variables = c.options.map(envName).filter((v): v is string => v !== null);
  lines.push(
    "",
    variables.length
      ? `Environment: ${variables.join(", ")} (each read when its option is not given); every other option is given on the command line only.`
      : "Environment: none; every option is given on the command line only.",
  );
  return lines.join("\n");
}

/** parseArgs's errors, reworded: its unknown-option message ends on an unbalanced quote and suggests `--`. */
function parseError(c: Command, e: Error & { code?: string }): string {
  const see = `(see: ${commandName()} ${c.path.join(" ")} --help)`;
  const option = /'(-[^' ]*)/.exec(e.message)?.[1];
  if (e.code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" && option) return `unknown option ${option} ${see}`;
  if (e.code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE" && option) {
    return /does not take/.test(e.message) ? `${option} is a switch and takes no value ${see}` : `${option} needs a value ${see}`;
  }
  return `${e.message} ${see}`;
}

export function parseCommand(c: Command, argv: string[], env: Record<string, string | undefined>): CommandArgs {
  const options: Record<string, { type: "string" | "boolean" }> = {};
  for (const o of c.options) options[o.name] = { type: o.type };
  // Negative numbers are values, not flags (`models keep-alive ID -1`, `--priority -5`): parseArgs
  // would read them as short options, so they pass through it under a stand-in.
  const negative = /^-\d+(\.\d+)?$/;
  const standIn = (i: number) => `\u0000negative${i}`;
  const numbers: string[] = [];
  const args = argv.map((a) => {
    if (!negative.test(a)) return a;
    numbers.push(a);
    return standIn(numbers.length - 1);
  });
  const restore = (v: string) => (v.startsWith("\u0000negative") ? numbers[Number(v.slice("\u0000negative".length))]! : v);
  let parsed;
  try {
    parsed = parseArgs({ args, options, allowPositionals: true, strict: true });
  } catch (e) {
    throw new UsageError(parseError(c, e as Error & { code?: string }));
  }
  parsed = {
    values: Object.fromEntries(Object.entries(parsed.values).map(([k, v]) => [k, typeof v === "string" ? restore(v) : v])),
    positionals: parsed.positionals.map(restore),
  };
  const values: CommandArgs["values"] = {};
  const ignored: string[] = [];
  for (const o of c.options) {
    const given = parsed.values[o.name];
    const name = envName(o);
    if (name === null && env[variableOf(o)] !== undefined) ignored.push(`${variableOf(o)} is not read: --${o.name} is given on the command line only`);
    if (given !== undefined) values[o.name] = given;
    else if (name !== null && env[name] !== undefined) values[o.name] = env[name];
    else if (o.default !== undefined) values[o.name] = o.type === "boolean" ? o.default === "true" : o.default;
  }
  for (const [old, r] of Object.entries(RETIRED)) {
    const o = c.options.find((x) => x.name === r.option);
    if (!o || env[old] === undefined) continue;
    // A retired name that chose where a command acts (the database) must not be dropped quietly.
    if (r.now && parsed.values[o.name] === undefined && env[r.now] === undefined) throw new UsageError(`${old} is no longer read: name it ${r.now} (every setting reads SLUICE_<OPTION>), or give --${o.name}`);
    ignored.push(`${old} is no longer read: ${r.now ? `it is ${r.now} now` : `--${o.name} is given on the command line only`}`);
  }
  refusePlaceholders(c, values, parsed.positionals);
  return { values, positionals: parsed.positionals, ignored };
}

/** Words in CAPITALS that the README and the usages print for the operator to replace. */
const PLACEHOLDERS = ["NAME", "MODEL", "KEY_ID", "EMAIL", "LABEL", "USD", "N", "DIR", "REPO", "ID"];

/**
 * A command pasted with a placeholder left in (`--label LABEL`) is refused as every other one is
 * (`--account NAME` finds no account NAME), instead of storing the word.
 */
function refusePlaceholders(c: Command, values: CommandArgs["values"], positionals: string[]): void {
  const words = new Set([...PLACEHOLDERS, ...(c.usage.match(/\b[A-Z][A-Z_]*\b/g) ?? [])]);
  const given = [
    ...c.options.filter((o) => o.argument && typeof values[o.name] === "string").map((o) => [`--${o.name} ${values[o.name]}`, values[o.name] as string]),
    ...positionals.map((p) => [p, p]),
  ];
  for (const [where, value] of given) {
    if (words.has(value!)) throw new UsageError(`${where}: ${value} is a placeholder; replace the words in CAPITALS with your own values`);
  }
}

export function requireString(args: CommandArgs, name: string): string {
  const v = args.values[name];
  if (typeof v !== "string" || v === "") throw new UsageError(`--${name} is required`);
  return v;
}

export function positional(args: CommandArgs, index: number, what: string): string {
  const v = args.positionals[index];
  if (v === undefined) throw new UsageError(`missing ${what}`);
  return v;
}
