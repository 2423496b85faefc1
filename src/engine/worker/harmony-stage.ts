// One choice's harmony channels (gpt-oss): the analysis channel's bodies are reasoning_content,
// the final channel's the content, as vLLM's gpt-oss reasoning parser splits them. The parser
// (structured/reasoning/harmony.ts) says which message each token belongs to; this routes the
// bodies to the two texts and writes the headers the turn needs:
// - the turn's first header: `<|channel|>analysis<|message|>` when the thinking budget has room
//   for it and its `<|end|>`, else `<|channel|>final<|message|>` (what gpt-oss writes itself after
//   the prompt's `<|start|>assistant`; reasoning_effort none/minimal asks for no thinking);
// - at the budget, `<|end|><|start|>assistant<|channel|>final<|message|>`, so the answer follows;
// - under a grammar (response_format, required tools), the final header after the thinking's
//   `<|end|>`, with the end of turn and other headers banned inside the thinking.
// Reasoning tokens are the analysis messages' tokens: header, body and `<|end|>`.
//
// With tools in harmony's own format (calls on the commentary channel), the answer goes to the
// tool-call parser (structured/tools/formats/harmony.ts) with its framing: each message that is
// not thinking as `<|start|>assistant<|channel|>…<|message|>body<|end|>`; at the thinking's budget
// the engine opens `<|start|>assistant` and leaves the channel to the model. When the tools' grammar
// writes the answer (a forced call, strict tools), the engine opens only `<|start|>assistant` after
// the thinking and the grammar writes the headers itself: from there every token is passed on as
// text, markers included (a grammar may spell a marker in plain characters, which the token
// parser here would not read as one).
import { HARMONY_MARKERS, HarmonyStreamParser, type HarmonyEvent, type HarmonyHeader } from "../../structured/reasoning/index.ts";
import type { Detokenizer } from "../text/detokenizer.ts";
import type { TextTokenizer } from "../text/tokenizer.ts";
import type { HarmonySetup } from "./reasoning.ts";
import { banning, setBit, type ReasoningStage, type SplitText, type ThinkingPlan } from "./thinking.ts";

export class HarmonyStage implements ReasoningStage {
  private readonly parser: HarmonyStreamParser;
  /** Tokens the engine feeds next, instead of sampling. */
  private queue: number[] = [];
  private started = false;
  private reasoningText: Detokenizer | null = null;
  private contentText: Detokenizer | null = null;
  /** Some thinking was emitted: a later analysis message is set apart by a blank line. */
  private anyReasoning = false;
  /** Markers that never belong in a body the engine constrains. */
  private readonly framing: number[];
  private banInside: Uint32Array | null = null;
  reasoningTokens = 0;
  /** The answer's messages go to content framed, for the harmony tool-call parser. */
  private readonly framed: boolean;
  /** The grammar writes the answer's headers: the engine opens `<|start|>assistant` only. */
  private readonly grammarHeaders: boolean;
  /** `<|start|>assistant`. */
  private readonly nextAnswer: number[];
  /** The grammar's answer has begun: every token from here is text for the tool-call parser. */
  private answering = false;
  private rawText: Detokenizer | null = null;

  constructor(
    private readonly tokenizer: TextTokenizer,
    private readonly setup: HarmonySetup,
    private readonly plan: ThinkingPlan,
    /** A grammar constrains the answer (the final channel's body, or with grammarHeaders the whole answer). */
    private readonly constrained: boolean,
    calls: { framed: boolean; grammarHeaders: boolean } = { framed: false, grammarHeaders: false },
  ) {
    this.framed = calls.framed;
    this.grammarHeaders = calls.grammarHeaders && constrained;
    this.nextAnswer = setup.nextFinal.slice(0, setup.nextFinal.length - setup.openFinal.length);
    const t = setup.tokens;
    this.framing = [t.start, t.end, t.channel, t.message, t.constrain, t.call];
    this.parser = new HarmonyStreamParser(t, (ids) => {
      const d = tokenizer.createDetokenizer();
      return ids.map((id) => d.push(id)).join("") + d.finish();
    });
  }

  /** The answer's channel is open and the engine feeds nothing: the grammar reads the next token. */
  get thinking(): boolean {
    if (this.grammarHeaders) return !(this.queue.length === 0 && this.answering);
    return !(this.queue.length === 0 && this.parser.message?.channel === "final");
  }

  isAnswer(token: number): boolean {
    return !this.thinking && (this.grammarHeaders || !this.framing.includes(token));
  }

  forced(): number | null {
    if (this.queue.length === 0) this.queue = this.next();
    return this.queue[0] ?? null;
  }

