// The CLI's entry imports no native addon before it has read its options: in the binary the first
// import of one unpacks the native libraries, into the default cache directory if --cache-dir has
// not been read yet (a template reader that pulled in the tokenizers addon did that once: serve
// --cache-dir then unpacked into ~/.cache). Commands load the engine only when they run.
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";

const NATIVE = new Set(["tokenizers", "onnxruntime-node", "sharp"]);

test("src/cli/main.ts reaches no native addon through its static imports", () => {
  const start = resolve(import.meta.dir, "../../src/cli/main.ts");
  const parent = new Map<string, string | null>([[start, null]]);
  const queue = [start];
  const reached: string[] = [];
  while (queue.length) {
    const file = queue.shift()!;
    const text = readFileSync(file, "utf8");
    // Static value imports and re-exports; `import type` is erased.
    for (const m of text.matchAll(/^(?:import|export)\s+(?!type\b)[^;]*?from\s+"([^"]+)"/gm)) {
      const spec = m[1]!;
      if (NATIVE.has(spec)) {
        const chain = [spec];
        for (let p: string | null = file; p; p = parent.get(p)!) chain.push(p.slice(p.indexOf("src/")));
        reached.push(chain.reverse().join(" -> "));
      } else if (spec.startsWith(".")) {
        const next = resolve(dirname(file), spec);
        if (!parent.has(next)) {
          parent.set(next, file);
          queue.push(next);
        }
      }
    }
  }
  expect(parent.size).toBeGreaterThan(10);
  expect(reached).toEqual([]);
});
