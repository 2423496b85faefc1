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
import { governanceCommands } from "./governance-commands.ts";
import { keepOrtTelemetryOff } from "../engine/runtime/ort-telemetry.ts";

const COMMANDS: Command[] = [serveCommand, ...storeCommands, ...extraCommands, pullCommand, ...workspaceCommands, ...limitsCommands, ...residencyCommands, ...governanceCommands];

function overview(): string {
  const lines = [`sluice ${VERSION}: an OpenAI-compatible gateway that serves ONNX language models`, "", "Commands:"];
  const name = commandName();
  for (const c of COMMANDS) lines.push(`  ${`${name} ${c.path.join(" ")} ${c.usage}`.padEnd(52 + name.length - "sluice".length)} ${c.summary.split(". ")[0]}`);
  lines.push("", `A command's options (each also read from SLUICE_<OPTION>): ${name} COMMAND --help`);
  return lines.join("\n");
}

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
    const group = COMMANDS.filter((c) => c.path[0] === argv[0]);
    if (group.length && (argv.length === 1 || argv.includes("--help"))) {
      console.log(group.map((c) => `${commandName()} ${c.path.join(" ")} ${c.usage}\n    ${c.summary}`).join("\n"));
      return argv.length === 1 ? 2 : 0;
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
    return await command.run(parseCommand(command, rest, process.env));
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
