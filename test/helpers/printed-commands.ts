// The commands Sluice prints for people to copy (the serve banner's indented lines, error
// messages' "see:" hints, the README's tables and shell blocks), and running one exactly as
// printed through a POSIX shell. Shared by the checkout's test and the binary's smoke test.

export interface Ran {
  code: number;
  out: string;
  err: string;
}

/** Runs one printed command line through /bin/sh in `cwd`. */
export async function runPrinted(line: string, cwd: string, env: Record<string, string>, stdin?: string): Promise<Ran> {
  const p = Bun.spawn(["/bin/sh", "-c", line], {
    cwd,
    env,
    stdin: stdin === undefined ? "ignore" : new TextEncoder().encode(stdin),
    stdout: "pipe",
    stderr: "pipe",
  });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out, err };
}

/** The commands of a serve banner: each stands alone on a line indented by two spaces. */
export function bannerCommands(banner: string, command: string): string[] {
  return banner
    .split("\n")
    .filter((l) => l.startsWith(`  ${command} `) || l.startsWith("  curl "))
    .map((l) => l.trim());
}

/** The command after "see:" or "the commands:" in an error message. */
export function hintIn(message: string): string | null {
  const m = /(?:see|the commands): ([^)\n]+)/.exec(message);
  return m ? m[1]!.trim() : null;
}

/** The serve banner: everything up to the blank line that ends it. */
export async function readBanner(stdout: ReadableStream<Uint8Array>): Promise<string> {
  const reader = stdout.getReader();
  let text = "";
  while (!/at http:\/\/\S+\/v1[\s\S]*\n\n$/.test(text)) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`serve exited before its banner:\n${text}`);
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return text;
}

/**
 * Every command a Markdown text gives to run, in order: its code spans (tables and prose) and the
 * lines of its `sh` blocks (joining `\` continuations) that start with `prefix`, `curl` or `kill`.
 */
export function markdownCommands(markdown: string, prefix: string): string[] {
  const starts = (s: string) => s.startsWith(`${prefix} `) || s.startsWith("curl ") || s.startsWith("kill ");
  const out: string[] = [];
  let inSh = false;
  let pending = "";
  for (const line of markdown.split("\n")) {
    if (line.startsWith("```")) {
      inSh = !inSh && line.trim() === "```sh";
      continue;
    }
    if (inSh) {
      const joined = pending + line.replace(/\s+#.*$/, "");
      if (joined.endsWith("\\")) {
        pending = joined.slice(0, -1).trimEnd() + " ";
        continue;
      }
      pending = "";
      if (starts(joined.trim())) out.push(joined.trim().replace(/\s+/g, " "));
    } else {
      for (const m of line.matchAll(/`([^`]+)`/g)) if (starts(m[1]!)) out.push(m[1]!);
    }
  }
  return out;
}
