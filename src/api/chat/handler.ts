// POST /v1/chat/completions: authenticate, validate, hand to the engine, answer whole or as SSE,
// and record usage however the request ends.
import {
  EngineBusyError,
  EngineRequestError,
  EngineUnavailableError,
  type Engine,
  type Generation,
  type GenerationEvent,
} from "../../engine/types.ts";
import type { Logger } from "../../log.ts";
import type { ApiKeyInfo, CatalogModel, Store } from "../../store/index.ts";
import { authenticate } from "../auth.ts";
import { MAX_BODY_DEPTH, nestedDeeperThan, readJsonText } from "../body.ts";
import { ApiError, badRequest, modelNotFound } from "../errors.ts";
import type { Lifecycle } from "../lifecycle.ts";
import { estimateRequestTokens, worstCaseTokens } from "../limits/estimate.ts";
import type { RateGuard } from "../limits/guard.ts";
import { applyRequestLimits, checkBodyLimits, DEFAULT_REQUEST_LIMITS, type RequestLimits } from "../limits/request-limits.ts";
import type { RequestScope } from "../limits/scope.ts";
import { IdleWatch, watchGeneration } from "../limits/watch.ts";
import type { HttpMetrics } from "../metrics.ts";
import { ChatCompletionRequest } from "../schemas.ts";
import { findProblem } from "../validate.ts";
import { ImageInputError } from "../../vision/errors.ts";
import { imagePolicy } from "../../vision/policy.ts";
import { resolveImageParts } from "../../vision/resolve.ts";
import { planChat, type ChatPlan } from "./request.ts";
import { coalesceEvents } from "../../engine/events.ts";
import { ChoiceAccumulator, chunkChoice, type CompletionMeta } from "./response.ts";
import { HOP_HEADER, type ChatForwarding, type ForwardOutcome, type HopIdentity, type NodeTarget } from "./forwarding.ts";
import { scopeIds } from "../limits/guard.ts";
import { eventually } from "../eventually.ts";
import type { Ticket } from "../limits/rate-limiter.ts";
import { SpanKind, SpanStatusCode } from "@opentelemetry/api";
import { ChatSpan } from "../tracing/chat-span.ts";
import { traced, type RequestTrace } from "../tracing/request-trace.ts";

export interface ChatDeps {
  store: Store;
  engine: Engine;
  log: Logger;
  maxBodyBytes: number;
  systemFingerprint: string;
  lifecycle: Lifecycle;
  guard?: RateGuard;
  limits?: RequestLimits;
  metrics?: HttpMetrics;
  /** This node's id: its requests in flight are registered under it. */
  nodeId: string;
  /** Several nodes: requests for models served elsewhere are forwarded, and forwarded ones taken. */
  forwarding?: ChatForwarding;
}

const encoder = new TextEncoder();
const sse = (data: unknown) => encoder.encode(`data: ${JSON.stringify(data)}\n\n`);

/**
 * The model cannot take or finish the request now (queue full, no memory to load it, a failed load,
 * worker restarting, crash loop, shutdown); the code says which.
 */
const unavailable = (e: EngineUnavailableError) =>
  new ApiError(503, e.message, "service_unavailable", null, e.code, { "retry-after": String(e.retryAfterSeconds) });

/** A generation that failed after it started, as the error its client gets; null: an internal error. */
function generationFailure(e: unknown): ApiError | null {
  if (e instanceof EngineRequestError) return badRequest(e.message, e.param, e.code);
  if (e instanceof EngineUnavailableError) return unavailable(e);
  return null;
}

const noCredit = () =>
  new ApiError(429, "You exceeded your current quota: the account has no credit left; ask an operator of this server to add credit (members cannot).", "insufficient_quota", null, "insufficient_quota");

/** A forwarded request's key, as the forwarding node authenticated it. */
const hopKey = (hop: HopIdentity): ApiKeyInfo => ({
  id: hop.keyId ?? "",
  accountId: hop.accountId,
  accountName: hop.accountName,
  // Read from the shared database where it counts (see admitAndRun): the hop does not carry it.
  accountPriority: 0,
  prefix: "",
  label: null,
  createdAt: 0,
  lastUsedAt: null,
  revokedAt: null,
});

