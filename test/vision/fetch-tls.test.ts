// https image fetches with the address pinned: the test name images.sluice.test "resolves" (through
// the injected resolver) to 127.0.0.1, where a local TLS server holds a certificate for that name
// signed by a throwaway CA. The CA and certificates are made by openssl for each run, in a temp
// dir: no private keys in the repo, nothing that expires. The server picks its certificate by SNI
// (its default one is for another name), so a success also shows the name went out in SNI.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ImageInputError } from "../../src/vision/errors.ts";
import { fetchImage, type Resolver } from "../../src/vision/fetch.ts";
import { DEFAULT_IMAGE_POLICY, type ImageFetchPolicy } from "../../src/vision/policy.ts";
import { resolveImageParts } from "../../src/vision/resolve.ts";
import { makeImage } from "./images.ts";
import { refusal } from "./support.ts";

const openssl = Bun.which("openssl");
if (!openssl) console.log("skipping https image fetch tests: openssl is not installed");

const NAME = "images.sluice.test";
let dir = "";
let ca = "";
let server: ReturnType<typeof Bun.serve> | undefined;
let port = 0;
let png: Uint8Array<ArrayBuffer>;

function run(...args: string[]): void {
  const r = Bun.spawnSync([openssl!, ...args], { cwd: dir, stdout: "ignore", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`openssl ${args[0]} failed: ${r.stderr.toString()}`);
}

/** A key and a certificate for `name` signed by the test CA (files `<file>.key`, `<file>.pem`). */
function leaf(file: string, name: string): void {
  run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", `${file}.key`, "-out", `${file}.csr`, "-subj", `/CN=${name}`);
  writeFileSync(join(dir, `${file}.ext`), `subjectAltName=DNS:${name}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n`);
  run("x509", "-req", "-in", `${file}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2", "-out", `${file}.pem`, "-extfile", `${file}.ext`);
}

beforeAll(async () => {
  if (!openssl) return;
  png = await makeImage("png", 24, 16, 3);
  dir = mkdtempSync(join(tmpdir(), "sluice-tls-"));
  run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
    "-subj", "/CN=Sluice test CA", "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign");
  leaf("images", NAME);
  leaf("default", "default.sluice.test");
  ca = await Bun.file(join(dir, "ca.pem")).text();
  const file = (n: string) => Bun.file(join(dir, n));
  server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    tls: [
      { cert: file("default.pem"), key: file("default.key") },
      { serverName: NAME, cert: file("images.pem"), key: file("images.key") },
    ],
    fetch(req) {
      const image = { "content-type": "image/png" };
      switch (new URL(req.url).pathname) {
        case "/host.png":
          return req.headers.get("host") === `${NAME}:${port}` ? new Response(png, { headers: image }) : new Response("wrong host", { status: 421 });
        case "/to-same-name":
          return Response.redirect(`https://${NAME}:${port}/host.png`, 302);
        case "/to-metadata":
          return Response.redirect("http://169.254.169.254/latest/meta-data/", 302);
        case "/to-loopback-literal":
          return Response.redirect(`https://127.0.0.1:${port}/host.png`, 302);
        case "/to-internal-name":
          return Response.redirect(`https://internal.sluice.test:${port}/host.png`, 302);
        default:
          return new Response("missing", { status: 404 });
      }
    },
  });
  port = server.port!;
});

