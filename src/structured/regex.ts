// ECMAScript regular expressions (the dialect of JSON Schema's `pattern`) to byte-level Re over
// the JSON encoding of the string content. Constructs that are not regular (backreferences,
// lookaround, word boundaries) or need Unicode tables (\p{..}) are refused, never approximated.

import { alt, type Re, rep, seq, star } from "./automaton.ts";
import { budgetDepth, budgetTick } from "./compile-budget.ts";
import { complementRanges, type CpRange, cpSetToJson, JSON_CHAR } from "./json-text.ts";

export class RegexUnsupportedError extends Error {}

const DIGIT: CpRange[] = [[0x30, 0x39]];
const WORD: CpRange[] = [[0x30, 0x39], [0x41, 0x5a], [0x5f, 0x5f], [0x61, 0x7a]];
const SPACE: CpRange[] = [
  [0x09, 0x0d], [0x20, 0x20], [0xa0, 0xa0], [0x1680, 0x1680], [0x2000, 0x200a],
  [0x2028, 0x2029], [0x202f, 0x202f], [0x205f, 0x205f], [0x3000, 0x3000], [0xfeff, 0xfeff],
];
const DOT: CpRange[] = complementRanges([[0x0a, 0x0a], [0x0d, 0x0d], [0x2028, 0x2029]]);

type Node = { re: Re } | { anchor: "^" | "$" };

class Parser {
  private i = 0;
  /** Groups open at this point (bounded: the parser recurses into each). */
  private depth = 0;
  constructor(private readonly src: string) {}

  parse(): Re {
    const alts = this.alternatives(true);
    if (this.i < this.src.length) throw new RegexUnsupportedError(`unexpected ")" at ${this.i}`);
    return alt(...alts);
  }

  /** Top-level alternatives handle anchors: unanchored ends match anywhere in the string. */
  private alternatives(top: boolean): Re[] {
    const out: Re[] = [];
    for (;;) {
      const nodes = this.sequence();
      const items: Re[] = [];
      let anchoredStart = false;
      let anchoredEnd = false;
      nodes.forEach((n, idx) => {
        if ("anchor" in n) {
          if (top && n.anchor === "^" && idx === 0) anchoredStart = true;
          else if (top && n.anchor === "$" && idx === nodes.length - 1) anchoredEnd = true;
          else throw new RegexUnsupportedError(`anchor "${n.anchor}" inside the pattern`);
        } else items.push(n.re);
      });
      if (top && !anchoredStart) items.unshift(star(JSON_CHAR));
      if (top && !anchoredEnd) items.push(star(JSON_CHAR));
      out.push(seq(...items));
      if (this.src[this.i] !== "|") return out;
      this.i++;
    }
  }

  private sequence(): Node[] {
    const nodes: Node[] = [];
    while (this.i < this.src.length && this.src[this.i] !== "|" && this.src[this.i] !== ")") {
      const atom = this.atom();
      if ("anchor" in atom) {
        nodes.push(atom);
        continue;
      }
      nodes.push({ re: this.quantifier(atom.re) });
    }
    return nodes;
  }

  private quantifier(re: Re): Re {
    const c = this.src[this.i];
    let min: number;
    let max: number;
    if (c === "*") ((min = 0), (max = Infinity), this.i++);
    else if (c === "+") ((min = 1), (max = Infinity), this.i++);
    else if (c === "?") ((min = 0), (max = 1), this.i++);
    else if (c === "{") {
      const m = /^\{(\d+)(,(\d*))?\}/.exec(this.src.slice(this.i));
      if (!m) return re; // a literal "{" in ECMAScript's annex B grammar; handled by atom
      this.i += m[0].length;
      min = Number(m[1]);
      max = m[2] === undefined ? min : m[3] === "" ? Infinity : Number(m[3]);
    } else return re;
    if (this.src[this.i] === "?") this.i++; // lazy quantifiers match the same language
    return rep(re, min, max);
  }

  private atom(): Node {
    budgetTick();
    const c = this.src[this.i++];
    switch (c) {
      case "^":
      case "$":
        return { anchor: c };
      case ".":
        return { re: cpSetToJson(DOT) };
      case "(": {
        if (this.src[this.i] === "?") {
          if (this.src.startsWith("?:", this.i)) this.i += 2;
          else if (/^\?<[A-Za-z_$][\w$]*>/.test(this.src.slice(this.i))) this.i = this.src.indexOf(">", this.i) + 1;
          else throw new RegexUnsupportedError("lookaround assertions");
        }
        budgetDepth(++this.depth);
        const alts = this.alternatives(false);
        this.depth--;
        if (this.src[this.i] !== ")") throw new RegexUnsupportedError("unbalanced parenthesis");
        this.i++;
        return { re: alt(...alts) };
      }
      case "[":
        return { re: cpSetToJson(this.charClass()) };
      case "\\":
        return { re: this.escapeAtom() };
      case "*":
      case "+":
      case "?":
        throw new RegexUnsupportedError(`nothing to repeat at ${this.i - 1}`);
      default: {
        const cp = this.src.codePointAt(this.i - 1)!;
        if (cp > 0xffff) this.i++;
        return { re: cpSetToJson([[cp, cp]]) };
      }
    }
  }

