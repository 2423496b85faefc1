// Byte-level automata: a small regular-expression AST with rule calls, Thompson NFAs, and subset
// construction into per-rule DFAs. Everything the schema compiler produces goes through here, so
// patterns, formats, numbers and JSON structure all end up as one kind of object the matcher knows.

import { budgetAutomatonState, budgetNfaState, budgetRepeat, budgetTick } from "./compile-budget.ts";
import { type ByteSeq, encodeUtf8 } from "./utf8.ts";

export type Re =
  | { readonly k: "set"; readonly seqs: readonly ByteSeq[] }
  | { readonly k: "lit"; readonly bytes: readonly number[] }
  | { readonly k: "seq"; readonly items: readonly Re[] }
  | { readonly k: "alt"; readonly items: readonly Re[] }
  | { readonly k: "rep"; readonly item: Re; readonly min: number; readonly max: number }
  | { readonly k: "call"; readonly rule: number }
  | { readonly k: "dfa"; readonly dfa: RuleDfa }
  | {
      readonly k: "members";
      readonly members: readonly Re[];
      readonly required: readonly boolean[];
      readonly extra: Re | null;
      readonly sep: Re;
      /** At least one member is written (the empty object is spelt apart, with its own spacing). */
      readonly nonEmpty: boolean;
    };

/**
 * Comma-separated object members in declared order, optional ones skippable, then any number of
 * extra members. Emitted with shared states (linear in the member count); as a plain regular
 * expression the "was anything written yet" choice would copy the tail once per optional member.
 */
export const members = (list: readonly Re[], required: readonly boolean[], extra: Re | null, sep: Re, nonEmpty = false): Re => ({
  k: "members",
  members: list,
  required,
  extra,
  sep,
  nonEmpty,
});

export const EMPTY: Re = { k: "seq", items: [] };
export const seq = (...items: Re[]): Re => (items.length === 1 ? items[0] : { k: "seq", items });
export const alt = (...items: Re[]): Re => (items.length === 1 ? items[0] : { k: "alt", items });
export const rep = (item: Re, min: number, max: number): Re => {
  budgetRepeat(min, max);
  return { k: "rep", item, min, max };
};
export const opt = (item: Re): Re => rep(item, 0, 1);
export const star = (item: Re): Re => rep(item, 0, Infinity);
export const call = (rule: number): Re => ({ k: "call", rule });
export const embed = (dfa: RuleDfa): Re => ({ k: "dfa", dfa });
export const bytesLit = (bytes: readonly number[]): Re => ({ k: "lit", bytes });
export function lit(text: string): Re {
  const bytes: number[] = [];
  for (const ch of text) bytes.push(...encodeUtf8(ch.codePointAt(0)!));
  return { k: "lit", bytes };
}
/** One byte from the given inclusive ranges. */
export const byteClass = (...ranges: Array<[number, number]>): Re => ({ k: "set", seqs: ranges.map((r) => [r]) });
export const charSet = (seqs: readonly ByteSeq[]): Re => ({ k: "set", seqs });

/** Repetitions are expanded into states; beyond this the schema is refused rather than bloated. */
export const MAX_REPEAT = 4096;

/** A deterministic automaton for one rule: byte transitions plus "call rule r, then go to s". */
export interface RuleDfa {
  readonly count: number;
  /** count*256 entries, -1 = no transition. State 0 is the start. */
  readonly next: Int32Array;
  readonly final: Uint8Array;
  /** Per state, flat pairs [rule, target]. */
  readonly calls: readonly (readonly number[])[];
}

class Nfa {
  readonly eps: number[][] = [];
  readonly edges: number[][] = [];
  readonly calls: number[][] = [];

  state(): number {
    budgetNfaState(this.eps.length);
    this.eps.push([]);
    this.edges.push([]);
    this.calls.push([]);
    return this.eps.length - 1;
  }

