// bench/gpu-check on a machine without an NVIDIA GPU (every CI machine): the run mode says so in
// one line and exits 0, before it needs anything staged; with no mode it prints its usage.
import { expect, test } from "bun:test";
import { join } from "node:path";
import { nvidiaGpuPresent } from "../../src/packaging/cuda.ts";
import { REPO } from "../helpers/paths.ts";

const SCRIPT = join(REPO, "bench", "gpu-check");

test.skipIf(nvidiaGpuPresent())("run without a GPU: one line saying so, status 0", () => {
  const r = Bun.spawnSync(["bash", SCRIPT, "run"], { cwd: REPO, stdout: "pipe", stderr: "pipe" });
  expect(r.stderr.toString()).toBe("");
  expect(r.stdout.toString()).toBe("gpu-check: no NVIDIA GPU on this machine (no /proc/driver/nvidia, no /dev/nvidia0): nothing measured\n");
  expect(r.exitCode).toBe(0);
});

test("no mode: the usage from its header, status 2", () => {
  const r = Bun.spawnSync(["bash", SCRIPT], { cwd: REPO, stdout: "pipe", stderr: "pipe" });
  expect(r.exitCode).toBe(2);
  expect(r.stdout.toString()).toContain("bench/gpu-check stage [--provider-tgz FILE]");
  expect(r.stdout.toString()).toContain("bench/gpu-check run [--cpu-only]");
});
