// Token budget tables kept per rule rather than per grammar, so that a grammar finds the searches
// of its rules done when another grammar with the same rules (rule-keys.ts) had them done: the
// engine computes those of json_object and of the built-in string formats once per model
// (built-in-tables.ts) and every grammar that has those rules reuses them.
//
// A search's exits (completion-budget.ts) depend on its rule, the rules it calls and the
// vocabulary, and on two things of the grammar around it: the bytes that may follow the rule
// (an exit whose token cannot go on with one of them is left out) and, for a root rule that
// nothing calls, a cap that stops at the cheapest way to end the document. Leaving an exit out
// changes no other exit's cost, so tables kept with the bytes they were computed for serve any
// grammar in which fewer bytes may follow the rule (its own exits are those kept whose token can
// go on with one of its bytes), and tables computed under the cap only a grammar whose rule has
// the same cap.

import type { Grammar } from "./grammar.ts";
import { ruleKey } from "./rule-keys.ts";
import type { TokenVocabulary } from "./token-bytes.ts";

/** One rule's finished searches, as plain data another thread can take (buffers may be shared). */
export interface RuleTableData {
  /** The rule's key (rule-keys.ts). */
  readonly key: string;
  /** Bytes that may follow the rule where the searches were done (8 words of bits). */
  readonly follow: Uint32Array;
  /** Computed as a root rule nothing calls, under the cheapest-end cap. */
  readonly capped: boolean;
  /** Per search: its state (relative to the rule's first state) and partial token (trie node), flat pairs. */
  readonly origins: Int32Array;
  /** Search i's exits are exitNodes/exitCosts[offsets[i] .. offsets[i + 1]). */
  readonly offsets: Int32Array;
  readonly exitNodes: Int32Array;
  readonly exitCosts: Int32Array;
}

/** Tables of rules on one vocabulary, with the shapes of the rules whose keys they need. */
export interface RuleTables {
  /** The vocabulary's trie size: tables apply only to the vocabulary they were computed on. */
  readonly nodeCount: number;
  readonly rules: readonly RuleTableData[];
  /** ruleShapes of every rule these tables' keys reach (rule-keys.ts hashes no other rule). */
  readonly shapes: readonly string[];
}

/** Bytes a set of tables holds. */
export function ruleTablesBytes(t: RuleTables): number {
  let n = 0;
  for (const r of t.rules) n += r.follow.byteLength + r.origins.byteLength + r.offsets.byteLength + r.exitNodes.byteLength + r.exitCosts.byteLength;
  return n;
}

/** One rule's table, looked up by (state, partial token). */
export class RuleTable {
  private index: Map<number, number> | null = null;
  constructor(
    readonly data: RuleTableData,
    private readonly nodeCount: number,
  ) {}

  /** The exits of (state relative to the rule, partial token), or null when this table has no such search. */
  exits(local: number, node: number): { nodes: Int32Array; costs: Int32Array } | null {
    const d = this.data;
    if (!this.index) {
      // Built on first use in each thread: the data may have come from another one.
      this.index = new Map();
      for (let i = 0; i < d.offsets.length - 1; i++) this.index.set(d.origins[2 * i] * this.nodeCount + d.origins[2 * i + 1], i);
    }
    const i = this.index.get(local * this.nodeCount + node);
    if (i === undefined) return null;
    return { nodes: d.exitNodes.subarray(d.offsets[i], d.offsets[i + 1]), costs: d.exitCosts.subarray(d.offsets[i], d.offsets[i + 1]) };
  }

  /** Whether a grammar whose rule may be followed by `follow` (and is capped or not) can take these exits. */
  serves(follow: Uint32Array, capped: boolean): boolean {
    if (this.data.capped && !capped) return false;
    for (let w = 0; w < 8; w++) if ((follow[w] & ~this.data.follow[w]) !== 0) return false;
    return true;
  }
}

/** The tables a vocabulary has, by rule key. */
interface RuleTableRegistry {
  readonly nodeCount: number;
  /** Changes whenever tables are added: caches of which table serves which rule start over. */
  readonly version: number;
  readonly byKey: ReadonlyMap<string, readonly RuleTable[]>;
  readonly shapes: ReadonlySet<string>;
}

const registries = new WeakMap<TokenVocabulary, RuleTableRegistry>();

/**
 * Budgets on `vocab` take these tables from now on (and budgets made before, at their next
 * search). Tables of another vocabulary (another trie size) are ignored.
 */
export function adoptRuleTables(vocab: TokenVocabulary, tables: RuleTables): void {
  if (tables.nodeCount !== vocab.trie.nodeCount) return;
  const old = registries.get(vocab);
  const byKey = new Map<string, RuleTable[]>(old ? [...old.byKey].map(([k, v]) => [k, [...v]]) : []);
  for (const data of tables.rules) {
    let list = byKey.get(data.key);
    if (!list) byKey.set(data.key, (list = []));
    list.push(new RuleTable(data, tables.nodeCount));
  }
  registries.set(vocab, {
    nodeCount: tables.nodeCount,
    version: (old?.version ?? 0) + 1,
    byKey,
    shapes: new Set([...(old?.shapes ?? []), ...tables.shapes]),
  });
}

/** Which of the adopted tables serve each rule of one grammar, found on first need per rule. */
export class ServedRules {
  private version = 0;
  private byRule: (readonly RuleTable[] | null | undefined)[] = [];

  /**
   * `follow`: per rule, 8 words of the bytes that may follow it in the grammar; `capped`: whether
   * the rule is a root nothing calls, searched under the cheapest-end cap.
   */
  constructor(
    private readonly grammar: Grammar,
    private readonly vocab: TokenVocabulary,
    private readonly follow: Uint32Array,
    private readonly capped: (rule: number) => boolean,
  ) {}

  /** The tables that serve `rule` (see RuleTable.serves), or null. */
  tables(rule: number): readonly RuleTable[] | null {
    const registry = registries.get(this.vocab);
    if (!registry) return null;
    // Tables adopted since: what serves which rule is looked at again.
    if (this.version !== registry.version) {
      this.version = registry.version;
      this.byRule = new Array(this.grammar.ruleBase.length);
    }
    let tables = this.byRule[rule];
    if (tables === undefined) {
      const key = ruleKey(this.grammar, rule, (shape) => registry.shapes.has(shape));
      const follow = this.follow.subarray(rule * 8, rule * 8 + 8);
      const serving = key === null ? [] : (registry.byKey.get(key) ?? []).filter((t) => t.serves(follow, this.capped(rule)));
      tables = this.byRule[rule] = serving.length > 0 ? serving : null;
    }
    return tables;
  }
}