  emit(re: Re, from: number): number {
    switch (re.k) {
      case "lit": {
        let cur = from;
        for (const b of re.bytes) {
          const n = this.state();
          this.edges[cur].push(b, b, n);
          cur = n;
        }
        return cur;
      }
      case "set": {
        const end = this.state();
        for (const s of re.seqs) {
          let cur = from;
          s.forEach(([lo, hi], i) => {
            const n = i === s.length - 1 ? end : this.state();
            this.edges[cur].push(lo, hi, n);
            cur = n;
          });
        }
        return end;
      }
      case "seq": {
        let cur = from;
        for (const item of re.items) cur = this.emit(item, cur);
        return cur;
      }
      case "alt": {
        const end = this.state();
        for (const item of re.items) {
          const s = this.state();
          this.eps[from].push(s);
          this.eps[this.emit(item, s)].push(end);
        }
        return end;
      }
      case "rep": {
        if (re.min > MAX_REPEAT || (re.max !== Infinity && re.max > MAX_REPEAT)) {
          throw new RangeError(`repetition bound above ${MAX_REPEAT}`);
        }
        let cur = from;
        for (let i = 0; i < re.min; i++) cur = this.emit(re.item, cur);
        if (re.max === Infinity) {
          const loop = this.state();
          this.eps[cur].push(loop);
          const after = this.emit(re.item, loop);
          this.eps[after].push(loop);
          return loop;
        }
        const end = this.state();
        this.eps[cur].push(end);
        for (let i = re.min; i < re.max; i++) {
          cur = this.emit(re.item, cur);
          this.eps[cur].push(end);
        }
        return end;
      }
      case "call": {
        const n = this.state();
        this.calls[from].push(re.rule, n);
        return n;
      }
      case "members": {
        const n = re.members.length;
        // written[i]: something was written, member i is next; blank[i]: nothing written yet.
        const written = Array.from({ length: n + 1 }, () => this.state());
        const blank = Array.from({ length: n + 1 }, () => this.state());
        const end = this.state();
        this.eps[from].push(blank[0]);
        for (let i = 0; i < n; i++) {
          this.eps[this.emit(re.members[i], blank[i])].push(written[i + 1]);
          this.eps[this.emit({ k: "seq", items: [re.sep, re.members[i]] }, written[i])].push(written[i + 1]);
          if (!re.required[i]) {
            this.eps[blank[i]].push(blank[i + 1]);
            this.eps[written[i]].push(written[i + 1]);
          }
        }
        if (re.extra) {
          this.eps[this.emit(re.extra, blank[n])].push(written[n]);
          this.eps[this.emit({ k: "seq", items: [re.sep, re.extra] }, written[n])].push(written[n]);
        }
        this.eps[written[n]].push(end);
        if (!re.nonEmpty) this.eps[blank[n]].push(end);
        return end;
      }
      case "dfa": {
        const d = re.dfa;
        const base = this.eps.length;
        for (let i = 0; i < d.count; i++) this.state();
        const end = this.state();
        this.eps[from].push(base);
        for (let s = 0; s < d.count; s++) {
          let b = 0;
          while (b < 256) {
            const t = d.next[s * 256 + b];
            if (t < 0) {
              b++;
              continue;
            }
            let e = b;
            while (e + 1 < 256 && d.next[s * 256 + e + 1] === t) e++;
            this.edges[base + s].push(b, e, base + t);
            b = e + 1;
          }
          const c = d.calls[s];
          for (let i = 0; i < c.length; i += 2) this.calls[base + s].push(c[i], base + c[i + 1]);
          if (d.final[s]) this.eps[base + s].push(end);
        }
        return end;
      }
    }
  }

  // Closure scratch: a state is in the current closure when mark[s] === stamp.
  private mark = new Int32Array(0);
  private stamp = 0;
  private readonly stack: number[] = [];

  closure(states: readonly number[]): Int32Array {
    if (this.mark.length < this.eps.length) this.mark = new Int32Array(this.eps.length * 2);
    const mark = this.mark;
    const stamp = ++this.stamp;
    const stack = this.stack;
    const out: number[] = [];
    for (const s of states) stack.push(s);
    while (stack.length) {
      const s = stack.pop()!;
      budgetTick();
      if (mark[s] === stamp) continue;
      mark[s] = stamp;
      out.push(s);
      const e = this.eps[s];
      for (let k = 0; k < e.length; k++) stack.push(e[k]);
    }
    return Int32Array.from(out).sort();
  }
}

