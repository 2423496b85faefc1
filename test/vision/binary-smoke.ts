// Image input in the compiled binary (sharp's addon and libvips embedded and unpacked):
//   bun test/vision/binary-smoke.ts [path/to/sluice]
// Copies the binary alone into an empty directory, serves a synthetic vision-language model from
// there with PATH reduced to /usr/bin:/bin (no node_modules reachable), and sends images.
import { copyFileSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { buildSyntheticVlm } from "../../src/modelkit/index.ts";
import { dataUrl, makeImage } from "./images.ts";

const REPO = resolve(import.meta.dir, "../..");
const binary = resolve(process.argv[2] ?? join(REPO, "dist/sluice"));
if (!existsSync(binary)) throw new Error(`no binary at ${binary}: run make build`);

const dir = mkdtempSync(join(tmpdir(), "sluice-vision-smoke-"));
const env = { PATH: "/usr/bin:/bin", LANG: "C.UTF-8", HOME: dir };
let serve: Bun.Subprocess | null = null;
try {
  copyFileSync(binary, join(dir, "sluice"));
  Bun.spawnSync(["/bin/chmod", "755", join(dir, "sluice")]);
  buildSyntheticVlm(join(dir, "models", "vlm"), { id: "synthetic/tiny-vlm" });
  const probe = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = probe.port;
  probe.stop(true);
  serve = Bun.spawn(["./sluice", "serve", "--port", String(port), "--data", "data", "--models", "models", "--no-demo"], { cwd: dir, env, stdout: "ignore", stderr: "ignore" });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600; i++) {
    const ok = await fetch(`${url}/ready`).then((r) => r.ok, () => false);
    if (ok) break;
    if (serve.exitCode !== null) throw new Error(`serve exited with ${serve.exitCode}`);
    await Bun.sleep(100);
  }
  const made = Bun.spawnSync(["./sluice", "keys", "create", "--account", "local", "--data", "data"], { cwd: dir, env, stdout: "pipe", stderr: "pipe" });
  const apiKey = /sk-sluice-[A-Za-z0-9_-]+/.exec(made.stdout.toString())?.[0];
  if (!apiKey) throw new Error(`keys create failed: ${made.stderr.toString()}`);
  const ask = async (image: string) => {
    const r = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "synthetic/tiny-vlm", max_tokens: 8, temperature: 0, messages: [{ role: "user", content: [{ type: "text", text: "Describe" }, { type: "image_url", image_url: { url: image } }] }] }),
    });
    return { status: r.status, body: (await r.json()) as { choices?: { message: { content: string } }[]; usage?: { prompt_tokens: number }; error?: { message: string; param: string } } };
  };
  const png = await ask(dataUrl(await makeImage("png", 80, 50, 1), "image/png"));
  const jpg = await ask(dataUrl(await makeImage("jpeg", 50, 90, 2), "image/jpeg"));
  const bad = await ask("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB");
  const ok = png.status === 200 && jpg.status === 200 && (png.body.usage?.prompt_tokens ?? 0) > 80 && bad.status === 400 && bad.body.error?.param === "messages[0].content[1]";
  console.log(`${ok ? "ok  " : "FAIL"} images in the binary: png ${png.status} (${png.body.usage?.prompt_tokens} prompt tokens), jpeg ${jpg.status}, truncated png ${bad.status}: ${bad.body.error?.message}`);
  if (!ok) process.exitCode = 1;
} finally {
  serve?.kill();
  await serve?.exited;
  rmSync(dir, { recursive: true, force: true });
}
