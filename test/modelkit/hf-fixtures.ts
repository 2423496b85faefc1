// Hugging Face checkpoints built at test time, written without the importer's own code paths:
// safetensors bytes by hand, and stories260K converted from llama2.c's file as llama2.c's
// `export.py --hf` (and transformers' convert_llama_weights_to_hf.py) do it.

import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { LLAMA_SPECIAL_TOKENS_MAP, llama2cToTokenizerJson, llamaTokenizerConfig, readLlama2cTokenizer } from "../../src/modelkit/llama2c/tokenizer.ts";

export interface RawTensor {
  name: string;
  shape: number[];
  data: Float32Array;
  /** Stored type; default F32 (I8: a type no weight may have, for refusals). */
  dtype?: "F32" | "F16" | "BF16" | "I8";
}

/** float32 -> half bits, rounding to nearest (test data: no overflow). */
function toHalf(x: number): number {
  const f = new Float32Array([x]);
  const u = new Uint32Array(f.buffer)[0]!;
  const sign = (u >>> 16) & 0x8000;
  const exp = ((u >>> 23) & 0xff) - 127 + 15;
  if (exp >= 31) throw new Error(`test value ${x} is outside the half range`);
  // Below the normal range: a multiple of 2^-24.
  if (exp <= 0) return sign | Math.round(Math.abs(x) * 2 ** 24);
  let h = sign | (exp << 10) | ((u >>> 13) & 0x3ff);
  const rest = u & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && h & 1)) h++;
  return h;
}

/** A safetensors file, byte by byte as the format's README describes it. */
export function writeSafetensorsByHand(path: string, tensors: RawTensor[]): void {
  const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
  const blobs: Uint8Array[] = [];
  let offset = 0;
  for (const t of tensors) {
    const dtype = t.dtype ?? "F32";
    let bytes: Uint8Array;
    if (dtype === "F32") bytes = new Uint8Array(Float32Array.from(t.data).buffer);
    else if (dtype === "I8") bytes = new Uint8Array(Int8Array.from(t.data).buffer);
    else {
      const u16 = new Uint16Array(t.data.length);
      const u32 = new Uint32Array(Float32Array.from(t.data).buffer);
      for (let i = 0; i < t.data.length; i++) u16[i] = dtype === "F16" ? toHalf(t.data[i]!) : (u32[i]! + 0x7fff + ((u32[i]! >>> 16) & 1)) >>> 16;
      bytes = new Uint8Array(u16.buffer);
    }
    header[t.name] = { dtype, shape: t.shape, data_offsets: [offset, offset + bytes.length] };
    blobs.push(bytes);
    offset += bytes.length;
  }
  const json = new TextEncoder().encode(JSON.stringify(header));
  const len = new Uint8Array(8);
  new DataView(len.buffer).setBigUint64(0, BigInt(json.length), true);
  const out = new Uint8Array(8 + json.length + offset);
  out.set(len, 0);
  out.set(json, 8);
  let at = 8 + json.length;
  for (const b of blobs) {
    out.set(b, at);
    at += b.length;
  }
  writeFileSync(path, out);
}

/** The value a stored tensor holds after its dtype's rounding (what the importer reads back). */
export function storedValues(t: RawTensor): Float32Array {
  const dtype = t.dtype ?? "F32";
  if (dtype === "F32" || dtype === "I8") return Float32Array.from(t.data);
  const out = new Float32Array(t.data.length);
  const u32 = new Uint32Array(out.buffer);
  const src = new Uint32Array(Float32Array.from(t.data).buffer);
  for (let i = 0; i < out.length; i++) {
    if (dtype === "BF16") u32[i] = ((src[i]! + 0x7fff + ((src[i]! >>> 16) & 1)) >>> 16) << 16;
    else {
      const h = toHalf(t.data[i]!);
      const e = (h >>> 10) & 0x1f;
      const m = h & 0x3ff;
      out[i] = (h & 0x8000 ? -1 : 1) * (e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15));
    }
  }
  return out;
}

/**
 * stories260K as an HF LlamaForCausalLM checkpoint: each matrix [out, in] as llama2.c stores it,
 * wq and wk rows permuted per head from llama2.c's interleaved rotary pairs to transformers'
 * rotate-half order, exactly as export.py's permute_original does:
 *   w.view(dim1, dim2).reshape(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)
 */