/** Regular expression (with calls) to a DFA whose dead states are removed. */
export function compileRe(re: Re): RuleDfa {
  const nfa = new Nfa();
  const start = nfa.state();
  const accept = nfa.emit(re, start);
  return minimize(pruneDead(determinize(nfa, start, accept)));
}

function determinize(nfa: Nfa, start: number, accept: number): RuleDfa {
  const sets: Int32Array[] = [];
  const ids = new Map<string, number>();
  const idOf = (set: Int32Array): number => {
    const key = set.join(",");
    let id = ids.get(key);
    if (id === undefined) {
      id = sets.length;
      ids.set(key, id);
      sets.push(set);
    }
    return id;
  };
  // The DFA state reached through a set of NFA targets; most sets are one state, whose closure is
  // computed once.
  const single = new Map<number, number>();
  const step = (targets: number[]): number => {
    if (targets.length === 1) {
      let id = single.get(targets[0]);
      if (id === undefined) single.set(targets[0], (id = idOf(nfa.closure(targets))));
      return id;
    }
    return idOf(nfa.closure(targets));
  };
  idOf(nfa.closure([start]));
  const nextRows: Int32Array[] = [];
  const finals: number[] = [];
  const calls: number[][] = [];
  for (let i = 0; i < sets.length; i++) {
    budgetAutomatonState(sets.length);
    const set = sets[i];
    const row = new Int32Array(256).fill(-1);
    const edges: number[] = [];
    const cuts = new Set<number>([0, 256]);
    const byCall = new Map<number, number[]>();
    for (const s of set) {
      const e = nfa.edges[s];
      for (let j = 0; j < e.length; j += 3) {
        edges.push(e[j], e[j + 1], e[j + 2]);
        cuts.add(e[j]);
        cuts.add(e[j + 1] + 1);
      }
      const c = nfa.calls[s];
      for (let j = 0; j < c.length; j += 2) {
        const list = byCall.get(c[j]);
        if (list) list.push(c[j + 1]);
        else byCall.set(c[j], [c[j + 1]]);
      }
    }
    // Bytes between consecutive cut points share their target set: one closure per segment.
    const points = Int32Array.from(cuts).sort();
    for (let k = 0; k + 1 < points.length; k++) {
      budgetTick();
      const lo = points[k];
      const targets: number[] = [];
      for (let j = 0; j < edges.length; j += 3) if (edges[j] <= lo && lo <= edges[j + 1]) targets.push(edges[j + 2]);
      if (targets.length === 0) continue;
      row.fill(step(targets), lo, points[k + 1]);
    }
    const callRow: number[] = [];
    for (const [rule, targets] of byCall) callRow.push(rule, step(targets));
    nextRows.push(row);
    calls.push(callRow);
    finals.push(set.includes(accept) ? 1 : 0);
  }
  const next = new Int32Array(sets.length * 256);
  nextRows.forEach((r, i) => next.set(r, i * 256));
  return { count: sets.length, next, final: Uint8Array.from(finals), calls };
}

/**
 * Drops states from which no final state is reachable. A matcher that entered one would accept
 * tokens leading nowhere, and generation could never finish. Returns count 0 for the empty language.
 */
