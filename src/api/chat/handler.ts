// POST /v1/chat/completions: authenticate, validate, hand to the engine, answer whole or as SSE,
// and record usage however the request ends.
import { EngineBusyError, EngineRequestError, EngineUnavailableError, type Engine, type Generation } from "../../engine/types.ts";
import type { Logger } from "../../log.ts";
import type { ApiKeyInfo, Store } from "../../store/index.ts";
import { authenticate } from "../auth.ts";
import { readJsonBody } from "../body.ts";
import { ApiError, badRequest, modelNotFound } from "../errors.ts";
import type { Lifecycle } from "../lifecycle.ts";
import { estimateRequestTokens } from "../limits/estimate.ts";
import type { RateGuard } from "../limits/guard.ts";
import { applyRequestLimits, DEFAULT_REQUEST_LIMITS, type RequestLimits } from "../limits/request-limits.ts";
import type { RequestScope } from "../limits/scope.ts";
import { IdleWatch, watchGeneration } from "../limits/watch.ts";
import type { HttpMetrics } from "../metrics.ts";
import { ChatCompletionRequest } from "../schemas.ts";
import { findProblem } from "../validate.ts";
import { ImageInputError } from "../../vision/errors.ts";
import { imagePolicy } from "../../vision/policy.ts";
import { resolveImageParts } from "../../vision/resolve.ts";
import { planChat, type ChatPlan } from "./request.ts";
import { ChoiceAccumulator, chunkChoice, type CompletionMeta } from "./response.ts";

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
}

const encoder = new TextEncoder();
const sse = (data: unknown) => encoder.encode(`data: ${JSON.stringify(data)}\n\n`);

