// ONNX Runtime's telemetry stays off in a real `sluice serve` that runs a model, unless the
// operator's environment says otherwise (src/engine/runtime/ort-telemetry.ts).
import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BUN, REPO, tempDir } from "../helpers/paths.ts";
import { spawnServe } from "../helpers/serve-process.ts";

/** Every file below dir, as paths relative to it. */
function filesBelow(dir: string): string[] {
  return existsSync(dir) ? readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name).slice(dir.length + 1)) : [];
}

describe("ONNX Runtime telemetry", () => {
  test("a server that has run a model leaves no telemetry device id, event store or debug log", async () => {
    const dir = tempDir("sluice-telemetry-");
    // Where ONNX Runtime (1.29 and 1.30) writes them: $XDG_CACHE_HOME (else $HOME/.cache)/Microsoft/…, and
    // /tmp/mat-debug-<pid>.log.
    const home = join(dir.path, "home");
    const cache = join(dir.path, "xdg-cache");
    const started = Date.now();
    const server = await spawnServe(["--data", join(dir.path, "data"), "--models", join(dir.path, "models")], {
      env: { HOME: home, XDG_CACHE_HOME: cache, ORT_DISABLE_TELEMETRY: undefined },
    });
    const pid = server.proc.pid;
    try {
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${server.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "sluice/demo", messages: [{ role: "user", content: "hi" }], max_tokens: 4 }),
      });
      // The model ran: its worker thread created ONNX Runtime's environment and a session.
      expect(res.status).toBe(200);
      expect(((await res.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBeGreaterThan(0);
    } finally {
      expect(await server.stop()).toBe(0);
    }
    try {
      expect(filesBelow(cache).filter((f) => f.startsWith("Microsoft"))).toEqual([]);
      expect(filesBelow(join(home, ".cache")).filter((f) => f.startsWith("Microsoft"))).toEqual([]);
      // Written (or truncated) when ONNX Runtime starts; one left by an earlier process of the same
      // id is older than this server.
      for (const t of new Set(["/tmp", tmpdir()])) {
        const log = join(t, `mat-debug-${pid}.log`);
        expect(existsSync(log) && statSync(log).mtimeMs >= started - 1000).toBe(false);
      }
    } finally {
      dir.remove();
    }
  });

  test("an operator's own ORT_DISABLE_TELEMETRY is left as it is, and doctor says which applies", () => {
    const dir = tempDir("sluice-telemetry-doctor-");
    try {
      const doctor = (env: Record<string, string | undefined>) =>
        Bun.spawnSync([BUN, join(REPO, "src/cli/main.ts"), "doctor", "--data", join(dir.path, "data"), "--models", join(dir.path, "none")], {
          cwd: REPO,
          env: { ...process.env, ...env },
        }).stdout.toString();
      expect(doctor({ ORT_DISABLE_TELEMETRY: undefined })).toContain("onnx runtime telemetry: off (ORT_DISABLE_TELEMETRY=1)");
      expect(doctor({ ORT_DISABLE_TELEMETRY: "0" })).toContain("onnx runtime telemetry: as the environment sets it (ORT_DISABLE_TELEMETRY=0)");
    } finally {
      dir.remove();
    }
  });
});
