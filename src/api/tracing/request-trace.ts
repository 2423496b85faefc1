// One request's trace: its server span (HTTP semantic conventions), the steps the API times as
// children of it, and the trace context handed on to a node the request is forwarded to. A span
// that is not recording (sampled out) costs the steps nothing: they are skipped.
import { defaultTextMapSetter, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Span, type TextMapPropagator, type TimeInput, type Tracer } from "@opentelemetry/api";

export class RequestTrace {
  private status: number | null = null;
  /** The span ends when the answer's body does (a stream, a forwarded answer), not at its head. */
  private held = false;
  private endAsked = false;
  private ended = false;

  constructor(
    private readonly tracer: Tracer,
    readonly span: Span,
    /** The context with the server span: the parent of the request's steps. */
    readonly context: Context,
    private readonly propagator: TextMapPropagator,
    /** Prompt and completion text (and the key's id) may go in spans (serve --trace-content). */
    readonly traceContent: boolean,
  ) {}

  get recording(): boolean {
    return this.span.isRecording();
  }

  /**
   * Response headers naming the trace: W3C Trace Context Level 2's traceresponse (this server
   * span's context), and the trace id alone for people who grep logs and dashboards for it.
   */
  responseHeaders(): Record<string, string> {
    const c = this.span.spanContext();
    return { traceresponse: `00-${c.traceId}-${c.spanId}-0${c.traceFlags & 1}`, "x-trace-id": c.traceId };
  }

  setAttributes(attributes: Attributes): void {
    if (!this.ended) this.span.setAttributes(attributes);
  }

  /**
   * A step that ran from `start` to `end` (performance.now() or epoch milliseconds), as a child of
   * `parent` (default: the server span); `error`: what went wrong, as a code (no client text).
   */
  step(name: string, start: TimeInput, end: TimeInput, attributes?: Attributes, error?: string, parent: Context = this.context): void {
    if (!this.recording) return;
    const s = this.tracer.startSpan(name, { startTime: start, attributes }, parent);
    if (error !== undefined) s.setStatus({ code: SpanStatusCode.ERROR, message: error });
    s.end(end);
  }

  /** A step that runs until its span is ended, as a child of the server span; its context parents its own steps. */
  begin(name: string, attributes?: Attributes, kind: SpanKind = SpanKind.INTERNAL): { span: Span; context: Context } {
    const span = this.tracer.startSpan(name, { kind, attributes }, this.context);
    return { span, context: trace.setSpan(this.context, span) };
  }

  /** The traceparent (and tracestate) of `context`, for a request this one makes on its behalf. */
  headersFor(context: Context): Record<string, string> {
    const carrier: Record<string, string> = {};
    this.propagator.inject(context, carrier, defaultTextMapSetter);
    return carrier;
  }

  /** The server span ends when end() is called (the body finished), not when the head goes out. */
  holdForBody(): void {
    this.held = true;
  }

  /** The answer's head went out with `status` (and an OpenAI error code when it is an error). */
  answered(status: number, errorCode?: string | null): void {
    if (this.ended || this.status !== null) return;
    this.status = status;
    this.span.setAttribute("http.response.status_code", status);
    if (status >= 400) this.span.setAttribute("error.type", errorCode ?? String(status));
    // HTTP's conventions for a server: a 4xx is the client's doing, not the span's error.
    if (status >= 500) this.span.setStatus({ code: SpanStatusCode.ERROR, message: errorCode ?? undefined });
    if (!this.held || this.endAsked) this.finish();
  }

  /** The answer's body ended; `error`: it broke off (a code, no client text). */
  end(error?: string): void {
    if (this.ended) return;
    if (error !== undefined) {
      this.span.setAttribute("error.type", error);
      this.span.setStatus({ code: SpanStatusCode.ERROR, message: error });
    }
    if (this.status === null) this.endAsked = true;
    else this.finish();
  }

  private finish(): void {
    this.ended = true;
    this.span.end();
  }
}

/**
 * Runs `fn` as the step `name` of the request's trace when it has a recording one; a failure is
 * marked on the step with `codeOf(error)` (a code, never the error's text: it may quote the client).
 */
export async function traced<T>(trace: RequestTrace | undefined, name: string, fn: () => Promise<T>, codeOf: (e: unknown) => string, attributes?: Attributes): Promise<T> {
  if (!trace?.recording) return fn();
  const start = performance.now();
  try {
    const value = await fn();
    trace.step(name, start, performance.now(), attributes);
    return value;
  } catch (e) {
    trace.step(name, start, performance.now(), attributes, codeOf(e));
    throw e;
  }
}