export function pruneDead(d: RuleDfa): RuleDfa {
  // Distinct successors per state (byte targets come in runs), read once.
  const succ: number[][] = [];
  const rev: number[][] = Array.from({ length: d.count }, () => []);
  for (let s = 0; s < d.count; s++) {
    const out: number[] = [];
    let prev = -1;
    for (let b = 0; b < 256; b++) {
      const t = d.next[s * 256 + b];
      if (t >= 0 && t !== prev && !out.includes(t)) out.push(t);
      prev = t;
    }
    const c = d.calls[s];
    for (let i = 0; i < c.length; i += 2) if (!out.includes(c[i + 1])) out.push(c[i + 1]);
    succ.push(out);
    for (const t of out) rev[t].push(s);
  }
  const live = new Uint8Array(d.count);
  const work: number[] = [];
  for (let s = 0; s < d.count; s++) if (d.final[s]) ((live[s] = 1), work.push(s));
  while (work.length) for (const p of rev[work.pop()!]) if (!live[p]) ((live[p] = 1), work.push(p));
  if (!live[0]) return { count: 0, next: new Int32Array(0), final: new Uint8Array(0), calls: [] };
  // Automata built here are usually all live and numbered in discovery order already.
  if (live.every((x) => x === 1) && isDiscoveryOrder(succ)) return d;
  // Renumber live states reachable from the start.
  const map = new Int32Array(d.count).fill(-1);
  const order: number[] = [0];
  map[0] = 0;
  for (let i = 0; i < order.length; i++) {
    for (const t of succ[order[i]]) {
      if (live[t] && map[t] < 0) {
        map[t] = order.length;
        order.push(t);
      }
    }
  }
  const next = new Int32Array(order.length * 256).fill(-1);
  const final = new Uint8Array(order.length);
  const calls: number[][] = [];
  order.forEach((s, i) => {
    for (let b = 0; b < 256; b++) {
      const t = d.next[s * 256 + b];
      if (t >= 0 && live[t]) next[i * 256 + b] = map[t];
    }
    final[i] = d.final[s];
    const c = d.calls[s];
    const row: number[] = [];
    for (let j = 0; j < c.length; j += 2) if (live[c[j + 1]]) row.push(c[j], map[c[j + 1]]);
    calls.push(row);
  });
  return { count: order.length, next, final, calls };
}

/** Whether states are numbered in the order a breadth-first walk from state 0 finds them. */
function isDiscoveryOrder(succ: readonly (readonly number[])[]): boolean {
  let found = 1;
  for (let s = 0; s < succ.length && s < found; s++) {
    for (const t of succ[s]) {
      if (t === found) found++;
      else if (t > found) return false;
    }
  }
  return found === succ.length;
}

/** Intersection of two call-free DFAs (product construction), dead states removed. */
export function intersect(a: RuleDfa, b: RuleDfa): RuleDfa {
  if (a.count === 0 || b.count === 0) return pruneDead(a.count === 0 ? a : b);
  const ids = new Map<number, number>();
  const pairs: number[] = [];
  const idOf = (x: number, y: number): number => {
    const key = x * b.count + y;
    let id = ids.get(key);
    if (id === undefined) {
      id = pairs.length / 2;
      ids.set(key, id);
      pairs.push(x, y);
    }
    return id;
  };
  idOf(0, 0);
  const rows: Int32Array[] = [];
  const finals: number[] = [];
  for (let i = 0; i < pairs.length / 2; i++) {
    budgetAutomatonState(pairs.length / 2);
    const x = pairs[2 * i];
    const y = pairs[2 * i + 1];
    const row = new Int32Array(256).fill(-1);
    for (let c = 0; c < 256; c++) {
      const tx = a.next[x * 256 + c];
      const ty = b.next[y * 256 + c];
      if (tx >= 0 && ty >= 0) row[c] = idOf(tx, ty);
    }
    rows.push(row);
    finals.push(a.final[x] && b.final[y] ? 1 : 0);
  }
  const next = new Int32Array(rows.length * 256);
  rows.forEach((r, i) => next.set(r, i * 256));
  return minimize(pruneDead({ count: rows.length, next, final: Uint8Array.from(finals), calls: rows.map(() => []) }));
}

/** Complement of a call-free DFA over all byte strings (completed with a sink state). */
export function complement(d: RuleDfa): RuleDfa {
  const n = Math.max(d.count, 1);
  const sink = n;
  const next = new Int32Array((n + 1) * 256).fill(sink);
  const final = new Uint8Array(n + 1);
  for (let s = 0; s < d.count; s++) {
    for (let b = 0; b < 256; b++) {
      const t = d.next[s * 256 + b];
      if (t >= 0) next[s * 256 + b] = t;
    }
    final[s] = d.final[s] ? 0 : 1;
  }
  if (d.count === 0) final[0] = 1;
  final[sink] = 1;
  return { count: n + 1, next, final, calls: Array.from({ length: n + 1 }, () => []) };
}

let zeroBlocks = new Int32Array(0);
/** All-zero blocks: keyOf with it names every target inside the component alike ("i0"). */
function ZERO_BLOCKS(n: number): Int32Array {
  if (zeroBlocks.length < n) zeroBlocks = new Int32Array(n);
  return zeroBlocks;
}

