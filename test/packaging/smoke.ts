// Smoke test of the compiled binary (dist/sluice), run by .ci/run after `make test`:
//   bun test/packaging/smoke.ts [path/to/sluice]
// The binary is copied alone into an empty temporary directory and run there with PATH reduced
// to /usr/bin:/bin and HOME pointing into that directory, so neither Bun, Node nor node_modules
// can be found. It must start, become ready, take a key, answer curl (whole and streamed),
// import stories260K and reproduce llama2.c's greedy story, pull it from a local Hub-compatible
// server and serve it without a restart, then shut down cleanly.
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { buildHubRepos, STORIES_REPO } from "../helpers/hub-repos.ts";
import { startHubServer } from "../helpers/hub-server.ts";
import { bannerCommands, hintIn, readBanner, runPrinted } from "../helpers/printed-commands.ts";
import { startOtlpReceiver } from "../helpers/otlp-receiver.ts";

const REPO = resolve(import.meta.dir, "../..");
const STORIES = resolve(REPO, "../shared/models/stories260k");
const binary = resolve(process.argv[2] ?? join(REPO, "dist/sluice"));
const ENV = { PATH: "/usr/bin:/bin", LANG: "C.UTF-8" };

interface Step {
  name: string;
  ok: boolean;
  detail: string;
}
const steps: Step[] = [];

function record(name: string, ok: boolean, detail = "") {
  steps.push({ name, ok, detail });
  console.log(`${ok ? "ok  " : "FAIL"} ${name}${detail ? `: ${detail}` : ""}`);
  if (!ok) throw new Error(`${name}: ${detail}`);
}

function run(cwd: string, env: Record<string, string>, args: string[]): { code: number; out: string; err: string } {
  const r = Bun.spawnSync(args, { cwd, env, stdout: "pipe", stderr: "pipe" });
  return { code: r.exitCode ?? -1, out: r.stdout.toString(), err: r.stderr.toString() };
}

function curl(cwd: string, env: Record<string, string>, url: string, key: string, body?: unknown): string {
  const args = ["/usr/bin/curl", "-sS", "--fail-with-body", "--max-time", "120", url];
  if (key) args.push("-H", `Authorization: Bearer ${key}`);
  if (body !== undefined) args.push("-H", "Content-Type: application/json", "-d", JSON.stringify(body));
  const r = run(cwd, env, args);
  if (r.code !== 0) throw new Error(`curl ${url} failed (${r.code}): ${r.out}${r.err}`);
  return r.out;
}

function referenceStory(): string {
  const m = /```\n(Once upon a time[\s\S]*?)\n```/.exec(readFileSync(join(STORIES, "README.md"), "utf8"));
  if (!m) throw new Error("reference story not found in the stories260K README");
  return m[1]!;
}

