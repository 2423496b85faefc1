// Random decoder weights from a seed, scaled so activations keep unit scale through the layers
// and the logits are spread enough for varied greedy output.

import { Prng } from "../prng.ts";
import type { LlamaConfig } from "./config.ts";
import type { LlamaLayerWeights, LlamaWeights } from "./weights.ts";

function normWeights(rng: Prng, n: number): Float32Array {
  const w = rng.uniformArray(n, 0.1);
  for (let i = 0; i < n; i++) w[i] += 1;
  return w;
}

export function randomWeights(c: LlamaConfig, seed: number): LlamaWeights {
  const rng = new Prng(seed);
  const H = c.hiddenSize;
  const qDim = c.numHeads * c.headDim;
  const kvDim = c.numKvHeads * c.headDim;
  const I = c.intermediateSize;
  const embed = rng.uniformArray(c.vocabSize * H, 1);
  const layers: LlamaLayerWeights[] = [];
  for (let i = 0; i < c.numLayers; i++) {
    layers.push({
      inputNorm: normWeights(rng, H),
      // q and k a little hotter than 1/sqrt(fan_in) so attention is not uniform.
      q: rng.uniformArray(H * qDim, 2 / Math.sqrt(H)),
      k: rng.uniformArray(H * kvDim, 2 / Math.sqrt(H)),
      v: rng.uniformArray(H * kvDim, 1 / Math.sqrt(H)),
      o: rng.uniformArray(qDim * H, 1 / Math.sqrt(qDim)),
      qNorm: c.qkNorm ? normWeights(rng, c.headDim) : undefined,
      kNorm: c.qkNorm ? normWeights(rng, c.headDim) : undefined,
      postNorm: normWeights(rng, H),
      gate: rng.uniformArray(H * I, 1 / Math.sqrt(H)),
      up: rng.uniformArray(H * I, 1 / Math.sqrt(H)),
      down: rng.uniformArray(I * H, 1 / Math.sqrt(I)),
    });
  }
  const finalNorm = normWeights(rng, H);
  // Tied: logits = h . e with |h| ~ sqrt(H) and e ~ unit entries; scale so their spread is a few units.
  const lmHead = c.tieWordEmbeddings ? undefined : rng.uniformArray(H * c.vocabSize, 3 / Math.sqrt(H));
  if (c.tieWordEmbeddings) {
    const s = 3 / Math.sqrt(H);
    for (let i = 0; i < embed.length; i++) embed[i] *= s;
  }
  return { embed, layers, finalNorm, lmHead };
}
