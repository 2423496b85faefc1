// OpenAI's harmony format (gpt-oss): the assistant's turn is a run of messages, each a header and
// a body. `<|start|>assistant<|channel|>analysis<|message|>…<|end|>` is thinking;
// `<|start|>assistant<|channel|>final<|message|>…<|return|>` the answer; a message on the
// commentary channel with a recipient (`to=functions.get_weather`, in the header before or after
// the channel, optionally with `<|constrain|>json`) is a tool call ending in `<|call|>`, one
// without a recipient a preamble for the user. The chat template's generation prompt is
// `<|start|>assistant`, so the output begins inside a header.
//
// This parser reads the output token by token (the markers are special tokens, which a text
// detokeniser would drop) and says, for each token, which message it belongs to: the engine routes
// analysis bodies to reasoning_content and final bodies to content; a tool-call parser reads the
// commentary bodies with a recipient. Malformed output loses nothing: a header that never reaches
// `<|message|>` comes back as stray tokens, and a marker inside a body starts a new header.
// (Spec: the openai-cookbook's "OpenAI harmony response format" and openai/harmony.)

/** The ids of harmony's markers in the model's vocabulary (each a single special token). */
export interface HarmonyTokens {
  start: number;
  end: number;
  message: number;
  channel: number;
  constrain: number;
  /** End of the turn with the answer. */
  return: number;
  /** End of the turn with a tool call. */
  call: number;
}

export const HARMONY_MARKERS: Record<keyof HarmonyTokens, string> = {
  start: "<|start|>",
  end: "<|end|>",
  message: "<|message|>",
  channel: "<|channel|>",
  constrain: "<|constrain|>",
  return: "<|return|>",
  call: "<|call|>",
};

/** The markers' ids from a vocabulary lookup, or null when one is missing (not a harmony tokenizer). */
export function harmonyTokens(idOf: (content: string) => number | null | undefined): HarmonyTokens | null {
  const out: Partial<HarmonyTokens> = {};
  for (const [key, text] of Object.entries(HARMONY_MARKERS) as [keyof HarmonyTokens, string][]) {
    const id = idOf(text);
    if (id === null || id === undefined) return null;
    out[key] = id;
  }
  return out as HarmonyTokens;
}

/** A harmony chat template: it writes channels and the `<|start|>`/`<|message|>` framing. */
export function isHarmonyTemplate(source: string): boolean {
  return source.includes("<|channel|>") && source.includes("<|message|>") && source.includes("<|start|>");
}

export interface HarmonyHeader {
  /** "assistant" unless the header names another role. */
  role: string;
  /** "analysis", "commentary", "final", or whatever the model wrote ("" when none). */
  channel: string;
  /** The recipient of a tool call (`functions.get_weather`), or null. */
  recipient: string | null;
  /** The body's declared type (`json` after `<|constrain|>` or after the channel), or null. */
  contentType: string | null;
}

/**
 * The function a message calls (`to=functions.get_weather` → "get_weather"), or null: a tool
 * call is a message with a `functions.` recipient, on the commentary channel in gpt-oss's output.
 */
export function harmonyFunctionName(header: HarmonyHeader): string | null {
  return header.recipient?.startsWith("functions.") ? header.recipient.slice("functions.".length) : null;
}

export type HarmonyEvent =
  /** A header was completed by `<|message|>`; `tokens` counts its tokens (the `<|message|>` included). */
  | { type: "header"; header: HarmonyHeader; tokens: number }
  /** A token of the current message's body. */
  | { type: "body"; header: HarmonyHeader; token: number }
  /** The message ended: `<|end|>`, or the turn's end (`<|return|>`, `<|call|>`). */
  | { type: "end"; header: HarmonyHeader; token: number }
  /** Tokens that belong to no message (a header that was never completed, text between messages). */
  | { type: "stray"; tokens: number[] };

/**
 * A streaming parser of one assistant turn. `decode` turns a header's non-marker tokens into text
 * (to read channel, recipient and type).
 */