afterAll(() => {
  server?.stop(true);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// Only the test names are allowed onto loopback; everything else keeps the default checks.
const policy: ImageFetchPolicy = { ...DEFAULT_IMAGE_POLICY, allowHosts: [NAME, "other.sluice.test"], timeoutMs: 10_000 };
const testDns: Resolver = async (host) => {
  if (host === NAME || host === "other.sluice.test") return ["127.0.0.1"];
  if (host === "internal.sluice.test") return ["10.0.0.5"];
  throw Object.assign(new Error("not found"), { code: "ENOTFOUND" });
};


describe.skipIf(!openssl)("https image fetch with a pinned address", () => {
  test("connects to the checked address and verifies the certificate against the URL's name", async () => {
    let lookups = 0;
    // A rebinding resolver: only the first answer (the one checked) may be used.
    const rebinding: Resolver = async () => (lookups++ === 0 ? ["127.0.0.1"] : ["10.9.9.9"]);
    const got = await fetchImage(`https://${NAME}:${port}/host.png`, policy, rebinding, ca);
    expect(got.contentType).toBe("image/png");
    expect(Buffer.from(got.bytes).equals(Buffer.from(png))).toBe(true);
    expect(lookups).toBe(1);
  });

  test("follows an https redirect on the same name", async () => {
    const got = await fetchImage(`https://${NAME}:${port}/to-same-name`, policy, testDns, ca);
    expect(got.bytes.length).toBe(png.length);
  });

  test("verification stays on: without the test CA the certificate is refused", async () => {
    const msg = await refusal(fetchImage(`https://${NAME}:${port}/host.png`, policy, testDns));
    expect(msg).toMatch(new RegExp(`^the TLS certificate of the image host '${NAME.replace(/\./g, "\\.")}' could not be verified`));
  });

  test("a certificate for another name fails with a clear error, also right after a good connection to that address", async () => {
    expect((await fetchImage(`https://${NAME}:${port}/host.png`, policy, testDns, ca)).bytes.length).toBe(png.length);
    // other.sluice.test gets the server's default certificate (for default.sluice.test), from the same CA.
    const msg = await refusal(fetchImage(`https://other.sluice.test:${port}/host.png`, policy, testDns, ca));
    expect(msg).toBe("the TLS certificate of the image host 'other.sluice.test' could not be verified for that name (ERR_TLS_CERT_ALTNAME_INVALID)");
    expect((await fetchImage(`https://${NAME}:${port}/host.png`, policy, testDns, ca)).bytes.length).toBe(png.length);
  });

  test("the failure reaches the API as an invalid image part (a 400), not a crash", async () => {
    const messages = [{ role: "user" as const, content: [{ type: "image_url" as const, image_url: { url: `https://other.sluice.test:${port}/host.png` } }] }];
    const e = await resolveImageParts(messages, policy, testDns).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(ImageInputError);
    expect((e as ImageInputError).param).toBe("messages[0].content[0]");
    expect((e as ImageInputError).message).toMatch(/^Invalid image in messages\[0\]\.content\[0\]: the TLS certificate of the image host 'other\.sluice\.test' could not be verified/);
  });

  test("a redirect from https to a forbidden address is refused", async () => {
    const from = (path: string) => fetchImage(`https://${NAME}:${port}${path}`, policy, testDns, ca);
    expect(await refusal(from("/to-metadata"))).toMatch(/'169\.254\.169\.254' is a link-local \(metadata\) address/);
    // The allowed name may reach loopback; the same address written literally may not.
    expect(await refusal(from("/to-loopback-literal"))).toMatch(/'127\.0\.0\.1' is a loopback address/);
    expect(await refusal(from("/to-internal-name"))).toMatch(/'internal\.sluice\.test' is a private address \(10\.0\.0\.5\)/);
  });

  test("an operator's private CA via NODE_EXTRA_CA_CERTS is trusted by a pinned fetch", async () => {
    // A fresh process, because Bun reads NODE_EXTRA_CA_CERTS once at start.
    const script = `
      import { fetchImage } from ${JSON.stringify(join(import.meta.dir, "../../src/vision/fetch.ts"))};
      const policy = { maxBytes: 1 << 20, timeoutMs: 10000, maxRedirects: 3, allowHosts: [${JSON.stringify(NAME)}] };
      const got = await fetchImage(${JSON.stringify(`https://${NAME}:${port}/host.png`)}, policy, async () => ["127.0.0.1"]);
      console.log(got.bytes.length);`;
    const proc = Bun.spawn([process.execPath, "-e", script], { env: { ...process.env, NODE_EXTRA_CA_CERTS: join(dir, "ca.pem") }, stdout: "pipe", stderr: "pipe" });
    const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    expect([code, out.trim(), err]).toEqual([0, String(png.length), ""]);
  });
});
