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
import { HarmonyStreamParser, type HarmonyEvent, type HarmonyHeader } from "../../structured/reasoning/index.ts";
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

  constructor(
    private readonly tokenizer: TextTokenizer,
    private readonly setup: HarmonySetup,
    private readonly plan: ThinkingPlan,
    /** A grammar constrains the answer (the final channel's body). */
    private readonly constrained: boolean,
  ) {
    const t = setup.tokens;
    this.framing = [t.start, t.end, t.channel, t.message, t.constrain, t.call];
    this.parser = new HarmonyStreamParser(t, (ids) => {
      const d = tokenizer.createDetokenizer();
      return ids.map((id) => d.push(id)).join("") + d.finish();
    });
  }

  /** The answer's channel is open and the engine feeds nothing: the grammar reads the next token. */
  get thinking(): boolean {
    return !(this.queue.length === 0 && this.parser.message?.channel === "final");
  }

  isAnswer(token: number): boolean {
    return !this.thinking && !this.framing.includes(token);
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
      return this.plan.budget >= s.openAnalysis.length + 2 ? [...s.openAnalysis] : [...s.openFinal];
    }
    const m = this.parser.message;
    if (m?.channel === "analysis" && this.reasoningTokens + 1 >= this.plan.budget) return [s.tokens.end, ...s.nextFinal];
    if (this.constrained && m === null && this.parser.headerTokens === 0) return [...s.nextFinal];
    return [];
  }

  mask(grammarMask: Uint32Array | null): Uint32Array | null {
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
    return this.route(this.parser.push(token), false);
  }

  finish(): SplitText {
    return this.route(this.parser.finish(), true);
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
        } else this.contentText = this.tokenizer.createDetokenizer();
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

/** Analysis is thinking; final, commentary (preambles, calls) and any other channel are the answer's. */
const isThinking = (h: HarmonyHeader) => h.channel === "analysis";
