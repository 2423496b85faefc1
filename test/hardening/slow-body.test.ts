// A client whose Content-Length promises more body than it sends gets 408 request_timeout once
// serve --body-timeout-seconds has passed, and its connection is closed; the API and the
// workspace's forms alike, and the server goes on serving. Counted in answers, not in time: the
// test waits for the 408 and the close, however long a busy machine takes.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { startHarness, type Harness } from "./harness.ts";

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ bodyTimeoutMs: 1000 });
});
afterAll(() => h.cleanup());

/** Sends `head` and the start of a body over a raw connection; resolves with all it got back once the server closes it. */
async function partialRequest(head: string, sent: string): Promise<string> {
  const url = new URL(h.url);
  let got = "";
  const closed = Promise.withResolvers<void>();
  const socket = await Bun.connect({
    hostname: url.hostname,
    port: Number(url.port),
    socket: {
      data(_, d) {
        got += new TextDecoder().decode(d);
      },
      close() {
        closed.resolve();
      },
      error() {
        closed.resolve();
      },
    },
  });
  socket.write(head + sent);
  await closed.promise;
  return got;
}

describe("a body slower than --body-timeout-seconds", () => {
  test("POST /v1/chat/completions: 408 request_timeout, then the connection closes", async () => {
    const body = '{"model":"hardening/tiny","messages":[';
    const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${h.key}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n`;
    const answer = await partialRequest(head, body);
    expect(answer).toStartWith("HTTP/1.1 408");
    expect(answer.toLowerCase()).toContain("connection: close");
    const json = JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4)) as { error: { code: string; message: string } };
    expect(json.error.code).toBe("request_timeout");
    expect(json.error.message).toContain("did not arrive within 1 seconds");
    expect(json.error.message).toContain("--body-timeout-seconds");
    // The server goes on serving.
    const ok = await h.chat({ max_tokens: 2 });
    expect(ok.status).toBe(200);
  }, 60_000);

  test("a workspace form: 408, then the connection closes", async () => {
    const head = `POST /workspace/signin HTTP/1.1\r\nHost: ${new URL(h.url).host}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 500\r\n\r\n`;
    const answer = await partialRequest(head, "email=a%40b.c&pass");
    expect(answer).toStartWith("HTTP/1.1 408");
    expect(answer.toLowerCase()).toContain("connection: close");
    expect(answer).toContain("did not arrive within 1 seconds");
    expect((await fetch(`${h.url}/workspace/signin`)).status).toBe(200);
  }, 60_000);
});
