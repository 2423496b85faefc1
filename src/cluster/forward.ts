// A client's chat request for a model another node serves: sent to that node with the signed hop
// headers and its answer streamed back unchanged. The forward never hangs on a node that is gone:
// it is cut as soon as the node's heartbeat expires (or its connection breaks), with a 503 and
// Retry-After before the answer has begun, and a final SSE error event after.
import { ApiError } from "../api/errors.ts";
import type { ForwardOutcome, HopIdentity, NodeTarget } from "../api/chat/forwarding.ts";
import type { Logger } from "../log.ts";
import { hopHeaders } from "./hop.ts";

export interface ForwardDeps {
  secret: string;
  log: Logger;
  isLive(nodeId: string): boolean;
  /** Counts the forward against the node's load until the returned function is called. */
  sendingTo(nodeId: string): () => void;
  /** How often the target's liveness is checked while its answer is awaited or streamed. */
  watchMs?: number;
}

const unavailable = (target: NodeTarget, why: string) =>
  new ApiError(503, `The node serving this model could not answer (${why}); retry shortly.`, "service_unavailable", null, "node_unavailable", {
    "retry-after": "1",
  });

// Hop-by-hop headers and those the proxy recomputes; everything else passes through.
const DROP = new Set(["connection", "keep-alive", "transfer-encoding", "content-length", "date", "content-encoding"]);

const encoder = new TextEncoder();
const NL = 10;

/** Index just past the last "\n\n" in bytes, or 0: what can be passed on as whole SSE events. */
function wholeEvents(bytes: Uint8Array): number {
  for (let i = bytes.length - 1; i > 0; i--) if (bytes[i] === NL && bytes[i - 1] === NL) return i + 1;
  return 0;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  if (a.length === 0) return b;
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

export async function forwardChat(
  deps: ForwardDeps,
  target: NodeTarget,
  body: string,
  hop: HopIdentity,
  signal: AbortSignal,
  /** Extra headers (the trace context); the hop's own cannot be overridden by them. */
  extraHeaders: Record<string, string> = {},
): Promise<{ response: Response; done: Promise<ForwardOutcome> }> {
  const upstreamAbort = new AbortController();
  let lost = false;
  const onAbort = () => upstreamAbort.abort();
  signal.addEventListener("abort", onAbort, { once: true });
  const watch = setInterval(() => {
    if (!deps.isLive(target.id)) {
      lost = true;
      upstreamAbort.abort();
    }
  }, deps.watchMs ?? 250);
  const stopCounting = deps.sendingTo(target.id);
  let settle!: (o: ForwardOutcome) => void;
  const done = new Promise<ForwardOutcome>((resolve) => (settle = resolve));
  let ended = false;
  const end = (outcome: ForwardOutcome) => {
    if (ended) return;
    ended = true;
    clearInterval(watch);
    signal.removeEventListener("abort", onAbort);
    stopCounting();
    settle(outcome);
  };

  let upstream: Response;
  try {
    upstream = await fetch(`${target.url.replace(/\/+$/, "")}/v1/chat/completions`, {
      method: "POST",
      headers: { ...extraHeaders, ...hopHeaders(deps.secret, hop, body), "content-type": "application/json" },
      body,
      signal: upstreamAbort.signal,
      redirect: "manual",
    });
  } catch (e) {
    end(signal.aborted ? "cancelled" : "failed");
    const why = lost ? "its heartbeat stopped" : (e as Error).message;
    deps.log.warn("forward failed before an answer", { request_id: hop.requestId, node: target.id, error: why });
    throw unavailable(target, lost ? "its heartbeat stopped" : "connection failed");
  }
  const headers = new Headers();
  upstream.headers.forEach((v, k) => {
    if (!DROP.has(k)) headers.set(k, v);
  });
  const answered: ForwardOutcome = upstream.status < 300 ? "ok" : "refused";
  if (!upstream.body) {
    end(answered);
    return { response: new Response(null, { status: upstream.status, headers }), done };
  }
  const sse = (upstream.headers.get("content-type") ?? "").startsWith("text/event-stream");
  const reader = upstream.body.getReader();
  // SSE is passed on in whole events, so a failure mid-event never leaves half of one before the
  // error event; anything else byte for byte.
  let pending: Uint8Array = new Uint8Array(0);
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        for (;;) {
          const { value, done: finished } = await reader.read();
          if (finished) {
            if (pending.length) controller.enqueue(pending);
            end(answered);
            controller.close();
            return;
          }
          if (!sse) {
            controller.enqueue(value);
            return;
          }
          pending = concat(pending, value);
          const cut = wholeEvents(pending);
          if (cut > 0) {
            controller.enqueue(pending.slice(0, cut));
            pending = pending.slice(cut);
            return;
          }
        }
      } catch (e) {
        if (signal.aborted) {
          end("cancelled");
          try {
            controller.close();
          } catch {}
          return;
        }
        end("failed");
        deps.log.warn("forward failed mid-answer", { request_id: hop.requestId, node: target.id, error: lost ? "its heartbeat stopped" : (e as Error).message });
        if (!sse) {
          controller.error(e);
          return;
        }
        // Headers are gone: the failure travels as a final event in OpenAI's error shape.
        const error = { message: "The node generating this response stopped before it finished; retry the request.", type: "service_unavailable", param: null, code: "node_unavailable" };
        controller.enqueue(encoder.encode(`data: ${JSON.stringify({ error })}\n\n`));
        controller.close();
      }
    },
    cancel() {
      upstreamAbort.abort();
      end("cancelled");
    },
  });
  return { response: new Response(stream, { status: upstream.status, headers }), done };
}
