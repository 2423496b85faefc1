#!/usr/bin/env bun
// `sluice`: the one entry point, in development (`bun src/cli/main.ts …`) and in the binary.
import { commandName } from "../invocation.ts";
import { VERSION } from "../version.ts";
import { storeCommands } from "./commands.ts";
import { commandHelp, parseCommand, UsageError, type Command } from "./framework.ts";
import { serveCommand } from "./serve.ts";
import { extraCommands } from "./extra.ts";
import { workspaceCommands } from "./workspace-commands.ts";
import { limitsCommands } from "./limits-commands.ts";
import { residencyCommands } from "./residency-commands.ts";
import { pullCommand } from "./pull-command.ts";
import { keepOrtTelemetryOff } from "../engine/runtime/ort-telemetry.ts";

const COMMANDS: Command[] = [serveCommand, ...storeCommands, ...extraCommands, pullCommand, ...workspaceCommands, ...limitsCommands, ...residencyCommands];

/** A summary's first sentence, ending with its full stop. */
const firstSentence = (summary: string) => summary.split(". ")[0]!.replace(/\.?$/, ".");

/** Widest usage column before a summary moves to the line below it. */
const USAGE_COLUMN = 56;

/** Command lines and their summaries in two columns; a command line too long for the first puts its summary on the next line, in the same column. */
export function commandTable(commands: Command[], summary: (c: Command) => string): string[] {
  const name = commandName();
  const usages = commands.map((c) => `${name} ${c.path.join(" ")} ${c.usage}`.trimEnd());
  const width = Math.min(USAGE_COLUMN + name.length - "sluice".length, Math.max(...usages.map((u) => u.length)));
  return commands.flatMap((c, i) => {
    const u = usages[i]!;
    return u.length <= width ? [`  ${u.padEnd(width)}  ${summary(c)}`] : [`  ${u}`, `  ${" ".repeat(width)}  ${summary(c)}`];
  });
}

function overview(): string {
  const lines = [`sluice ${VERSION}: an OpenAI-compatible gateway that serves ONNX language models`, "", "Commands:", ...commandTable(COMMANDS, (c) => firstSentence(c.summary))];
  lines.push("", `A command's options, and the settings it also reads from SLUICE_<OPTION>: ${commandName()} COMMAND --help`);
  return lines.join("\n");
}

/** The commands a group of words names (`models`, `models import`): those whose path goes on from them. */
const groupOf = (words: string[]) => (words.length ? COMMANDS.filter((c) => c.path.length > words.length && words.every((w, i) => c.path[i] === w)) : []);

export async function main(argv: string[]): Promise<number> {
  // First, while this is the only thread: every command that runs a model (serve, doctor) sees it.
  keepOrtTelemetryOff();
  if (argv.length === 0 || argv[0] === "--help" || argv[0] === "-h" || argv[0] === "help") {
    console.log(overview());
    return 0;
  }
  if (argv[0] === "--version" || argv[0] === "-v" || argv[0] === "version") {
    console.log(`sluice ${VERSION}`);
    return 0;
  }
  const command = COMMANDS.filter((c) => c.path.every((p, i) => argv[i] === p)).sort(
    (a, b) => b.path.length - a.path.length,
  )[0];
  if (!command) {
    const words = argv.filter((a) => a !== "--help" && a !== "-h");
    const group = groupOf(words);
    if (group.length) {
      const help = words.length < argv.length;
      (help ? console.log : console.error)([...commandTable(group, (c) => c.summary), "", `A command's options: ${commandName()} ${words.join(" ")} COMMAND --help`].join("\n"));
      return help ? 0 : 2;
    }
    console.error(`sluice: unknown command '${argv.join(" ")}'; the commands: ${commandName()} --help`);
    return 2;
  }
  const rest = argv.slice(command.path.length);
  if (rest.includes("--help") || rest.includes("-h")) {
    console.log(commandHelp(command));
    return 0;
  }
  try {
    const args = parseCommand(command, rest, process.env);
    for (const note of args.ignored ?? []) console.error(`sluice ${command.path.join(" ")}: ${note}`);
    return await command.run(args);
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`sluice ${command.path.join(" ")}: ${e.message}`);
      return 2;
    }
    console.error(`sluice ${command.path.join(" ")}: ${(e as Error).message}`);
    return 1;
  }
}

if (import.meta.main) {
  const code = await main(process.argv.slice(2));
  process.exit(code);
}