export class HarmonyStreamParser {
  /** The current message's header while in its body, else null (between messages or in a header). */
  private current: HarmonyHeader | null = null;
  /** Tokens of the header being read, after its `<|start|>` (or from the turn's start). */
  private header: number[] = [];
  /** Whether `header` began with the generation prompt's `<|start|>assistant` (role given). */
  private roleGiven: boolean;

  constructor(
    private readonly tokens: HarmonyTokens,
    private readonly decode: (ids: number[]) => string,
    /** The prompt ends with `<|start|>assistant`: the output begins in that message's header. */
    opts: { startsInHeader?: boolean } = {},
  ) {
    this.roleGiven = opts.startsInHeader ?? true;
  }

  /** The message whose body the next token would continue, or null. */
  get message(): HarmonyHeader | null {
    return this.current;
  }

  /** Tokens read of an unfinished header (0: none open). */
  get headerTokens(): number {
    return this.header.length;
  }

  push(token: number): HarmonyEvent[] {
    const t = this.tokens;
    const out: HarmonyEvent[] = [];
    if (this.current) {
      if (token === t.end || token === t.return || token === t.call) {
        out.push({ type: "end", header: this.current, token });
        this.current = null;
        this.roleGiven = false;
        return out;
      }
      if (token === t.start || token === t.channel) {
        // A marker where the body should go on: the message ends here and a header begins.
        this.current = null;
        this.roleGiven = token === t.channel;
        if (token === t.channel) this.header.push(token);
        return out;
      }
      out.push({ type: "body", header: this.current, token });
      return out;
    }
    if (token === t.start) {
      // A new message: what was read as a header was none.
      if (this.header.length) out.push({ type: "stray", tokens: this.header });
      this.header = [];
      this.roleGiven = false;
      return out;
    }
    if (token === t.end || token === t.return || token === t.call) {
      out.push({ type: "stray", tokens: [...this.header, token] });
      this.header = [];
      return out;
    }
    this.header.push(token);
    if (token === t.message) {
      const header = this.readHeader(this.header.slice(0, -1));
      out.push({ type: "header", header, tokens: this.header.length });
      this.current = header;
      this.header = [];
    }
    return out;
  }

  /** The end of the output: an unfinished header's tokens are stray. */
  finish(): HarmonyEvent[] {
    const out: HarmonyEvent[] = this.header.length ? [{ type: "stray", tokens: this.header }] : [];
    this.header = [];
    return out;
  }

  /** `assistant<|channel|>commentary to=functions.f <|constrain|>json` and its variants. */
  private readHeader(ids: number[]): HarmonyHeader {
    const t = this.tokens;
    // Markers become separators the text cannot hold.
    let text = "";
    let run: number[] = [];
    const flush = () => {
      if (run.length) text += this.decode(run);
      run = [];
    };
    for (const id of ids) {
      if (id === t.channel || id === t.constrain) {
        flush();
        text += id === t.channel ? "\u0000channel " : "\u0000constrain ";
      } else run.push(id);
    }
    flush();
    const parts = text.split("\u0000");
    const lead = parts[0]!.trim();
    let role = this.roleGiven ? "assistant" : "";
    let channel = "";
    let recipient: string | null = null;
    let contentType: string | null = null;
    const words = (s: string) => s.split(/\s+/).filter(Boolean);
    const takeRecipient = (ws: string[]) => ws.filter((w) => (w.startsWith("to=") ? ((recipient ??= w.slice(3)), false) : true));
    const leadWords = takeRecipient(words(lead));
    if (!this.roleGiven && leadWords.length) role = leadWords.shift()!;
    for (const part of parts.slice(1)) {
      const [kind, ...rest] = words(part);
      const ws = takeRecipient(rest);
      if (kind === "channel") {
        channel = ws.shift() ?? "";
        if (ws.length) contentType ??= ws.join(" ");
      } else if (kind === "constrain") contentType = ws.join(" ") || contentType;
    }
    return { role: role || "assistant", channel, recipient, contentType };
  }
}