  private escapeAtom(): Re {
    const c = this.src[this.i];
    if (c === "b" || c === "B") throw new RegexUnsupportedError("word boundary assertions");
    if (c !== undefined && /[1-9]/.test(c)) throw new RegexUnsupportedError("backreferences");
    if (c === "k") throw new RegexUnsupportedError("backreferences");
    return cpSetToJson(this.escapeSet(false));
  }

  /** The escape after a backslash as a set of code points. */
  private escapeSet(inClass: boolean): CpRange[] {
    const c = this.src[this.i++];
    if (c === undefined) throw new RegexUnsupportedError("trailing backslash");
    switch (c) {
      case "d": return DIGIT;
      case "D": return complementRanges(DIGIT);
      case "w": return WORD;
      case "W": return complementRanges(WORD);
      case "s": return SPACE;
      case "S": return complementRanges(SPACE);
      case "t": return [[9, 9]];
      case "n": return [[10, 10]];
      case "v": return [[11, 11]];
      case "f": return [[12, 12]];
      case "r": return [[13, 13]];
      case "0": return [[0, 0]];
      case "b":
        if (inClass) return [[8, 8]];
        break;
      case "p":
      case "P":
        throw new RegexUnsupportedError("Unicode property escapes");
      case "c": {
        const l = this.src.charCodeAt(this.i++);
        return [[l % 32, l % 32]];
      }
      case "x": {
        const h = this.src.slice(this.i, this.i + 2);
        if (!/^[0-9a-fA-F]{2}$/.test(h)) throw new RegexUnsupportedError("bad \\x escape");
        this.i += 2;
        const v = parseInt(h, 16);
        return [[v, v]];
      }
      case "u": {
        const braced = /^\{([0-9a-fA-F]+)\}/.exec(this.src.slice(this.i));
        if (braced) {
          this.i += braced[0].length;
          const v = parseInt(braced[1], 16);
          return [[v, v]];
        }
        const h = this.src.slice(this.i, this.i + 4);
        if (!/^[0-9a-fA-F]{4}$/.test(h)) throw new RegexUnsupportedError("bad \\u escape");
        this.i += 4;
        const v = parseInt(h, 16);
        if (v >= 0xd800 && v <= 0xdfff) throw new RegexUnsupportedError("surrogate escapes");
        return [[v, v]];
      }
    }
    if (/[A-Za-z0-9]/.test(c)) throw new RegexUnsupportedError(`escape \\${c}`);
    const cp = c.codePointAt(0)!;
    return [[cp, cp]];
  }

  private charClass(): CpRange[] {
    let negate = false;
    if (this.src[this.i] === "^") ((negate = true), this.i++);
    const ranges: CpRange[] = [];
    while (this.i < this.src.length && this.src[this.i] !== "]") {
      const lo = this.classAtom();
      if (this.src[this.i] === "-" && this.src[this.i + 1] !== "]" && this.i + 1 < this.src.length) {
        this.i++;
        const hi = this.classAtom();
        if (lo.length !== 1 || hi.length !== 1 || lo[0][0] !== lo[0][1] || hi[0][0] !== hi[0][1]) {
          throw new RegexUnsupportedError("class escape as a range bound");
        }
        if (hi[0][0] < lo[0][0]) throw new RegexUnsupportedError("range out of order in character class");
        ranges.push([lo[0][0], hi[0][0]]);
      } else ranges.push(...lo);
    }
    if (this.src[this.i] !== "]") throw new RegexUnsupportedError("unterminated character class");
    this.i++;
    return negate ? complementRanges(ranges) : ranges;
  }

  private classAtom(): CpRange[] {
    const c = this.src[this.i++];
    if (c === "\\") return this.escapeSet(true);
    const cp = this.src.codePointAt(this.i - 1)!;
    if (cp > 0xffff) this.i++;
    return [[cp, cp]];
  }
}

/** The pattern as Re over JSON string content bytes (between the quotes). */
export function patternToRe(pattern: string): Re {
  if (pattern === "") return star(JSON_CHAR);
  return new Parser(pattern).parse();
}