/** A failure as the code a span may carry: the answer's error code, never its text. */
const failureCode = (e: unknown): string => {
  if (e instanceof ApiError) return e.code ?? String(e.status);
  if (e instanceof EngineRequestError) return e.code ?? "invalid_request";
  if (e instanceof EngineBusyError) return "account_queue_full";
  if (e instanceof EngineUnavailableError) return e.code;
  return "internal_error";
};

const notServedHere = (model: string) =>
  new ApiError(503, `The model '${model}' is not served by any live node right now; retry shortly.`, "service_unavailable", null, "model_unavailable", {
    "retry-after": "1",
  });

// A forwarded request that did not end cleanly is recorded as interrupted, after the node that
// ran it has had time to record it itself (whoever ends the registration first writes the row).
const INTERRUPT_AFTER_MS = 5_000;

export async function handleChat(deps: ChatDeps, request: Request, requestId: string, scope?: RequestScope): Promise<Response> {
  // A request from another node carries its identity in headers signed over the body: read the
  // body first for it. A client's request is authenticated before its body is read.
  const fromNode = deps.forwarding !== undefined && request.headers.has(HOP_HEADER);
  const trace = scope?.trace;
  let hop: HopIdentity | null = null;
  let key: ApiKeyInfo;
  let raw: { text: string; value: unknown };
  if (fromNode) {
    raw = await readJsonText(request, deps.maxBodyBytes, deps.limits?.bodyTimeoutMs);
    const text = raw.text;
    hop = await traced(trace, "sluice.authenticate", async () => deps.forwarding!.hop(request, text), failureCode, { "sluice.hop": true });
    key = hopKey(hop!);
    requestId = hop!.requestId;
  } else {
    key = await traced(trace, "sluice.authenticate", async () => authenticate(deps.store, request), failureCode);
    raw = await readJsonText(request, deps.maxBodyBytes, deps.limits?.bodyTimeoutMs);
  }
  if (scope) scope.accountId = key.accountId;
  // The account is no secret (the access log has it too); the key's id is, with the content.
  trace?.setAttributes({ "sluice.request_id": requestId, "sluice.account.id": key.accountId, ...(trace.traceContent && key.id ? { "sluice.api_key.id": key.id } : {}) });
  try {
    return await admitAndRun(deps, request, requestId, scope, key, raw, hop);
  } catch (e) {
    // Refused before it ran: the forwarding node's registration of it ends here, unrecorded.
    if (hop) await endUnrecorded(deps, hop.inflightId, requestId);
    throw e;
  }
}

