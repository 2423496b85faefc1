// Remote image fetching against a local HTTP server on 127.0.0.1 (allowed explicitly through the
// policy's allow-list, as loopback is refused by default), and the address checks behind it.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { forbiddenAddressReason } from "../../src/vision/address.ts";
import { ImageInputError } from "../../src/vision/errors.ts";
import { fetchImage, type Resolver } from "../../src/vision/fetch.ts";
import { DEFAULT_IMAGE_POLICY, type ImageFetchPolicy } from "../../src/vision/policy.ts";
import { resolveImageParts } from "../../src/vision/resolve.ts";
import { makeImage } from "./images.ts";
import { refusal } from "./support.ts";

let server: ReturnType<typeof Bun.serve>;
let png: Uint8Array<ArrayBuffer>;
let base: string;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  png = await makeImage("png", 40, 30, 5);
  server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      const path = new URL(req.url).pathname;
      const image = { "content-type": "image/png" };
      switch (path) {
        case "/ok.png":
          return new Response(png, { headers: image });
        case "/host.png":
          // Answers only when asked for the name (the connection itself went to the pinned address).
          return req.headers.get("host") === `images.test:${server.port}` ? new Response(png, { headers: image }) : new Response("wrong host", { status: 421 });
        case "/big.png":
          return new Response(new Uint8Array(64 * 1024), { headers: image });
        case "/big-chunked.png":
          // No content-length: the limit must hold while reading.
          return new Response(
            new ReadableStream({
              start(c) {
                for (let i = 0; i < 16; i++) c.enqueue(new Uint8Array(8 * 1024));
                c.close();
              },
            }),
            { headers: image },
          );
        case "/slow.png":
          await sleep(3000);
          return new Response(png, { headers: image });
        case "/page.html":
          return new Response("<html></html>", { headers: { "content-type": "text/html" } });
        case "/to-metadata":
          return Response.redirect("http://169.254.169.254/latest/meta-data/", 302);
        case "/to-ipv6-loopback":
          return Response.redirect(`http://[::1]:${server.port}/ok.png`, 302);
        case "/to-ok":
          return Response.redirect("/ok.png", 301);
        case "/loop":
          return Response.redirect("/loop", 302);
        default:
          return new Response("missing", { status: 404 });
      }
    },
  });
  base = `http://127.0.0.1:${server.port}`;
});

afterAll(() => server?.stop(true));

const allowed: ImageFetchPolicy = { ...DEFAULT_IMAGE_POLICY, allowHosts: ["127.0.0.1"], maxBytes: 32 * 1024, timeoutMs: 10_000 };


