// The protocol module sits below every room: structured/ and vision/ take chat messages, tools and
// response formats from it, never from the engine they serve, and it imports nothing of ours.
import { describe, expect, test } from "bun:test";
import { Glob } from "bun";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";

const SRC = resolve(import.meta.dir, "../../src");

function importsOf(room: string): { file: string; spec: string }[] {
  const out: { file: string; spec: string }[] = [];
  for (const file of new Glob(`${room}/**/*.ts`).scanSync(SRC)) {
    const text = readFileSync(join(SRC, file), "utf8");
    for (const m of text.matchAll(/(?:import|export)[^;]*?from\s+"([^"]+)"/g)) out.push({ file, spec: m[1]! });
    for (const m of text.matchAll(/import\(\s*"([^"]+)"\s*\)/g)) out.push({ file, spec: m[1]! });
  }
  return out;
}

describe("the protocol module's place", () => {
  test("structured/ and vision/ import nothing from engine/", () => {
    const upward = [...importsOf("structured"), ...importsOf("vision")].filter((i) => /(^|\/)engine\//.test(i.spec));
    expect(upward).toEqual([]);
  });

  test("protocol/ imports no room", () => {
    const files = importsOf("protocol");
    expect(files.filter((i) => i.spec.startsWith("."))).toEqual([]);
  });

  test("the chat types the engine names are the protocol's", async () => {
    const engineTypes = readFileSync(join(SRC, "engine/types.ts"), "utf8");
    expect(engineTypes).toContain('from "../protocol/chat.ts"');
    expect(engineTypes).not.toMatch(/export interface ChatMessage\b/);
  });
});
