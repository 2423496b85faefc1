// How Sluice names itself in the commands it prints: as the operator would type it where it runs.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { chmodSync, copyFileSync, mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { displayCommand, shellQuote } from "../../src/invocation.ts";
import { BUN, REPO, tempDir } from "../helpers/paths.ts";

let dir: ReturnType<typeof tempDir>;
let exe: string;

beforeAll(() => {
  dir = tempDir("sluice-invocation-");
  mkdirSync(join(dir.path, "dist"));
  mkdirSync(join(dir.path, "work"));
  mkdirSync(join(dir.path, "bin"));
  mkdirSync(join(dir.path, "other-bin"));
  exe = join(dir.path, "dist", "sluice");
  writeFileSync(exe, "#!/bin/sh\n");
  chmodSync(exe, 0o755);
  symlinkSync(exe, join(dir.path, "bin", "sluice"));
  writeFileSync(join(dir.path, "other-bin", "sluice"), "#!/bin/sh\n");
  chmodSync(join(dir.path, "other-bin", "sluice"), 0o755);
});
afterAll(() => dir.remove());

test("below the working directory: ./path, however it was typed", () => {
  expect(displayCommand(exe, "dist/sluice", dir.path, "/usr/bin")).toBe("./dist/sluice");
  expect(displayCommand(exe, exe, dir.path, "/usr/bin")).toBe("./dist/sluice");
  expect(displayCommand(exe, "./sluice", join(dir.path, "dist"), "/usr/bin")).toBe("./sluice");
  // The checkout's launcher, found by its file (nothing typed).
  expect(displayCommand(exe, null, join(dir.path, "dist"), "/usr/bin")).toBe("./sluice");
});

test("elsewhere: the relative path it was typed as, else the absolute path", () => {
  const work = join(dir.path, "work");
  expect(displayCommand(exe, "../dist/sluice", work, "/usr/bin")).toBe("../dist/sluice");
  expect(displayCommand(exe, exe, work, "/usr/bin")).toBe(exe);
  expect(displayCommand(exe, null, work, "/usr/bin")).toBe(exe);
  // A typed name that leads elsewhere from here is not trusted.
  expect(displayCommand(exe, "./sluice", work, "/usr/bin")).toBe(exe);
});

test("on PATH: the bare name, only when PATH finds this same file under it", () => {
  const bin = join(dir.path, "bin");
  expect(displayCommand(exe, "sluice", join(dir.path, "work"), bin)).toBe("sluice");
  expect(displayCommand(exe, exe, join(dir.path, "work"), `/usr/bin:${bin}`)).toBe("sluice");
  const other = join(dir.path, "other-bin");
  expect(displayCommand(exe, "sluice", join(dir.path, "work"), `${other}:${bin}`)).toBe(exe);
});

test("shell quoting: plain words stay, others are single-quoted", () => {
  expect(shellQuote("./sluice")).toBe("./sluice");
  expect(shellQuote("/srv/my data")).toBe("'/srv/my data'");
  expect(shellQuote("it's")).toBe("'it'\\''s'");
  const r = Bun.spawnSync(["/bin/sh", "-c", `printf %s ${shellQuote("a b'c$d")}`]);
  expect(r.stdout.toString()).toBe("a b'c$d");
});

test("the checkout's launcher installs Bun and the dependencies with make when absent, then runs main.ts with $0", () => {
  const root = join(dir.path, "checkout");
  mkdirSync(join(root, "src", "cli"), { recursive: true });
  copyFileSync(join(REPO, "sluice"), join(root, "sluice"));
  chmodSync(join(root, "sluice"), 0o755);
  // A stand-in for the Makefile's deps target: links this Bun where the real one installs it.
  writeFileSync(
    join(root, "Makefile"),
    `deps:\n\t@echo installing\n\tmkdir -p .tools/node_modules/.bin node_modules\n\tln -sf ${BUN} .tools/node_modules/.bin/bun\n\ttouch node_modules/.sluice-deps\n`,
  );
  writeFileSync(join(root, "src", "cli", "main.ts"), "console.log(JSON.stringify({ args: process.argv.slice(2), launcher: process.env.SLUICE_LAUNCHER }));\n");
  const run = () => Bun.spawnSync(["/bin/sh", "-c", "./sluice keys 'a b'"], { cwd: root, env: { PATH: process.env.PATH ?? "/usr/bin:/bin" } });
  const first = run();
  expect(first.exitCode).toBe(0);
  // make's output goes to stderr: stdout is the command's alone.
  expect(JSON.parse(first.stdout.toString())).toEqual({ args: ["keys", "a b"], launcher: "./sluice" });
  expect(first.stderr.toString()).toContain("installing");
  const second = run();
  expect(JSON.parse(second.stdout.toString())).toEqual({ args: ["keys", "a b"], launcher: "./sluice" });
  expect(second.stderr.toString()).toBe("");
});