async function admitAndRun(
  deps: ChatDeps,
  request: Request,
  requestId: string,
  scope: RequestScope | undefined,
  key: ApiKeyInfo,
  raw: { text: string; value: unknown },
  hop: HopIdentity | null,
): Promise<Response> {
  const limits = deps.limits ?? DEFAULT_REQUEST_LIMITS;
  const body = raw.value;
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw badRequest("The request body must be a JSON object.", null, "invalid_body");
  }
  // Every later step walks the body (validation, templates, the message to the model's worker):
  // nesting is bounded first, without recursion.
  if (nestedDeeperThan(body, MAX_BODY_DEPTH)) {
    throw badRequest(`The request body is nested more than ${MAX_BODY_DEPTH} levels deep.`, null, "invalid_body");
  }
  checkBodyLimits(body as Record<string, unknown>, limits);
  const problem = findProblem(ChatCompletionRequest, body);
  if (problem) throw badRequest(problem.message, problem.param, "invalid_value");
  const req = body as ChatCompletionRequest;
  const model = await deps.store.catalog.getForAccount(key.accountId, req.model);
  if (!model) throw modelNotFound(req.model);
  const plan = applyRequestLimits(planChat(req, model), limits);
  const where = deps.forwarding ? await deps.forwarding.target(model.id) : "local";
  // A forwarded request is never forwarded again: the node that sent it is told to retry.
  if (where === null || (hop && where !== "local")) throw notServedHere(model.id);
  const estimate = estimateRequestTokens(plan, model.contextLength);
  if (where !== "local") return forwardChat(deps, request, requestId, scope, key, model, plan, estimate, raw.text, where);
  // Prompt text reaches the log only when the operator asked for it (serve --log-prompts).
  if (deps.log.logPrompts) deps.log.debug("chat prompt", { request_id: requestId, model: model.id, messages: plan.messages });
  // Remote images are fetched (inline ones checked) before any engine work; a bad one is a 400 naming its part.
  try {
    plan.messages = await resolveImageParts(plan.messages, imagePolicy());
  } catch (e) {
    if (e instanceof ImageInputError) throw badRequest(e.message, e.param, "invalid_image");
    throw e;
  }
  let inflight: { id: string };
  let ticket: Ticket | undefined;
  if (hop) {
    // Admitted and counted by the forwarding node; what its estimate did not use is given back here.
    inflight = { id: hop.inflightId };
    key = { ...key, accountPriority: (await deps.store.accounts.getById(key.accountId))?.priority ?? 0 };
    ticket = settlingTicket(deps, hop);
  } else {
    ({ inflight, ticket } = await traced(scope?.trace, "sluice.admit", () => admitAndCount(deps, key, requestId, model, plan, deps.nodeId, estimate, scope), failureCode));
  }
  const started = performance.now();
  const abort = new AbortController();
  request.signal.addEventListener("abort", () => abort.abort(), { once: true });
  deps.lifecycle.track(abort);
  const trace = scope?.trace;
  const chat = trace ? new ChatSpan(trace, model.id, plan, `chatcmpl-${requestId}`, requestId) : null;
  let generation: Generation;
  try {
    // The engine takes turns between accounts (and admits higher priorities first) on a busy model.
    generation = await deps.engine.start({ ...plan, requestId, signal: abort.signal, fairnessKey: String(key.accountId), priority: key.accountPriority });
  } catch (e) {
    chat?.refused(failureCode(e));
    deps.lifecycle.untrack(abort);
    ticket?.finish(0);
    await endUnrecorded(deps, inflight.id, requestId);
    if (e instanceof EngineRequestError) throw badRequest(e.message, e.param, e.code);
    // The account has its share of the model's queue waiting: its own limit, a 429.
    if (e instanceof EngineBusyError) {
      throw new ApiError(429, e.message, "rate_limit_error", null, "account_queue_full", {
        "retry-after": String(e.retryAfterSeconds),
      });
    }
    // The model cannot take anyone now (queue full, no memory to load it, a failed load, its
    // worker restarting): a 503.
    if (e instanceof EngineUnavailableError) throw unavailable(e);
    throw e;
  }
  const meta: CompletionMeta = {
    id: `chatcmpl-${requestId}`,
    created: Math.floor(Date.now() / 1000),
    model: model.id,
    systemFingerprint: deps.systemFingerprint,
  };
  const acc = new ChoiceAccumulator(plan.n, plan.logprobs);
  const watched = watchGeneration(generation.events, {
    maxMs: limits.maxGenerationMs,
    abort,
    onFirstToken: () => deps.metrics?.firstToken(model.id, (performance.now() - started) / 1000),
  });
  generation = { ...generation, events: watched.events };
  let recorded: Promise<void> | null = null;
  /** Records the request's usage (and charge); resolves once it is committed. */
  const record = (status: string): Promise<void> => {
    // Exactly once per request: a client abort can reach both the stream's cancel and a pending pull.
    if (recorded) return recorded;
    watched.clear();
    // A generation ended by the wall-time limit is recorded as such (its finish_reason is "length").
    const final = watched.timedOut() && status !== "error" ? "time_limit" : status;
    ticket?.finish(generation.promptTokens + acc.completionTokens());
    deps.metrics?.generation(model.id, final, generation.promptTokens, acc.completionTokens());
    deps.metrics?.generationTimes(model.id, (performance.now() - (scope?.started ?? started)) / 1000, generation.timings);
    chat?.finished(final, generation.promptTokens, acc, generation.timings);
    recorded = recordUsage(deps, key, inflight.id, plan, requestId, model.id, generation.promptTokens, acc, started, final).finally(() => {
      deps.lifecycle.untrack(abort);
      // A stream's server span ends here, with its body (the usage row written).
      trace?.end(final === "error" ? "generation_failed" : undefined);
    });
    return recorded;
  };

  if (!plan.stream) {
    try {
      for await (const batch of generation.events) for (const e of batch) acc.add(e);
    } catch (e) {
      await record("error");
      throw generationFailure(e) ?? e;
    }
    if (request.signal.aborted) {
      await record("cancelled");
      return new Response(null, { status: 499 });
    }
    // Aborted by a shutdown rather than the client: the client still gets what was made.
    await record(abort.signal.aborted ? "interrupted" : "ok");
    return Response.json(acc.toCompletion(meta, generation.promptTokens));
  }
  trace?.holdForBody();
  return streamResponse(deps, generation, plan, meta, acc, abort, request.signal, record, limits.streamIdleMs);
}

