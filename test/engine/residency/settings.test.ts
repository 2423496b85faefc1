// How operators write residency settings, the default memory budget from the device, and what a
// model directory is estimated to take.
import { expect, test } from "bun:test";
import { totalmem } from "node:os";
import { join } from "node:path";
import { deviceMemory, memoryBudgetBytes } from "../../../src/engine/residency/device-memory.ts";
import { estimateFootprint, kvGrant } from "../../../src/engine/residency/footprint.ts";
import { describeKeepAlive, keepAliveSeconds, parseKeepAlive, parseMemorySize, PINNED } from "../../../src/engine/residency/settings.ts";
import { cudaDeviceMemoryBytes } from "../../../src/packaging/cuda.ts";
import { syntheticModel, tinyModelsRoot } from "../../helpers/models.ts";

test("keep-alive: -1 pins, 0, seconds, and durations with a unit; anything else is refused naming the forms", () => {
  expect(parseKeepAlive("-1")).toBe(PINNED);
  expect(parseKeepAlive(-1)).toBe(PINNED);
  expect(parseKeepAlive("0")).toBe(0);
  expect(parseKeepAlive(90)).toBe(90_000);
  expect(parseKeepAlive("500ms")).toBe(500);
  expect(parseKeepAlive("30s")).toBe(30_000);
  expect(parseKeepAlive("5m")).toBe(300_000);
  expect(parseKeepAlive("1.5h")).toBe(5_400_000);
  for (const bad of ["soon", "-2", "5 minutes", "", "1d"]) expect(() => parseKeepAlive(bad)).toThrow(/30s, 5m, 2h/);
  expect(keepAliveSeconds(500)).toBe(1);
  expect(keepAliveSeconds(PINNED)).toBe(PINNED);
  expect([describeKeepAlive(PINNED), describeKeepAlive(300_000), describeKeepAlive(7_200_000), describeKeepAlive(1500)]).toEqual(["always", "5 min", "2 h", "1500 ms"]);
});

test("memory sizes: MiB by default, binary units, or a share of the device", () => {
  expect(parseMemorySize("4096")).toEqual({ bytes: 4096 * 2 ** 20 });
  expect(parseMemorySize("24G")).toEqual({ bytes: 24 * 2 ** 30 });
  expect(parseMemorySize("512MiB")).toEqual({ bytes: 512 * 2 ** 20 });
  expect(parseMemorySize("1.5gb")).toEqual({ bytes: 1.5 * 2 ** 30 });
  expect(parseMemorySize("80%")).toEqual({ fraction: 0.8 });
  for (const bad of ["0", "150%", "lots", "-1G"]) expect(() => parseMemorySize(bad)).toThrow(/share of the device/);
});

test("the default budget: 90% of the GPU's memory when CUDA runs and it can be read, else 75% of RAM", () => {
  const gpu = deviceMemory(true, () => 24 * 2 ** 30);
  expect(gpu).toEqual({ totalBytes: 24 * 2 ** 30, device: "gpu", share: 0.9 });
  expect(memoryBudgetBytes(gpu, null)).toBe(Math.floor(24 * 2 ** 30 * 0.9));
  expect(memoryBudgetBytes(gpu, { fraction: 0.5 })).toBe(12 * 2 ** 30);
  expect(memoryBudgetBytes(gpu, { bytes: 1000 })).toBe(1000);
  // No driver to answer (this machine, or a GPU that cannot be read): RAM.
  expect(deviceMemory(true, () => null)).toEqual({ totalBytes: totalmem(), device: "ram", share: 0.75 });
  expect(deviceMemory(false, () => 1)).toMatchObject({ device: "ram" });
  expect(cudaDeviceMemoryBytes("libcuda-that-is-not-there.so.1")).toBeNull();
});

test("a model directory's footprint: its ONNX file's size, and a KV budget sized to what it can use", async () => {
  const dir = await syntheticModel(tinyModelsRoot(), "footprint-bytes", { preset: "tiny-bytes", id: "footprint/bytes", seed: 3 });
  const f = estimateFootprint(dir);
  expect(f.weightsBytes).toBe(Bun.file(join(dir, "onnx", "model.onnx")).size);
  // 2 layers × key and value × 2 KV heads × 16 dims × 4 bytes, over the card's 2,048 positions.
  expect(f).toMatchObject({ kvBytesPerToken: 512, contextLength: 2048 });
  // Automatic: at most 64 full-context sequences (64 MiB), under a quarter of the budget.
  expect(kvGrant(f, 24 * 2 ** 30, 0)).toBe(64 * 2 ** 20);
  expect(kvGrant(f, 512 * 2 ** 20, 0)).toBe(64 * 2 ** 20);
  // The operator's --kv-budget-mb wins.
  expect(kvGrant(f, 24 * 2 ** 30, 3 * 2 ** 20)).toBe(3 * 2 ** 20);
  // Unknown shape: a quarter of the budget, 256 MiB to 8 GiB.
  expect(kvGrant({ weightsBytes: 1, kvBytesPerToken: null, contextLength: null }, 64 * 2 ** 30, 0)).toBe(8 * 2 ** 30);
  expect(kvGrant({ weightsBytes: 1, kvBytesPerToken: null, contextLength: null }, 2 ** 30, 0)).toBe(256 * 2 ** 20);
});
