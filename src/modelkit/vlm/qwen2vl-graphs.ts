// Qwen2-VL's vision encoder in the onnx-community layout transformers.js runs
// (Qwen2VLForConditionalGeneration.encode_image): pixel_values [patches, 3 * temporal * patch²]
// and grid_thw [images, 3] -> image_features [patches / merge², text hidden]. A small stand-in
// for the real ViT: a linear patch embedding and the 2x2 patch merger (each group of merge²
// consecutive patches, which the processor already placed side by side, folded into one token
// by an MLP).

import { GraphBuilder, serializeModel, type SerializedModel } from "../onnx/builder.ts";
import { floatTensor } from "../onnx/tensor.ts";

export interface Qwen2VLVisionShape {
  /** 3 * temporal_patch_size * patch_size². */
  patchValues: number;
  mergeSize: number;
  visionHidden: number;
  textHidden: number;
}

export interface Qwen2VLVisionWeights {
  /** [patchValues, visionHidden] */
  patchEmbed: Float32Array;
  patchBias: Float32Array;
  /** [merge² * visionHidden, merge² * visionHidden] */
  mergerFc1: Float32Array;
  /** [merge² * visionHidden, textHidden] */
  mergerFc2: Float32Array;
}

export function buildQwen2VLVisionEncoder(s: Qwen2VLVisionShape, w: Qwen2VLVisionWeights): SerializedModel {
  const g = new GraphBuilder("vision_encoder");
  const group = s.mergeSize * s.mergeSize;
  const merged = group * s.visionHidden;
  const pixels = g.input("pixel_values", "float32", ["num_patches", s.patchValues]);
  const grid = g.input("grid_thw", "int64", ["num_images", 3]);
  const embed = g.initializer("visual.patch_embed.weight", floatTensor("float32", [s.patchValues, s.visionHidden], w.patchEmbed));
  const bias = g.initializer("visual.patch_embed.bias", floatTensor("float32", [s.visionHidden], w.patchBias));
  const patches = g.op("Tanh", [g.op("Add", [g.op("MatMul", [pixels, embed]), bias])]);
  // Rows after merging, from the grids (t * h * w / merge² summed over images): a pixel count
  // that disagrees with grid_thw fails here instead of misplacing features.
  const perImage = g.op("ReduceProd", [grid], { axes: [1], keepdims: 0 });
  const rows = g.op("Div", [g.op("ReduceSum", [perImage, g.i64([0])], { keepdims: 1 }), g.i64([group])]);
  const folded = g.op("Reshape", [patches, g.op("Concat", [rows, g.i64([merged])], { axis: 0 })]);
  const fc1 = g.initializer("visual.merger.mlp.0.weight", floatTensor("float32", [merged, merged], w.mergerFc1));
  const fc2 = g.initializer("visual.merger.mlp.2.weight", floatTensor("float32", [merged, s.textHidden], w.mergerFc2));
  const hidden = g.op("Tanh", [g.op("MatMul", [folded, fc1])]);
  g.output("image_features", "float32", ["num_image_tokens", s.textHidden], g.op("MatMul", [hidden, fc2]));
  return serializeModel(g, { opsets: [{ domain: "", version: 17 }], metadata: { "sluice.role": "vision_encoder" } });
}