/** Cycles (strongly connected components) larger than this are not refined inside. */
const CYCLE_REFINE_LIMIT = 400;

/** Transitions of state s as runs of equal targets: flat [firstByte, target, ...] (target -1 = none). */
function runsOf(d: RuleDfa, s: number): number[] {
  const r: number[] = [];
  let prev = -2;
  for (let b = 0; b < 256; b++) {
    const t = d.next[s * 256 + b];
    if (t !== prev) {
      r.push(b, t);
      prev = t;
    }
  }
  return r;
}

/** Strongly connected components in reverse topological order (a component after all it reaches). */
function components(n: number, succ: (s: number) => readonly number[]): number[][] {
  const index = new Int32Array(n).fill(-1);
  const low = new Int32Array(n);
  const onStack = new Uint8Array(n);
  const stack: number[] = [];
  const out: number[][] = [];
  let counter = 0;
  for (let root = 0; root < n; root++) {
    if (index[root] >= 0) continue;
    // Iterative Tarjan: frames of (state, next successor position).
    const frames: Array<[number, number]> = [[root, 0]];
    index[root] = low[root] = counter++;
    stack.push(root);
    onStack[root] = 1;
    while (frames.length) {
      const f = frames[frames.length - 1];
      const v = f[0];
      const list = succ(v);
      if (f[1] < list.length) {
        const w = list[f[1]++];
        if (index[w] < 0) {
          index[w] = low[w] = counter++;
          stack.push(w);
          onStack[w] = 1;
          frames.push([w, 0]);
        } else if (onStack[w]) low[v] = Math.min(low[v], index[w]);
        continue;
      }
      frames.pop();
      if (frames.length) {
        const u = frames[frames.length - 1][0];
        low[u] = Math.min(low[u], low[v]);
      }
      if (low[v] === index[v]) {
        const comp: number[] = [];
        let w: number;
        do {
          w = stack.pop()!;
          onStack[w] = 0;
          comp.push(w);
        } while (w !== v);
        out.push(comp);
      }
    }
  }
  return out;
}

/**
 * Merges equivalent states. Besides making automata smaller, this matters for speed: the matcher
 * computes one vocabulary-wide mask per distinct state, and an unminimized DFA has several copies
 * of e.g. "inside a string". Components are taken sinks first, so states outside cycles (most of
 * a JSON structure: literals, bounded whitespace, counted repetitions) are merged in one pass by
 * their transitions to already merged states; states on a cycle are refined (Moore) within their
 * component, and states upstream merge into them by the same test. Copies of a whole cycle in two
 * components are left apart (rare; still correct).
 */