function streamResponse(
  deps: ChatDeps,
  generation: Generation,
  plan: ChatPlan,
  meta: CompletionMeta,
  acc: ChoiceAccumulator,
  abort: AbortController,
  clientSignal: AbortSignal,
  record: (status: string) => Promise<void>,
  idleMs: number,
): Response {
  const head = {
    id: meta.id,
    object: "chat.completion.chunk",
    created: meta.created,
    model: meta.model,
    system_fingerprint: meta.systemFingerprint,
    service_tier: "default",
  };
  // Every chunk is the head, one choice and the usage field, in that order: the head is written
  // out once, and each chunk only adds its choice (the same bytes as stringifying the whole).
  const chunkStart = `data: ${JSON.stringify({ ...head, choices: [] }).slice(0, -2)}`;
  const chunkEnd = `]${plan.includeUsage ? ',"usage":null' : ""}}\n\n`;
  const chunk = (choice: unknown) => `${chunkStart}${JSON.stringify(choice)}${chunkEnd}`;
  let iterator: AsyncIterator<GenerationEvent[]> | null = null;
  let finished = false;
  /** Ends the generation early; drains it so the usage row carries the tokens made so far. */
  const stopEarly = (status: string) => {
    abort.abort();
    if (finished) return;
    finished = true;
    void (async () => {
      try {
        for (let next = await iterator!.next(); !next.done; next = await iterator!.next()) for (const e of next.value) acc.add(e);
      } catch {}
      await record(status);
    })();
  };
  let idle: IdleWatch | null = null;
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      // A client that stops reading holds a sequence and its KV memory: cut it off after idleMs.
      idle = new IdleWatch(idleMs, () => {
        deps.log.warn("stream cut off: the client stopped reading", { request_id: meta.id.replace(/^chatcmpl-/, ""), idle_ms: idleMs });
        stopEarly("idle_timeout");
        try {
          controller.error(new Error("stream idle"));
        } catch {}
      });
      // The role delta goes out at once, so headers and a first byte reach the client before prefill.
      for (let index = 0; index < plan.n; index++) {
        controller.enqueue(encoder.encode(chunk({ index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null })));
      }
      iterator = generation.events[Symbol.asyncIterator]();
      idle.arm();
    },
    async pull(controller) {
      idle?.disarm();
      try {
        // The events that have arrived go out in one write, each choice's text in one chunk.
        // Events without a chunk (the prompt's cache report) are only counted: the client waits
        // for a chunk.
        let text = "";
        while (text === "") {
          const next = await iterator!.next();
          if (next.done) {
            if (clientSignal.aborted) {
              finished = true;
              await record("cancelled");
              controller.close();
              return;
            }
            const usage = plan.includeUsage ? `data: ${JSON.stringify({ ...head, choices: [], usage: acc.usage(generation.promptTokens) })}\n\n` : "";
            // Committed before the last bytes leave, so a crash after [DONE] loses no usage row.
            finished = true;
            await record(abort.signal.aborted ? "interrupted" : "ok");
            controller.enqueue(encoder.encode(`${usage}data: [DONE]\n\n`));
            controller.close();
            return;
          }
          for (const e of coalesceEvents(next.value)) {
            acc.add(e);
            const choice = chunkChoice(e, plan.logprobs);
            if (choice) text += chunk(choice);
          }
        }
        controller.enqueue(encoder.encode(text));
        idle?.arm();
      } catch (e) {
        // The client went away while this chunk was made: a cancellation (billed for what was
        // made), not a failed generation.
        if (finished || clientSignal.aborted) {
          stopEarly("cancelled");
          return;
        }
        finished = true;
        await record("error");
        const failure = generationFailure(e);
        if (failure) deps.log.warn("generation ended with an error mid-stream", { error: failure.message, code: failure.code });
        else deps.log.error("generation failed mid-stream", { error: (e as Error).message });
        // Headers are gone: the error travels as a final SSE event in OpenAI's error shape.
        controller.enqueue(
          sse(failure?.body() ?? { error: { message: "The server had an error while generating.", type: "server_error", param: null, code: null } }),
        );
        controller.close();
      }
    },
    cancel() {
      idle?.disarm();
      stopEarly("cancelled");
    },
  });
  return new Response(stream, {
    headers: {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      connection: "keep-alive",
      "x-accel-buffering": "no",
    },
  });
}

