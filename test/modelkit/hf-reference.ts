// A plain forward pass of the Llama-family decoder as transformers defines it (LlamaModel,
// MistralModel, Qwen2Model, Qwen3Model), in float64 over weights in transformers' layout
// ([out, in]), for checking the imported graphs. Written from the architecture's definition,
// sharing no code with the model kit.

export interface RefConfig {
  hidden: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  eps: number;
  theta: number;
  /** rope_scaling of type llama3. */
  llama3?: { factor: number; low: number; high: number; original: number };
}

export type Vec = ArrayLike<number>;

export interface RefLayer {
  inputNorm: Vec;
  postNorm: Vec;
  q: Vec;
  k: Vec;
  v: Vec;
  o: Vec;
  gate: Vec;
  up: Vec;
  down: Vec;
  qNorm?: Vec;
  kNorm?: Vec;
  qBias?: Vec;
  kBias?: Vec;
  vBias?: Vec;
  oBias?: Vec;
}

export interface RefWeights {
  /** [vocab, hidden] */
  embed: Vec;
  layers: RefLayer[];
  finalNorm: Vec;
  /** [vocab, hidden]: the embedding itself when tied. */
  head: Vec;
}

function rmsNorm(x: number[], w: Vec, eps: number): number[] {
  let ms = 0;
  for (const v of x) ms += v * v;
  const inv = 1 / Math.sqrt(ms / x.length + eps);
  return x.map((v, i) => v * inv * w[i]!);
}

/** y = W x (+ b) for W [out, in] row-major. */
function linear(w: Vec, x: number[], out: number, b?: Vec): number[] {
  const n = x.length;
  const y = new Array<number>(out);
  for (let o = 0; o < out; o++) {
    let s = b ? b[o]! : 0;
    for (let i = 0; i < n; i++) s += w[o * n + i]! * x[i]!;
    y[o] = s;
  }
  return y;
}

/** transformers' inverse frequencies, with _compute_llama3_parameters when scaled. */
export function refInverseFrequencies(c: RefConfig): number[] {
  const half = c.headDim / 2;
  const inv = Array.from({ length: half }, (_, i) => 1 / c.theta ** ((2 * i) / c.headDim));
  const s = c.llama3;
  if (!s) return inv;
  const lowWavelen = s.original / s.low;
  const highWavelen = s.original / s.high;
  return inv.map((f) => {
    const wavelen = (2 * Math.PI) / f;
    const scaled = wavelen > lowWavelen ? f / s.factor : f;
    const smooth = (s.original / wavelen - s.low) / (s.high - s.low);
    const smoothed = ((1 - smooth) * scaled) / s.factor + smooth * scaled;
    const medium = !(wavelen < highWavelen) && !(wavelen > lowWavelen);
    return medium ? smoothed : scaled;
  });
}

/** apply_rotary_pos_emb with rotate_half on one head vector at position p. */
function rope(x: number[], p: number, inv: number[]): number[] {
  const half = x.length / 2;
  return x.map((v, j) => {
    const a = p * inv[j % half]!;
    const rotated = j < half ? -x[j + half]! : x[j - half]!;
    return v * Math.cos(a) + rotated * Math.sin(a);
  });
}

/** Logits [tokens, vocab] for the whole sequence (positions 0..n-1, causal). */
export function referenceLogits(c: RefConfig, w: RefWeights, ids: number[]): number[][] {
  const H = c.hidden;
  const D = c.headDim;
  const qDim = c.heads * D;
  const kvDim = c.kvHeads * D;
  const I = w.layers[0]!.gate.length / H;
  const vocab = w.embed.length / H;
  const inv = refInverseFrequencies(c);
  let h = ids.map((t) => Array.from({ length: H }, (_, i) => w.embed[t * H + i]!));
  for (const l of w.layers) {
    const qs: number[][][] = [];
    const ks: number[][][] = [];
    const vs: number[][][] = [];
    h.forEach((row, p) => {
      const x = rmsNorm(row, l.inputNorm, c.eps);
      const q = linear(l.q, x, qDim, l.qBias);
      const k = linear(l.k, x, kvDim, l.kBias);
      const v = linear(l.v, x, kvDim, l.vBias);
      const heads = (a: number[], n: number, norm?: Vec) =>
        Array.from({ length: n }, (_, hd) => {
          const part = a.slice(hd * D, (hd + 1) * D);
          return norm ? rmsNorm(part, norm, c.eps) : part;
        });
      qs.push(heads(q, c.heads, l.qNorm).map((x) => rope(x, p, inv)));
      ks.push(heads(k, c.kvHeads, l.kNorm).map((x) => rope(x, p, inv)));
      vs.push(heads(v, c.kvHeads));
    });
    const group = c.heads / c.kvHeads;
    h = h.map((row, p) => {
      const attn: number[] = [];
      for (let hd = 0; hd < c.heads; hd++) {
        const kv = Math.floor(hd / group);
        const scores = Array.from({ length: p + 1 }, (_, s) => qs[p]![hd]!.reduce((a, x, j) => a + x * ks[s]![kv]![j]!, 0) / Math.sqrt(D));
        const max = Math.max(...scores);
        const e = scores.map((x) => Math.exp(x - max));
        const sum = e.reduce((a, b) => a + b, 0);
        for (let j = 0; j < D; j++) attn.push(e.reduce((a, x, s) => a + (x / sum) * vs[s]![kv]![j]!, 0));
      }
      const o = linear(l.o, attn, H, l.oBias);
      const r = row.map((v, i) => v + o[i]!);
      const x = rmsNorm(r, l.postNorm, c.eps);
      const g = linear(l.gate, x, I);
      const u = linear(l.up, x, I);
      const act = g.map((a, i) => (a / (1 + Math.exp(-a))) * u[i]!);
      const d = linear(l.down, act, H);
      return r.map((v, i) => v + d[i]!);
    });
  }
  return h.map((row) => linear(w.head, rmsNorm(row, w.finalNorm, c.eps), vocab));
}