export function minimize(d: RuleDfa): RuleDfa {
  const n = d.count;
  if (n <= 1) return d;
  const runs: number[][] = [];
  const succ: number[][] = [];
  for (let s = 0; s < n; s++) {
    budgetTick();
    const r = runsOf(d, s);
    runs.push(r);
    const out: number[] = [];
    for (let j = 1; j < r.length; j += 2) if (r[j] >= 0) out.push(r[j]);
    const c = d.calls[s];
    for (let j = 1; j < c.length; j += 2) out.push(c[j]);
    succ.push(out);
  }
  const canon = new Int32Array(n).fill(-1);
  const ids = new Map<string, number>();
  let fresh = 0;
  const comp = new Int32Array(n).fill(-1);
  // Key of s: finality, calls and transitions; targets inside the component being refined are
  // named by their block there ("i"), others by their merged id.
  const keyOf = (s: number, inner: Int32Array | null): string => {
    const tgt = (t: number) => (t < 0 ? "-" : inner && comp[t] === comp[s] ? `i${inner[t]}` : `${canon[t]}`);
    let k = d.final[s] ? "F" : "N";
    const r = runs[s];
    for (let j = 0; j < r.length; j += 2) k += `${r[j]}=${tgt(r[j + 1])};`;
    const c = d.calls[s];
    if (c.length) {
      const pairs: string[] = [];
      for (let j = 0; j < c.length; j += 2) pairs.push(`${c[j]}>${tgt(c[j + 1])}`);
      k += `C${[...new Set(pairs)].sort().join(",")}`;
    }
    return k;
  };
  const comps = components(n, (s) => succ[s]);
  comps.forEach((members, ci) => {
    budgetTick();
    for (const s of members) comp[s] = ci;
    const s0 = members[0];
    if (members.length === 1 && !succ[s0].includes(s0)) {
      const k = keyOf(s0, null);
      let id = ids.get(k);
      if (id === undefined) ids.set(k, (id = fresh++));
      canon[s0] = id;
      return;
    }
    // Moore's refinement within the component. The transitions' shape (bytes, targets outside,
    // finality, called rules) is fixed: it is the first partition, and each round only compares
    // the blocks of the targets inside the component.
    const block = new Int32Array(n);
    let blocks = members.length;
    if (members.length <= CYCLE_REFINE_LIMIT) {
      const shapes = new Map<string, number>();
      const inner: number[][] = [];
      for (const s of members) {
        const k = keyOf(s, ZERO_BLOCKS(n));
        let id = shapes.get(k);
        if (id === undefined) shapes.set(k, (id = shapes.size));
        block[s] = id;
        const list: number[] = [];
        const r = runs[s];
        for (let j = 1; j < r.length; j += 2) if (r[j] >= 0 && comp[r[j]] === ci) list.push(r[j]);
        const c = d.calls[s];
        const order: number[] = [];
        for (let j = 0; j < c.length; j += 2) order.push(j);
        order.sort((x, y) => c[x] - c[y]);
        for (const j of order) if (comp[c[j + 1]] === ci) list.push(c[j + 1]);
        inner.push(list);
      }
      blocks = shapes.size;
      const next = new Int32Array(members.length);
      for (;;) {
        const seen = new Map<string, number>();
        members.forEach((s, m) => {
          budgetTick();
          let k = `${block[s]}`;
          for (const t of inner[m]) k += `,${block[t]}`;
          let b = seen.get(k);
          if (b === undefined) seen.set(k, (b = seen.size));
          next[m] = b;
        });
        members.forEach((s, m) => (block[s] = next[m]));
        const changed = seen.size !== blocks;
        blocks = seen.size;
        if (!changed) break;
      }
    } else members.forEach((s, i) => (block[s] = i));
    for (const s of members) canon[s] = fresh + block[s];
    fresh += blocks;
    // A state upstream with the same transitions is a copy of this one (e.g. the unrolled first
    // item of "item (sep item)*"): register the merged states for the states still to come.
    for (const s of members) {
      const k = keyOf(s, null);
      if (!ids.has(k)) ids.set(k, canon[s]);
    }
  });
  // Renumber merged states from the start (state 0) in discovery order.
  const rep = new Int32Array(fresh).fill(-1);
  for (let s = n - 1; s >= 0; s--) rep[canon[s]] = s;
  const order = new Int32Array(fresh).fill(-1);
  const queue = [canon[0]];
  order[canon[0]] = 0;
  for (let q = 0; q < queue.length; q++) {
    for (const t of succ[rep[queue[q]]]) {
      const c = canon[t];
      if (order[c] < 0) {
        order[c] = queue.length;
        queue.push(c);
      }
    }
  }
  const count = queue.length;
  // Nothing merged and the numbering kept: the automaton is already minimal as it is.
  if (count === n && queue.every((c, i) => rep[c] === i)) return d;
  const nextOut = new Int32Array(count * 256).fill(-1);
  const final = new Uint8Array(count);
  const calls: number[][] = [];
  for (let i = 0; i < count; i++) {
    const s = rep[queue[i]];
    const r = runs[s];
    for (let j = 0; j < r.length; j += 2) {
      const t = r[j + 1];
      if (t < 0) continue;
      const endByte = j + 2 < r.length ? r[j + 2] : 256;
      nextOut.fill(order[canon[t]], i * 256 + r[j], i * 256 + endByte);
    }
    final[i] = d.final[s];
    const c = d.calls[s];
    const row: number[] = [];
    const seen = new Set<string>();
    for (let j = 0; j < c.length; j += 2) {
      const t = order[canon[c[j + 1]]];
      const pair = `${c[j]},${t}`;
      if (!seen.has(pair)) {
        seen.add(pair);
        row.push(c[j], t);
      }
    }
    calls.push(row);
  }
  return { count, next: nextOut, final, calls };
}
