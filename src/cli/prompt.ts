// Reading a password typed at a terminal: nothing is echoed, Enter ends it, Ctrl-C cancels.
import { UsageError } from "./framework.ts";

export const stdinIsTerminal = () => process.stdin.isTTY === true;

/** One line from the terminal without echo, with the prompt on stderr (stdout stays the command's). */
export function readHiddenLine(prompt: string): Promise<string> {
  const stdin = process.stdin;
  process.stderr.write(prompt);
  stdin.setRawMode(true);
  stdin.resume();
  return new Promise((resolve, reject) => {
    let value = "";
    const finish = (error: Error | null) => {
      stdin.off("data", onData);
      stdin.setRawMode(false);
      stdin.pause();
      process.stderr.write("\n");
      if (error) reject(error);
      else resolve(value);
    };
    const onData = (chunk: Buffer | string) => {
      for (const ch of typeof chunk === "string" ? chunk : chunk.toString("utf8")) {
        if (ch === "\r" || ch === "\n" || ch === "\u0004") return finish(null);
        if (ch === "\u0003") return finish(new UsageError("cancelled"));
        if (ch === "\u007f" || ch === "\b") value = [...value].slice(0, -1).join("");
        else if (ch >= " ") value += ch;
      }
    };
    stdin.on("data", onData);
  });
}