export async function handleChat(deps: ChatDeps, request: Request, requestId: string, scope?: RequestScope): Promise<Response> {
  const key = authenticate(deps.store, request);
  if (scope) scope.accountId = key.accountId;
  const limits = deps.limits ?? DEFAULT_REQUEST_LIMITS;
  const body = await readJsonBody(request, deps.maxBodyBytes);
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw badRequest("The request body must be a JSON object.", null, "invalid_body");
  }
  const problem = findProblem(ChatCompletionRequest, body);
  if (problem) throw badRequest(problem.message, problem.param, "invalid_value");
  const req = body as ChatCompletionRequest;
  const model = deps.store.catalog.getForAccount(key.accountId, req.model);
  if (!model) throw modelNotFound(req.model);
  const plan = applyRequestLimits(planChat(req, model), limits);
  // Prompt text reaches the log only when the operator asked for it (serve --log-prompts).
  if (deps.log.logPrompts) deps.log.debug("chat prompt", { request_id: requestId, model: model.id, messages: plan.messages });
  if (!deps.store.billing.hasCredit(key.accountId)) {
    throw new ApiError(429, "You exceeded your current quota: the account has no credit left. Top it up in the account workspace.", "insufficient_quota", null, "insufficient_quota");
  }
  // Remote images are fetched (inline ones checked) before any engine work; a bad one is a 400 naming its part.
  try {
    plan.messages = await resolveImageParts(plan.messages, imagePolicy());
  } catch (e) {
    if (e instanceof ImageInputError) throw badRequest(e.message, e.param, "invalid_image");
    throw e;
  }
  // Counted with the prompt estimate plus max_tokens now, settled with the real tokens at the end.
  const ticket = deps.guard?.admit(key, estimateRequestTokens(plan, model.contextLength), true, scope);

  const started = performance.now();
  const abort = new AbortController();
  request.signal.addEventListener("abort", () => abort.abort(), { once: true });
  deps.lifecycle.track(abort);
  let generation: Generation;
  try {
    // The engine takes turns between accounts (and admits higher priorities first) on a busy model.
    generation = await deps.engine.start({ ...plan, requestId, signal: abort.signal, fairnessKey: String(key.accountId), priority: key.accountPriority });
  } catch (e) {
    deps.lifecycle.untrack(abort);
    ticket?.finish(0);
    if (e instanceof EngineRequestError) throw badRequest(e.message, e.param, e.code);
    // The account has its share of the model's queue waiting: its own limit, a 429.
    if (e instanceof EngineBusyError) {
      throw new ApiError(429, e.message, "rate_limit_error", null, "account_queue_full", {
        "retry-after": String(e.retryAfterSeconds),
      });
    }
    // The model cannot take anyone now (queue full, no memory to load it, a failed load): a 503.
    if (e instanceof EngineUnavailableError) {
      throw new ApiError(503, e.message, "service_unavailable", null, e.code, { "retry-after": String(e.retryAfterSeconds) });
    }
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
  let recorded = false;
  const record = (status: string) => {
    // Exactly once per request: a client abort can reach both the stream's cancel and a pending pull.
    if (recorded) return;
    recorded = true;
    watched.clear();
    // A generation ended by the wall-time limit is recorded as such (its finish_reason is "length").
    const final = watched.timedOut() && status !== "error" ? "time_limit" : status;
    recordUsage(deps, key, plan, requestId, model.id, generation.promptTokens, acc, started, final);
    ticket?.finish(generation.promptTokens + acc.completionTokens());
    deps.metrics?.generation(model.id, final, generation.promptTokens, acc.completionTokens());
    deps.lifecycle.untrack(abort);
  };

  if (!plan.stream) {
    try {
      for await (const e of generation.events) acc.add(e);
    } catch (e) {
      record("error");
      throw e;
    }
    if (request.signal.aborted) {
      record("cancelled");
      return new Response(null, { status: 499 });
    }
    // Aborted by a shutdown rather than the client: the client still gets what was made.
    record(abort.signal.aborted ? "interrupted" : "ok");
    return Response.json(acc.toCompletion(meta, generation.promptTokens));
  }
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
  record: (status: string) => void,
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
  const usageField = plan.includeUsage ? { usage: null } : {};
  let iterator: AsyncIterator<(typeof generation.events) extends AsyncIterable<infer E> ? E : never> | null = null;
  let finished = false;
  /** Ends the generation early; drains it so the usage row carries the tokens made so far. */
  const stopEarly = (status: string) => {
    abort.abort();
    if (finished) return;
    finished = true;
    void (async () => {
      try {
        for (let next = await iterator!.next(); !next.done; next = await iterator!.next()) acc.add(next.value);
      } catch {}
      record(status);
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
        controller.enqueue(
          sse({
            ...head,
            choices: [{ index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }],
            ...usageField,
          }),
        );
      }
      iterator = generation.events[Symbol.asyncIterator]();
      idle.arm();
    },
    async pull(controller) {
      idle?.disarm();
      try {
        let next = await iterator!.next();
        let choice = next.done ? null : chunkChoice(next.value, plan.logprobs);
        // Events without a chunk (the prompt's cache report) are only counted: the client waits for a chunk.
        while (!next.done && choice === null) {
          acc.add(next.value);
          next = await iterator!.next();
          choice = next.done ? null : chunkChoice(next.value, plan.logprobs);
        }
        if (next.done) {
          if (clientSignal.aborted) {
            finished = true;
            record("cancelled");
            controller.close();
            return;
          }
          if (plan.includeUsage) controller.enqueue(sse({ ...head, choices: [], usage: acc.usage(generation.promptTokens) }));
          // Committed before the last bytes leave, so a crash after [DONE] loses no usage row.
          finished = true;
          record(abort.signal.aborted ? "interrupted" : "ok");
          controller.enqueue(encoder.encode("data: [DONE]\n\n"));
          controller.close();
          return;
        }
        acc.add(next.value);
        controller.enqueue(sse({ ...head, choices: [choice], ...usageField }));
        idle?.arm();
      } catch (e) {
        // The client went away while this chunk was made: a cancellation (billed for what was
        // made), not a failed generation.
        if (finished || clientSignal.aborted) {
          stopEarly("cancelled");
          return;
        }
        finished = true;
        record("error");
        deps.log.error("generation failed mid-stream", { error: (e as Error).message });
        // Headers are gone: the error travels as a final SSE event in OpenAI's error shape.
        controller.enqueue(
          sse({ error: { message: "The server had an error while generating.", type: "server_error", param: null, code: null } }),
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

function recordUsage(
  deps: ChatDeps,
  key: ApiKeyInfo,
  plan: ChatPlan,
  requestId: string,
  modelId: string,
  promptTokens: number,
  acc: ChoiceAccumulator,
  started: number,
  status: string,
) {
  try {
    // Usage and its charge land together or not at all.
    deps.store.atomically(() => {
      deps.store.usage.record({
        requestId,
        accountId: key.accountId,
        keyId: key.id,
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
      });
      // A failed generation is not billed; finished and cancelled ones pay for the tokens made.
      if (status !== "error") {
        deps.store.billing.charge({ accountId: key.accountId, requestId, modelId, promptTokens, cachedTokens: acc.cachedTokens, completionTokens: acc.completionTokens() });
      }
    });
  } catch (e) {
    deps.log.error("could not record usage", { request_id: requestId, error: (e as Error).message });
  }
  if (deps.log.logPrompts) {
    deps.log.debug("chat completion", { request_id: requestId, status, choices: acc.choices.map((c) => ({ reasoning: c.reasoning, content: c.content, tool_calls: c.toolCalls })) });
  }
}
