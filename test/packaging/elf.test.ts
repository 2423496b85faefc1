// Reading a shared library's needs from its ELF headers (src/packaging/elf.ts), on the system's
// own libraries and on files that are not libraries.
import { afterEach, expect, test } from "bun:test";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { containsCString, readElfDynamic } from "../../src/packaging/elf.ts";
import { tempDir } from "../helpers/paths.ts";

const LIBM = ["/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6", "/lib64/libm.so.6"].find((p) => existsSync(p));
const dirs: { remove(): void }[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) d.remove();
});

test.skipIf(!LIBM)("the C library's libm: its soname and the libraries it NEEDs", () => {
  const elf = readElfDynamic(LIBM!);
  expect(elf.soname).toBe("libm.so.6");
  expect(elf.needed).toContain("libc.so.6");
});

test.skipIf(!LIBM)("a library for another processor is refused by name", () => {
  expect(() => readElfDynamic(LIBM!, "arm64")).toThrow("built for another processor (ELF machine 62, this is arm64)");
});

test("files that are not shared libraries say why", () => {
  const d = tempDir("sluice-elf-");
  dirs.push(d);
  writeFileSync(join(d.path, "empty.so"), "");
  writeFileSync(join(d.path, "text.so"), "x".repeat(100));
  expect(() => readElfDynamic(join(d.path, "empty.so"))).toThrow("not a shared library (file too short)");
  expect(() => readElfDynamic(join(d.path, "text.so"))).toThrow("not a shared library (no ELF header)");
});

test("a NUL-terminated string is found wherever it lies, across the chunks it is read in too", () => {
  const d = tempDir("sluice-elf-");
  dirs.push(d);
  const file = join(d.path, "blob");
  for (const at of [0, 1, 5, 7, 8, 9, 15, 16, 30]) {
    const bytes = Buffer.alloc(40, 0x41);
    Buffer.from("\0" + "1.29.0" + "\0").copy(bytes, at);
    writeFileSync(file, bytes);
    expect(containsCString(file, "1.29.0", 8)).toBe(true);
    expect(containsCString(file, "1.30.0", 8)).toBe(false);
    // Only as a string of its own: not as the tail of a longer one.
    expect(containsCString(file, "29.0", 8)).toBe(false);
  }
});