async function recordUsage(
  deps: ChatDeps,
  key: ApiKeyInfo,
  inflightId: string,
  plan: ChatPlan,
  requestId: string,
  modelId: string,
  promptTokens: number,
  acc: ChoiceAccumulator,
  started: number,
  status: string,
): Promise<void> {
  // Taken now: a write retried after a database outage still says when the request ended.
  const usage = {
    requestId,
    accountId: key.accountId,
    keyId: key.id || null,
    modelId,
    promptTokens,
    completionTokens: acc.completionTokens(),
    cachedTokens: acc.cachedTokens,
    reasoningTokens: acc.reasoningTokens(),
    latencyMs: performance.now() - started,
    status,
    finishReason: acc.finishReason(),
    user: plan.user,
    metadata: plan.metadata,
    createdAt: Date.now(),
  };
  // Usage and its charge land together with the end of the request's reservation, or not at all.
  // A failed generation is not billed; finished and cancelled ones pay for the tokens made.
  const written = await eventually(deps.log, "record usage", { request_id: requestId }, () => deps.store.inflight.finish(inflightId, usage, status !== "error"));
  if (written === false) deps.log.warn("usage not recorded: the request was already recorded as interrupted", { request_id: requestId });
  if (deps.log.logPrompts) {
    deps.log.debug("chat completion", { request_id: requestId, status, choices: acc.choices.map((c) => ({ reasoning: c.reasoning, content: c.content, tool_calls: c.toolCalls })) });
  }
}

/** Ends a registration in flight without a usage row (the request never ran here). */
const endUnrecorded = (deps: ChatDeps, inflightId: string, requestId: string) =>
  eventually(deps.log, "end a request in flight", { request_id: requestId }, () => deps.store.inflight.discard(inflightId));

/**
 * Registers the request in flight with its worst-case price reserved (refused when the credit,
 * less what other requests in flight hold, is used up): recorded once however it ends, even if
 * the node running it dies. Since each reservation covers its request, an account's balance
 * ends below zero by less than one request's reservation, however many nodes admit its requests.
 */
async function admitRequest(deps: ChatDeps, key: ApiKeyInfo, requestId: string, model: CatalogModel, plan: ChatPlan, nodeId: string) {
  const worst = worstCaseTokens(plan, model.contextLength);
  const inflight = await deps.store.inflight.admit({
    requestId,
    accountId: key.accountId,
    keyId: key.id,
    modelId: model.id,
    nodeId,
    promptTokens: worst.prompt,
    completionTokens: worst.completion,
  });
  if (!inflight) throw noCredit();
  return inflight;
}