describe("remote image fetch", () => {
  test("fetches an image from an allowed host", async () => {
    const got = await fetchImage(`${base}/ok.png`, allowed);
    expect(got.contentType).toBe("image/png");
    expect(Buffer.from(got.bytes).equals(Buffer.from(png))).toBe(true);
  });

  test("follows a redirect on the allowed host", async () => {
    const got = await fetchImage(`${base}/to-ok`, allowed);
    expect(got.bytes.length).toBe(png.length);
  });

  test("too large: by content-length and while streaming", async () => {
    expect(await refusal(fetchImage(`${base}/big.png`, allowed))).toMatch(/65536 bytes, more than the limit of 32768/);
    expect(await refusal(fetchImage(`${base}/big-chunked.png`, allowed))).toMatch(/larger than the limit of 32768/);
  });

  test("too slow", async () => {
    expect(await refusal(fetchImage(`${base}/slow.png`, { ...allowed, timeoutMs: 300 }))).toMatch(/longer than 300 ms/);
  });

  test("wrong content type", async () => {
    expect(await refusal(fetchImage(`${base}/page.html`, allowed))).toMatch(/content type 'text\/html'/);
  });

  test("HTTP errors and redirect loops", async () => {
    expect(await refusal(fetchImage(`${base}/nothing.png`, allowed))).toMatch(/HTTP status 404/);
    expect(await refusal(fetchImage(`${base}/loop`, allowed))).toMatch(/redirected more than 3 times/);
  });

  test("a redirect to a forbidden address is refused", async () => {
    expect(await refusal(fetchImage(`${base}/to-metadata`, allowed))).toMatch(/link-local \(metadata\) address \(169\.254\.169\.254\)/);
    expect(await refusal(fetchImage(`${base}/to-ipv6-loopback`, allowed))).toMatch(/loopback address/);
  });

  test("a forbidden address is refused without the allow-list", async () => {
    expect(await refusal(fetchImage(`${base}/ok.png`, DEFAULT_IMAGE_POLICY))).toMatch(/'127\.0\.0\.1' is a loopback address/);
    expect(await refusal(fetchImage("http://[::ffff:10.1.2.3]/a.png", DEFAULT_IMAGE_POLICY))).toMatch(/private address/);
  });

  test("a name that resolves to a private address is refused (checked after DNS)", async () => {
    const resolver: Resolver = async (host) => (host === "images.example" ? ["93.184.216.34", "10.0.0.7"] : []);
    expect(await refusal(fetchImage("https://images.example/cat.png", DEFAULT_IMAGE_POLICY, resolver))).toMatch(/'images\.example' is a private address \(10\.0\.0\.7\)/);
    expect(await refusal(fetchImage("https://localhost/cat.png", DEFAULT_IMAGE_POLICY))).toMatch(/loopback/);
  });

  test("a name connects to the address that was checked, keeping the name in Host", async () => {
    let lookups = 0;
    // A rebinding resolver: the first answer is the one checked and used; later ones would differ.
    const resolver: Resolver = async () => (lookups++ === 0 ? ["127.0.0.1"] : ["10.9.9.9"]);
    const got = await fetchImage(`http://images.test:${server.port}/host.png`, { ...allowed, allowHosts: ["images.test"] }, resolver);
    expect(got.bytes.length).toBe(png.length);
    expect(lookups).toBe(1);
  });

  test("unsupported schemes and credentials", async () => {
    expect(await refusal(fetchImage("file:///etc/passwd", allowed))).toMatch(/scheme 'file'/);
    expect(await refusal(fetchImage(`http://u:p@127.0.0.1:${server.port}/ok.png`, allowed))).toMatch(/credentials/);
  });

  test("resolveImageParts names the failing part and inlines the good ones", async () => {
    const messages = [
      { role: "system" as const, content: "s" },
      { role: "user" as const, content: [{ type: "text" as const, text: "a" }, { type: "image_url" as const, image_url: { url: `${base}/ok.png`, detail: "low" as const } }] },
    ];
    const out = await resolveImageParts(messages, allowed);
    const part = (out[1]!.content as { type: string; image_url?: { url: string; detail?: string } }[])[1]!;
    expect(part.image_url!.url).toBe(`data:image/png;base64,${Buffer.from(png).toString("base64")}`);
    expect(part.image_url!.detail).toBe("low");
    expect((messages[1]!.content[1] as { image_url: { url: string } }).image_url.url).toBe(`${base}/ok.png`);
    const bad = [{ role: "user" as const, content: [{ type: "image_url" as const, image_url: { url: `${base}/page.html` } }] }];
    const e = await resolveImageParts(bad, allowed).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(ImageInputError);
    expect((e as ImageInputError).param).toBe("messages[0].content[0]");
    expect((e as ImageInputError).message).toMatch(/^Invalid image in messages\[0\]\.content\[0\]: .*text\/html/);
  });
});

describe("address classification", () => {
  const forbidden = ["127.0.0.1", "127.8.9.1", "10.0.0.1", "172.16.5.4", "172.31.255.255", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "224.0.0.1",
    "::1", "::", "fe80::1", "fc00::1", "fd12:3456::1", "::ffff:127.0.0.1", "::ffff:7f00:1", "64:ff9b::a9fe:a9fe", "ff02::1"];
  const allowedIps = ["8.8.8.8", "93.184.216.34", "172.32.0.1", "100.128.0.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"];
  test("refuses loopback, private, link-local, metadata and their IPv6 forms", () => {
    for (const ip of forbidden) expect([ip, forbiddenAddressReason(ip)]).toEqual([ip, expect.any(String)]);
  });
  test("lets public addresses through", () => {
    for (const ip of allowedIps) expect([ip, forbiddenAddressReason(ip)]).toEqual([ip, null]);
  });
});