export function writeStoriesHfCheckpoint(storiesDir: string, out: string): void {
  mkdirSync(out, { recursive: true });
  const buf = readFileSync(join(storiesDir, "stories260K.bin"));
  const head = new Int32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + 28));
  const [dim, hidden, layers, heads, kvHeads, vocab, seqLen] = Array.from(head) as [number, number, number, number, number, number, number];
  const floats = new Float32Array(buf.buffer.slice(buf.byteOffset + 28));
  const kvDim = (dim * kvHeads) / heads;
  let at = 0;
  const take = (n: number) => floats.slice(at, (at += n));
  const perLayer = (n: number) => Array.from({ length: layers }, () => take(n));
  const embed = take(Math.abs(vocab) * dim);
  const rmsAtt = perLayer(dim);
  const wq = perLayer(dim * dim);
  const wk = perLayer(kvDim * dim);
  const wv = perLayer(kvDim * dim);
  const wo = perLayer(dim * dim);
  const rmsFfn = perLayer(dim);
  const w1 = perLayer(hidden * dim);
  const w2 = perLayer(dim * hidden);
  const w3 = perLayer(hidden * dim);
  const rmsFinal = take(dim);

  const permute = (w: Float32Array, nHeads: number, dim1: number, dim2: number) => {
    // view [nHeads, half, 2, dim2] -> transpose(1, 2) -> [nHeads, 2, half, dim2]
    const half = dim1 / nHeads / 2;
    const outW = new Float32Array(w.length);
    for (let h = 0; h < nHeads; h++)
      for (let a = 0; a < 2; a++)
        for (let i = 0; i < half; i++) {
          const src = ((h * half + i) * 2 + a) * dim2;
          const dst = ((h * 2 + a) * half + i) * dim2;
          outW.set(w.subarray(src, src + dim2), dst);
        }
    return outW;
  };
  const tensors: RawTensor[] = [{ name: "model.embed_tokens.weight", shape: [vocab, dim], data: embed }];
  for (let l = 0; l < layers; l++) {
    const p = `model.layers.${l}`;
    tensors.push(
      { name: `${p}.self_attn.q_proj.weight`, shape: [dim, dim], data: permute(wq[l]!, heads, dim, dim) },
      { name: `${p}.self_attn.k_proj.weight`, shape: [kvDim, dim], data: permute(wk[l]!, kvHeads, kvDim, dim) },
      { name: `${p}.self_attn.v_proj.weight`, shape: [kvDim, dim], data: wv[l]! },
      { name: `${p}.self_attn.o_proj.weight`, shape: [dim, dim], data: wo[l]! },
      { name: `${p}.mlp.gate_proj.weight`, shape: [hidden, dim], data: w1[l]! },
      { name: `${p}.mlp.down_proj.weight`, shape: [dim, hidden], data: w2[l]! },
      { name: `${p}.mlp.up_proj.weight`, shape: [hidden, dim], data: w3[l]! },
      { name: `${p}.input_layernorm.weight`, shape: [dim], data: rmsAtt[l]! },
      { name: `${p}.post_attention_layernorm.weight`, shape: [dim], data: rmsFfn[l]! },
    );
  }
  tensors.push({ name: "model.norm.weight", shape: [dim], data: rmsFinal });
  writeSafetensorsByHand(join(out, "model.safetensors"), tensors);
  // export.py --hf's config (LlamaConfig): tied head, llama2.c's eps and theta.
  const config = {
    architectures: ["LlamaForCausalLM"],
    model_type: "llama",
    hidden_size: dim,
    intermediate_size: hidden,
    num_hidden_layers: layers,
    num_attention_heads: heads,
    num_key_value_heads: kvHeads,
    vocab_size: vocab,
    max_position_embeddings: seqLen,
    rms_norm_eps: 1e-5,
    rope_theta: 10000.0,
    hidden_act: "silu",
    tie_word_embeddings: true,
    bos_token_id: 1,
    eos_token_id: 2,
    torch_dtype: "float32",
  };
  writeFileSync(join(out, "config.json"), JSON.stringify(config, null, 2));
  const { tokenizerJson } = llama2cToTokenizerJson(readLlama2cTokenizer(join(storiesDir, "tok512.bin"), vocab));
  writeFileSync(join(out, "tokenizer.json"), JSON.stringify(tokenizerJson));
  writeFileSync(join(out, "tokenizer_config.json"), JSON.stringify(llamaTokenizerConfig(seqLen)));
  writeFileSync(join(out, "special_tokens_map.json"), JSON.stringify(LLAMA_SPECIAL_TOKENS_MAP));
  writeFileSync(join(out, "generation_config.json"), JSON.stringify({ bos_token_id: 1, eos_token_id: [2, 1] }));
}
