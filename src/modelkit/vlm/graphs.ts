// The two graphs a split vision-language export has besides its decoder, in transformers.js's
// layout (ImageTextToText sessions): `vision_encoder` (pixel_values, pixel_attention_mask ->
// image_features) and `embed_tokens` (input_ids -> inputs_embeds).

import { GraphBuilder, serializeModel, type SerializedModel } from "../onnx/builder.ts";
import { floatTensor } from "../onnx/tensor.ts";

export interface VisionEncoderShape {
  /** Tile side in pixels (preprocessor max_image_size.longest_edge). */
  tileSize: number;
  patchSize: number;
  /** Channels of the patch embedding. */
  visionHidden: number;
  /** Hidden size of the language model the features are projected to. */
  textHidden: number;
}

export interface VisionEncoderWeights {
  /** [visionHidden, 3, patch, patch] */
  patchEmbed: Float32Array;
  patchBias: Float32Array;
  /** [tokensPerTile, visionHidden] */
  positions: Float32Array;
  /** [visionHidden, textHidden] */
  projection: Float32Array;
}

export const tokensPerTile = (s: VisionEncoderShape) => (s.tileSize / s.patchSize) ** 2;

/**
 * A patch encoder: tiles masked by pixel_attention_mask, a strided convolution into patches, a
 * learned position embedding, tanh, and a projection into the text model's embedding space.
 * One tile gives tileSize²/patchSize² image tokens ([tiles, tokens, textHidden]).
 */
export function buildVisionEncoder(s: VisionEncoderShape, w: VisionEncoderWeights): SerializedModel {
  if (s.tileSize % s.patchSize !== 0) throw new Error("tileSize must be a multiple of patchSize");
  const g = new GraphBuilder("vision_encoder");
  const T = s.tileSize;
  const P = tokensPerTile(s);
  const pixels = g.input("pixel_values", "float32", ["batch_size", "num_images", 3, T, T]);
  const mask = g.input("pixel_attention_mask", "bool", ["batch_size", "num_images", T, T]);
  const tiles = g.op("Reshape", [pixels, g.i64([-1, 3, T, T])]);
  const m = g.op("Reshape", [g.op("Cast", [mask], { to: 1 }), g.i64([-1, 1, T, T])]);
  const kernel = g.initializer("vision.patch_embedding.weight", floatTensor("float32", [s.visionHidden, 3, s.patchSize, s.patchSize], w.patchEmbed));
  const bias = g.initializer("vision.patch_embedding.bias", floatTensor("float32", [s.visionHidden], w.patchBias));
  const conv = g.op("Conv", [g.op("Mul", [tiles, m]), kernel, bias], { kernel_shape: [s.patchSize, s.patchSize], strides: [s.patchSize, s.patchSize] });
  const tokens = g.op("Transpose", [g.op("Reshape", [conv, g.i64([0, s.visionHidden, P])])], { perm: [0, 2, 1] });
  const pos = g.initializer("vision.position_embedding.weight", floatTensor("float32", [P, s.visionHidden], w.positions));
  const hidden = g.op("Tanh", [g.op("Add", [tokens, pos])]);
  const proj = g.initializer("connector.proj.weight", floatTensor("float32", [s.visionHidden, s.textHidden], w.projection));
  g.output("image_features", "float32", ["num_tiles", P, s.textHidden], g.op("MatMul", [hidden, proj]));
  return serializeModel(g, { opsets: [{ domain: "", version: 17 }], metadata: { "sluice.role": "vision_encoder" } });
}

/** input_ids -> inputs_embeds with the decoder's own embedding table. */
export function buildEmbedTokens(vocab: number, hidden: number, table: Float32Array, dtype: "float32" | "float16" = "float32"): SerializedModel {
  const g = new GraphBuilder("embed_tokens");
  const ids = g.input("input_ids", "int64", ["batch_size", "sequence_length"]);
  const w = g.initializer("model.embed_tokens.weight", floatTensor(dtype, [vocab, hidden], table));
  g.output("inputs_embeds", dtype, ["batch_size", "sequence_length", hidden], g.op("Gather", [w, ids], { axis: 0 }));
  return serializeModel(g, { opsets: [{ domain: "", version: 17 }], metadata: { "sluice.role": "embed_tokens" } });
}
