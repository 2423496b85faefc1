// A small command framework over node:util's parseArgs: every flag has an environment variable,
// every command has --help, and errors are one clear line with a non-zero exit.
import { parseArgs } from "node:util";
import { commandName } from "../invocation.ts";

export interface OptionSpec {
  name: string;
  type: "string" | "boolean";
  help: string;
  default?: string;
  /** Defaults to SLUICE_<NAME> with dashes as underscores. */
  env?: string;
}

export interface CommandArgs {
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
}

export interface Command {
  path: string[];
  summary: string;
  usage: string;
  options: OptionSpec[];
  run(args: CommandArgs): Promise<number> | number;
}

export class UsageError extends Error {}

export const envName = (o: OptionSpec) => o.env ?? `SLUICE_${o.name.toUpperCase().replace(/-/g, "_")}`;

export function commandHelp(c: Command): string {
  const lines = [`Usage: ${commandName()} ${c.path.join(" ")} ${c.usage}`.trimEnd(), "", c.summary, ""];
  if (c.options.length) {
    lines.push("Options:");
    for (const o of c.options) {
      const flag = o.type === "string" ? `--${o.name} <${o.name.split("-").pop()}>` : `--${o.name}`;
      const def = o.default !== undefined ? ` (default: ${o.default})` : "";
      lines.push(`  ${flag.padEnd(28)} ${o.help}${def} [env ${envName(o)}]`);
    }
  }
  lines.push(`  ${"--help".padEnd(28)} Show this help`);
  return lines.join("\n");
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
    throw new UsageError((e as Error).message);
  }
  parsed = {
    values: Object.fromEntries(Object.entries(parsed.values).map(([k, v]) => [k, typeof v === "string" ? restore(v) : v])),
    positionals: parsed.positionals.map(restore),
  };
  const values: CommandArgs["values"] = {};
  for (const o of c.options) {
    const given = parsed.values[o.name];
    if (given !== undefined) values[o.name] = given;
    else if (env[envName(o)] !== undefined) {
      const v = env[envName(o)]!;
      values[o.name] = o.type === "boolean" ? /^(1|true|yes|on)$/i.test(v) : v;
    } else if (o.default !== undefined) values[o.name] = o.type === "boolean" ? o.default === "true" : o.default;
  }
  return { values, positionals: parsed.positionals };
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
