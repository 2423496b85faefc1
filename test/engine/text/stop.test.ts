import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { StopMatcher } from "../../../src/engine/text/stop.ts";

function run(stops: string[], pieces: string[]): { out: string; stopped: boolean; emitted: string[] } {
  const m = new StopMatcher(stops);
  const emitted: string[] = [];
  for (const p of pieces) {
    const r = m.push(p);
    emitted.push(r.text);
    if (r.stopped) return { out: emitted.join(""), stopped: true, emitted };
  }
  emitted.push(m.flush());
  return { out: emitted.join(""), stopped: false, emitted };
}

/** Reference on the whole text: cut before the first completed stop string. */
function reference(stops: string[], text: string): { out: string; stopped: boolean } {
  for (let end = 1; end <= text.length; end++) {
    let start = -1;
    for (const s of stops) {
      if (s.length > 0 && end >= s.length && text.slice(end - s.length, end) === s) {
        if (start < 0 || end - s.length < start) start = end - s.length;
      }
    }
    if (start >= 0) return { out: text.slice(0, start), stopped: true };
  }
  return { out: text, stopped: false };
}

describe("StopMatcher", () => {
  test("a stop string spanning three pieces is held back and never emitted", () => {
    const r = run(["</answer>"], ["The end</", "ans", "wer>", " more"]);
    expect(r).toEqual({ out: "The end", stopped: true, emitted: ["The end", "", "", ""].slice(0, 3) });
  });

  test("held text that turns out not to be a stop is released", () => {
    const m = new StopMatcher(["STOP"]);
    expect(m.push("abc ST")).toEqual({ text: "abc ", stopped: false });
    expect(m.push("OP?")).toEqual({ text: "", stopped: true, stop: "STOP" });
    const n = new StopMatcher(["STOP"]);
    expect(n.push("abc ST").text).toBe("abc ");
    expect(n.push("ORM").text).toBe("STORM");
    expect(n.push("S").text).toBe("");
    expect(n.flush()).toBe("S");
  });

  test("overlapping stops: the first completed one wins", () => {
    expect(run(["abcd", "bc"], ["a", "b", "c", "d"]).out).toBe("a");
    expect(run(["abcd", "bc"], ["abcd"]).out).toBe("a");
    expect(run(["bcd", "abcd"], ["xabcd"]).out).toBe("x");
    expect(run(["aab"], ["a", "a", "a", "b"]).out).toBe("a");
  });

  test("several stop strings, none matching, emit everything", () => {
    expect(run(["\n\n", "User:"], ["Hello", " Use", "r", "s\n", "x"])).toEqual({
      out: "Hello Users\nx",
      stopped: false,
      emitted: ["Hello", " ", "", "Users", "\nx", ""],
    });
  });

  test("property: any split gives the whole-text result", () => {
    const alphabet = fc.constantFrom("a", "b", "c", "é", "😀");
    const str = fc.array(alphabet, { minLength: 0, maxLength: 12 }).map((a) => a.join(""));
    fc.assert(
      fc.property(
        fc.array(fc.array(alphabet, { minLength: 1, maxLength: 4 }).map((a) => a.join("")), { minLength: 1, maxLength: 3 }),
        fc.array(str, { minLength: 1, maxLength: 8 }),
        (stops, pieces) => {
          const whole = reference(stops, pieces.join(""));
          const streamed = run(stops, pieces);
          expect({ out: streamed.out, stopped: streamed.stopped }).toEqual(whole);
        },
      ),
      { numRuns: 2000, seed: 42 },
    );
  });
});