async function freePort(): Promise<number> {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

async function waitReady(url: string, proc: Bun.Subprocess, ms: number): Promise<number> {
  const t0 = performance.now();
  while (performance.now() - t0 < ms) {
    if (proc.exitCode !== null) throw new Error(`serve exited early with ${proc.exitCode}`);
    try {
      const r = await fetch(`${url}/ready`);
      if (r.ok && ((await r.json()) as { ready?: boolean }).ready) return performance.now() - t0;
    } catch {
      // not listening yet
    }
    await Bun.sleep(50);
  }
  throw new Error(`not ready within ${ms} ms`);
}

async function main(): Promise<void> {
  if (!existsSync(binary)) throw new Error(`no binary at ${binary}: run make build`);
  const dir = mkdtempSync(join(tmpdir(), "sluice-smoke-"));
  const env = { ...ENV, HOME: dir };
  let serve: Bun.Subprocess<"ignore", "pipe", "pipe"> | null = null;
  // Traces from the binary (the OpenTelemetry SDK and exporter bundled in it) to a real OTLP receiver.
  const collector = startOtlpReceiver();
  try {
    copyFileSync(binary, join(dir, "sluice"));
    Bun.spawnSync(["/bin/chmod", "755", join(dir, "sluice")]);
    const exe = "./sluice";

    const which = run(dir, env, ["/bin/sh", "-c", "command -v bun node || true"]);
    record("no bun or node on PATH", which.out.trim() === "", which.out.trim());

    const version = run(dir, env, [exe, "--version"]);
    record("--version", version.code === 0 && /^sluice \d+\.\d+\.\d+/.test(version.out), version.out.trim() || version.err.trim());
    const help = run(dir, env, [exe, "--help"]);
    record("--help", help.code === 0 && help.out.includes("./sluice serve"), `${help.out.split("\n").length} lines`);
    // Commands it prints name it as it was called: ./sluice here, the bare name once on PATH.
    const unknown = await runPrinted("./sluice frobnicate", dir, env);
    const hint = hintIn(unknown.err);
    record("an error's hint names ./sluice and runs as printed", hint === "./sluice --help" && (await runPrinted(hint, dir, env)).code === 0, hint ?? unknown.err.trim());
    Bun.spawnSync(["/bin/mkdir", "-p", join(dir, "bin")]);
    Bun.spawnSync(["/bin/ln", "-s", join(dir, "sluice"), join(dir, "bin", "sluice")]);
    const onPath = { ...env, PATH: `${join(dir, "bin")}:${env.PATH}` };
    const usage = await runPrinted("sluice keys create --help", join(dir, "bin"), onPath);
    record("on PATH, --help says sluice", usage.code === 0 && usage.out.startsWith("Usage: sluice keys create"), usage.out.split("\n")[0]!);

    const ro = run(dir, env, [exe, "serve", "--port", "0", "--cache-dir", "/sys/sluice-cache"]);
    record(
      "unwritable --cache-dir: clear error naming the setting",
      ro.code === 1 && ro.err.includes("/sys/sluice-cache") && ro.err.includes("--cache-dir or SLUICE_CACHE_DIR"),
      ro.err.trim().split("\n").at(-1)!.slice(0, 160),
    );
    const cuda = run(dir, env, [exe, "serve", "--port", "0", "--device", "cuda"]);
    // What is missing depends on the machine (one may have a CUDA runtime installed and no GPU):
    // the refusal names every required piece doctor lists as missing, the driver and provider always.
    const doctorOut = run(dir, env, [exe, "doctor"]).out;
    const missing = [...doctorOut.matchAll(/^\s+missing\s+(.+?)\s{2,}/gm)].map((m) => m[1]!).filter((n) => !n.includes("optional") && !n.startsWith("cuFFT"));
    record(
      "--device cuda without a GPU: refuses, naming what is missing",
      cuda.code === 1 && ["NVIDIA driver", "ONNX Runtime CUDA provider", ...missing].every((w) => cuda.err.includes(w)),
      `${missing.length} missing by doctor; ${cuda.err.trim().slice(0, 100)}…`,
    );

    // 1. Serve the demo model (empty models directory), first start.
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const t0 = performance.now();
    const servedAt = Date.now();
    serve = Bun.spawn([exe, "serve", "--port", String(port)], {
      cwd: dir,
      env: { ...env, OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_SERVICE_NAME: "sluice-smoke", OTEL_BSP_SCHEDULE_DELAY: "100" },
      stdout: "pipe",
      stderr: "pipe",
    });
    const banner = await readBanner(serve.stdout);
    const readyMs = await waitReady(url, serve, 60_000);
    record("serve → /ready (first start: unpacking, demo model)", true, `${Math.round(readyMs)} ms`);
    // Printed only once the model is loaded and the port listens, each command as this binary is called.
    const hints = bannerCommands(banner, "./sluice");
    record("the banner's commands name ./sluice", hints.length === 2 && hints[1] === "./sluice users create EMAIL --account local --operator --password-stdin", hints.join(" | "));
    const listed = await runPrinted(hints[0]!, dir, env);
    record("the banner's curl runs as printed", listed.code === 0 && listed.out.includes("sluice/demo"), listed.out.slice(0, 80));
    const op = await runPrinted(hints[1]!.replace("EMAIL", "op@example.com"), dir, env, "a long enough password\n");
    record("the banner's users create runs as printed", op.code === 0, (op.out + op.err).trim());
    const cacheNative = join(dir, ".cache", "sluice", "native");
    record("native libraries unpacked into the cache", existsSync(cacheNative), cacheNative);
    // The default binding calls ONNX Runtime's C API on the unpacked libonnxruntime.so.1.
    const doctor = run(dir, env, [exe, "doctor"]);
    const capi = doctor.out.split("\n").find((l) => l.trim().startsWith("C API:")) ?? "";
    record("doctor: the C API binding, on the unpacked ONNX Runtime", /C API: ONNX Runtime \d+\.\d+\.\d+ \(.*\.cache\/sluice\/native\/.*libonnxruntime\.so\.1\)/.test(capi), capi.trim() || doctor.err.trim());

    const created = run(dir, env, [exe, "keys", "create", "--account", "local", "--label", "smoke"]);
    const key = /sk-sluice-[A-Za-z0-9]+/.exec(created.out)?.[0] ?? "";
    record("keys create", created.code === 0 && key !== "", created.code === 0 ? "key printed" : created.err.trim());

    const models = JSON.parse(curl(dir, env, `${url}/v1/models`, key)) as { data: { id: string }[] };
    record("GET /v1/models", models.data.some((m) => m.id === "sluice/demo"), models.data.map((m) => m.id).join(", "));

    const whole = JSON.parse(
      curl(dir, env, `${url}/v1/chat/completions`, key, { model: "sluice/demo", messages: [{ role: "user", content: "Hello" }], max_tokens: 8 }),
    ) as { choices: { message: { content: string }; finish_reason: string }[]; usage: { completion_tokens: number } };
    record(
      "curl chat completion (whole)",
      typeof whole.choices[0]?.message.content === "string" && whole.usage.completion_tokens > 0,
      `${whole.usage.completion_tokens} tokens, finish ${whole.choices[0]?.finish_reason}`,
    );

    const sse = curl(dir, env, `${url}/v1/chat/completions`, key, {
      model: "sluice/demo",
      messages: [{ role: "user", content: "Hello" }],
      max_tokens: 8,
      stream: true,
    });
    const events = sse.split("\n").filter((l) => l.startsWith("data: "));
    const chunks = events.filter((l) => l !== "data: [DONE]").map((l) => JSON.parse(l.slice(6)) as { object: string });
    record(
      "curl chat completion (streamed)",
      events.at(-1) === "data: [DONE]" && chunks.length >= 2 && chunks.every((c) => c.object === "chat.completion.chunk"),
      `${chunks.length} chunks then [DONE]`,
    );

    const spans = await collector
      .waitFor((all) => all.some((s) => s.name === "chat sluice/demo") && all.some((s) => s.name === "sluice.decode"), 15_000)
      .catch(() => collector.spans);
    const gen = spans.find((s) => s.name === "chat sluice/demo");
    const tree = gen ? spans.filter((s) => s.traceId === gen.traceId) : [];
    record(
      "OTLP traces from the binary: server, GenAI and engine spans of one trace",
      !!gen && gen.resource["service.name"] === "sluice-smoke" && ["POST /v1/chat/completions", "sluice.authenticate", "sluice.queue", "sluice.decode"].every((n) => tree.some((s) => s.name === n)),
      `${collector.spans.length} spans received; ${tree.map((s) => s.name).join(", ")}`,
    );

    // The demo model has run: ONNX Runtime's telemetry (on by default in 1.29 and 1.30) would have left
    // its device id and event store under HOME and a debug log in /tmp by now.
    // (A debug log of the same process id left by an earlier process is older than this server.)
    const telemetry = [join(dir, ".cache", "Microsoft"), `/tmp/mat-debug-${serve.pid}.log`].filter((f) => existsSync(f) && statSync(f).mtimeMs >= servedAt - 1000);
    record("no ONNX Runtime telemetry files", telemetry.length === 0, telemetry.join(", ") || "none under HOME or /tmp");

    // 2. Import stories260K with the binary, pick it up with SIGHUP, compare greedy output.
    if (!existsSync(join(STORIES, "stories260K.bin"))) {
      console.log(`skip stories260K steps: ${STORIES} is absent`);
    } else {
      const imp = run(dir, env, [exe, "models", "import", "llama2c", join(STORIES, "stories260K.bin"), join(STORIES, "tok512.bin"),
        "--id", "karpathy/stories260k", "--out", "models/karpathy/stories260k"]);
      record("models import llama2c", imp.code === 0, (imp.out + imp.err).trim().split("\n").at(-1) ?? "");
      serve.kill("SIGHUP");
      let served: string[] = [];
      for (let i = 0; i < 100 && !served.includes("karpathy/stories260k"); i++) {
        await Bun.sleep(100);
        served = (JSON.parse(curl(dir, env, `${url}/v1/models`, key)) as { data: { id: string }[] }).data.map((m) => m.id);
      }
      record("SIGHUP picks up the imported model", served.includes("karpathy/stories260k"), served.join(", "));
      const story = JSON.parse(
        curl(dir, env, `${url}/v1/chat/completions`, key, {
          model: "karpathy/stories260k",
          messages: [{ role: "user", content: "" }],
          temperature: 0,
          max_tokens: 256,
        }),
      ) as { choices: { message: { content: string } }[] };
      const text = story.choices[0]?.message.content ?? "";
      const reference = referenceStory();
      record("greedy stories260K = llama2.c's reference story", text === reference, text === reference ? `${text.length} chars` : `got ${JSON.stringify(text.slice(0, 120))}…`);

      // 2b. Pull it from a local Hub-compatible server; the running serve finds it by itself.
      const fixtures = await buildHubRepos();
      const hub = startHubServer(fixtures.repos);
      try {
        // Not run(): the Hub server answers from this process, so the wait must not block it.
        const proc = Bun.spawn([exe, "models", "pull", STORIES_REPO, "--dtype", "fp32"], { cwd: dir, env: { ...env, HF_ENDPOINT: hub.url }, stdout: "pipe", stderr: "pipe" });
        const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
        record("models pull from a Hub", code === 0 && out.includes("verified"), (out + err).split("\n").find((l) => l.startsWith("pulled ")) ?? err.trim());
        let listed: string[] = [];
        for (let i = 0; i < 150 && !listed.includes(STORIES_REPO); i++) {
          await Bun.sleep(100);
          listed = (JSON.parse(curl(dir, env, `${url}/v1/models`, key)) as { data: { id: string }[] }).data.map((m) => m.id);
        }
        record("the running serve picks up the pulled model", listed.includes(STORIES_REPO), listed.join(", "));
        const again = JSON.parse(
          curl(dir, env, `${url}/v1/chat/completions`, key, { model: STORIES_REPO, messages: [{ role: "user", content: "" }], temperature: 0, max_tokens: 256 }),
        ) as { choices: { message: { content: string } }[] };
        record("the pulled stories260K tells the reference story", again.choices[0]?.message.content === reference);
      } finally {
        hub.stop();
        fixtures.remove();
      }
    }

    // 3. Clean shutdown.
    serve.kill("SIGTERM");
    const code = await Promise.race([serve.exited, Bun.sleep(15_000).then(() => "timeout" as const)]);
    const stderr = await new Response(serve.stderr).text();
    serve = null;
    record("SIGTERM → clean exit", code === 0 && stderr.includes("shutting down"), `exit ${code}`);
    const errors = stderr.split("\n").filter((l) => l.includes('"level":"error"'));
    record("no error logs", errors.length === 0, errors.slice(0, 2).join(" | "));
    const devices = stderr.split("\n").filter((l) => /CPU|GPU|CUDA|device/.test(l) && !l.includes('"model loaded on'));
    record(
      "a CPU machine: at most two short info lines about devices",
      devices.length >= 1 && devices.length <= 2 && devices.every((l) => l.length < 200 && l.includes('"level":"info"')),
      devices.join(" | ").slice(0, 200),
    );
    console.log(`total ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  } finally {
    serve?.kill("SIGKILL");
    collector.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

try {
  await main();
  console.log(`\nbinary smoke test: PASS (${steps.length} checks)`);
  process.exit(0);
} catch (e) {
  console.log(`\nbinary smoke test: FAIL: ${(e as Error).message}`);
  process.exit(1);
}
