// The intra-op thread count chosen when none is configured: one for small decoders (their
// operators are too short to split), ONNX Runtime's default once the weights are large.
import { afterAll, expect, test } from "bun:test";
import { mkdirSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { intraOpThreads, isSmallModel } from "../../../src/engine/runtime/decoder.ts";
import { tempDir } from "../../helpers/paths.ts";

const root = tempDir("sluice-threads-");
afterAll(() => root.remove());

test("small graphs get one thread, large ones (external data counted) the default, a configured count wins", () => {
  const small = join(root.path, "small", "onnx");
  mkdirSync(small, { recursive: true });
  writeFileSync(join(small, "model.onnx"), new Uint8Array(1000));
  expect(intraOpThreads(0, isSmallModel(join(small, "model.onnx")))).toBe(1);
  expect(intraOpThreads(3, isSmallModel(join(small, "model.onnx")))).toBe(3);

  const large = join(root.path, "large", "onnx");
  mkdirSync(large, { recursive: true });
  writeFileSync(join(large, "model.onnx"), new Uint8Array(1000));
  writeFileSync(join(large, "model.onnx_data"), "");
  truncateSync(join(large, "model.onnx_data"), 32 * 2 ** 20);
  // Another graph's data in the same folder does not count.
  writeFileSync(join(large, "embed_tokens.onnx"), "");
  truncateSync(join(large, "embed_tokens.onnx"), 64 * 2 ** 20);
  expect(intraOpThreads(0, isSmallModel(join(large, "model.onnx")))).toBe(0);
  expect(intraOpThreads(0, isSmallModel(join(large, "embed_tokens.onnx")))).toBe(0);
  truncateSync(join(large, "model.onnx_data"), 1000);
  expect(intraOpThreads(0, isSmallModel(join(large, "model.onnx")))).toBe(1);
});