/** Registers the request in flight (its price reserved) and counts it against the rate limits; both or neither. */
async function admitAndCount(
  deps: ChatDeps,
  key: ApiKeyInfo,
  requestId: string,
  model: CatalogModel,
  plan: ChatPlan,
  nodeId: string,
  estimate: number,
  scope: RequestScope | undefined,
): Promise<{ inflight: { id: string }; ticket: Ticket | undefined }> {
  const inflight = await admitRequest(deps, key, requestId, model, plan, nodeId);
  try {
    return { inflight, ticket: await deps.guard?.admit(key, estimate, true, scope) };
  } catch (e) {
    await endUnrecorded(deps, inflight.id, requestId);
    throw e;
  }
}

/** The ticket of a forwarded request: it settles the forwarding node's token estimate in the shared counters. */
function settlingTicket(deps: ChatDeps, hop: HopIdentity): Ticket {
  return {
    ok: true,
    state: { requests: null, tokens: null },
    finish(actualTokens) {
      if (hop.estimatedTokens <= 0) return;
      deps.store.rates.settle(scopeIds(hop.accountId, hop.keyId), hop.estimatedTokens, actualTokens).catch((e) =>
        deps.log.warn("could not settle a forwarded request's tokens", { request_id: hop.requestId, error: (e as Error).message }),
      );
    },
  };
}

/**
 * A client's request for a model another node serves: admitted and counted here (credit reserved,
 * rate limits taken), run and recorded there, the answer streamed back unchanged.
 */
async function forwardChat(
  deps: ChatDeps,
  request: Request,
  requestId: string,
  scope: RequestScope | undefined,
  key: ApiKeyInfo,
  model: CatalogModel,
  plan: ChatPlan,
  estimate: number,
  body: string,
  target: NodeTarget,
): Promise<Response> {
  const trace = scope?.trace;
  const { inflight, ticket } = await traced(trace, "sluice.admit", () => admitAndCount(deps, key, requestId, model, plan, target.id, estimate, scope), failureCode);
  const abort = new AbortController();
  request.signal.addEventListener("abort", () => abort.abort(), { once: true });
  deps.lifecycle.track(abort);
  const hop: HopIdentity = {
    requestId,
    accountId: key.accountId,
    accountName: key.accountName,
    keyId: key.id,
    inflightId: inflight.id,
    estimatedTokens: ticket?.state.tokens ? estimate : 0,
  };
  const ended = (outcome: ForwardOutcome) => {
    deps.lifecycle.untrack(abort);
    // The slot is freed here; the tokens are settled by the node that counted them.
    ticket?.finish(estimate);
    if (outcome === "ok") return;
    // Refused there before it ran (even before its handler, e.g. while draining): nothing to record.
    if (outcome === "refused") return void endUnrecorded(deps, inflight.id, requestId);
    const interrupt = async () => {
      const done = await eventually(deps.log, "record a forwarded request as interrupted", { request_id: requestId, node: target.id }, () => deps.store.inflight.interrupt(inflight.id));
      if (done) deps.log.warn("forwarded request recorded as interrupted", { request_id: requestId, node: target.id });
    };
    setTimeout(interrupt, INTERRUPT_AFTER_MS).unref();
  };
  // The hop is a client span; the node it goes to continues the trace under it.
  const forward = trace?.begin("sluice.forward", { "sluice.node.target": target.id, "server.address": new URL(target.url).hostname, "http.request.method": "POST" }, SpanKind.CLIENT);
  try {
    const { response, done } = await deps.forwarding!.forward(target, body, hop, abort.signal, forward && trace!.headersFor(forward.context));
    forward?.span.setAttribute("http.response.status_code", response.status);
    trace?.holdForBody();
    void done.then((outcome) => {
      ended(outcome);
      if (outcome === "failed") forward?.span.setStatus({ code: SpanStatusCode.ERROR, message: "node_unavailable" });
      forward?.span.end();
      trace?.end(outcome === "failed" ? "node_unavailable" : undefined);
    });
    return response;
  } catch (e) {
    ended(abort.signal.aborted ? "cancelled" : "failed");
    forward?.span.setStatus({ code: SpanStatusCode.ERROR, message: failureCode(e) });
    forward?.span.end();
    throw e;
  }
}