  /** What the engine must write now, if anything. */
  private next(): number[] {
    const s = this.setup;
    if (!this.started) {
      this.started = true;
      // Room for the analysis header, one token of thinking and its end.
      if (this.plan.budget >= s.openAnalysis.length + 2) return [...s.openAnalysis];
      // Free to call a tool: the model writes the header (a thinking it opens is ended at once).
      if (this.framed && !this.constrained) return [];
      if (!this.grammarHeaders) return [...s.openFinal];
      // The prompt's `<|start|>assistant` is open: the grammar writes the header.
      this.answering = true;
      return [];
    }
    if (this.answering) return [];
    const m = this.parser.message;
    if (m?.channel === "analysis" && this.reasoningTokens + 1 >= this.plan.budget) {
      // The thinking ends; then the answer's channel, or with tools the model's (or the grammar's) choice.
      if (this.grammarHeaders) return [s.tokens.end];
      return this.framed && !this.constrained ? [s.tokens.end, ...this.nextAnswer] : [s.tokens.end, ...s.nextFinal];
    }
    if (this.constrained && m === null && this.parser.headerTokens === 0) {
      if (!this.grammarHeaders) return [...s.nextFinal];
      this.answering = true;
      return [...this.nextAnswer];
    }
    return [];
  }

  mask(grammarMask: Uint32Array | null): Uint32Array | null {
    // The grammar writes the answer's framing itself.
    if (grammarMask && this.grammarHeaders) return grammarMask;
    if (grammarMask) {
      for (const id of this.framing) setBit(grammarMask, id, false);
      return grammarMask;
    }
    if (!this.constrained || this.parser.message?.channel !== "analysis") return null;
    // Thinking before a constrained answer: it may end only by <|end|>, after which the engine
    // opens the answer's channel.
    if (!this.banInside) {
      const t = this.setup.tokens;
      this.banInside = banning(this.tokenizer.vocabSize, [...this.tokenizer.eosTokenIds, t.start, t.channel, t.message, t.constrain, t.call, t.return]);
    }
    return this.banInside;
  }

  push(token: number): SplitText {
    if (this.queue[0] === token) this.queue.shift();
    else this.queue = [];
    if (this.answering) return { reasoning: "", content: this.raw().push(token), trimmed: false };
    return this.route(this.parser.push(token), false);
  }

  finish(): SplitText {
    const out = this.route(this.parser.finish(), true);
    if (this.rawText) out.content += this.rawText.finish();
    return out;
  }

  private markerText(id: number): string {
    const key = (Object.keys(HARMONY_MARKERS) as (keyof typeof HARMONY_MARKERS)[]).find((k) => this.setup.tokens[k] === id);
    return key ? HARMONY_MARKERS[key] : "";
  }

  /** The answer as text with its markers, for the tool-call parser. */
  private raw(): Detokenizer {
    return (this.rawText ??= this.tokenizer.createDetokenizer(Object.values(HARMONY_MARKERS)));
  }

  private route(events: HarmonyEvent[], ending: boolean): SplitText {
    let reasoning = "";
    let content = "";
    const toReasoning = (text: string) => {
      if (text === "") return;
      reasoning += text;
      this.anyReasoning = true;
    };
    for (const e of events) {
      if (e.type === "header") {
        reasoning += this.reasoningText?.finish() ?? "";
        content += this.contentText?.finish() ?? "";
        this.reasoningText = this.contentText = null;
        if (isThinking(e.header)) {
          this.reasoningTokens += e.tokens;
          this.reasoningText = this.tokenizer.createDetokenizer();
          if (this.anyReasoning) toReasoning("\n\n");
        } else {
          this.contentText = this.tokenizer.createDetokenizer();
          if (this.framed) content += `${HARMONY_MARKERS.start}${e.header.role}${headerText(e.header)}`;
        }
      } else if (e.type === "body") {
        if (isThinking(e.header)) {
          this.reasoningTokens++;
          toReasoning(this.reasoningText!.push(e.token));
        } else content += this.contentText!.push(e.token);
      } else if (e.type === "end") {
        if (isThinking(e.header)) {
          this.reasoningTokens++;
          toReasoning(this.reasoningText?.finish() ?? "");
          this.reasoningText = null;
        } else {
          content += this.contentText?.finish() ?? "";
          this.contentText = null;
          if (this.framed) content += this.markerText(e.token);
        }
      } else {
        // Tokens outside any message are the model's text all the same: the answer keeps them.
        const d = this.tokenizer.createDetokenizer();
        content += e.tokens.map((id) => d.push(id)).join("") + d.finish();
      }
    }
    if (ending) {
      toReasoning(this.reasoningText?.finish() ?? "");
      content += this.contentText?.finish() ?? "";
      this.reasoningText = this.contentText = null;
    }
    return { reasoning, content, trimmed: false };
  }
}

/** A header as the harmony tool-call parser reads it: channel, recipient, content type. */
const headerText = (h: HarmonyHeader) =>
  `${HARMONY_MARKERS.channel}${h.channel}${h.recipient ? ` to=${h.recipient}` : ""}${h.contentType ? ` ${HARMONY_MARKERS.constrain}${h.contentType}` : ""}${HARMONY_MARKERS.message}`;

/** Analysis is thinking; final, commentary (preambles, calls) and any other channel are the answer's. */
const isThinking = (h: HarmonyHeader) => h.channel === "analysis";
