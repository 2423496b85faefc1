// Qwen2-VL: the image as merge-grouped patches with its grid (pixel_values, grid_thw), written
// in the prompt as one <|image_pad|> per merged patch; its tokens take 3-D positions.
import { floatInput, int64Tensor } from "../runtime/tensors.ts";
import type { RawImage } from "../../vision/decode.ts";
import { preprocessQwen2VL, type Qwen2VLPreprocessorConfig } from "../../vision/qwen2vl.ts";
import type { ImageAdapter, ImageDetail, PreparedImage } from "./adapter.ts";

export const QWEN2VL_IMAGE_PAD = "<|image_pad|>";

export class Qwen2VLAdapter implements ImageAdapter {
  readonly placeholder = QWEN2VL_IMAGE_PAD;
  readonly mergeSize: number;

  constructor(
    private readonly preprocessor: Qwen2VLPreprocessorConfig,
    /** The encoder's grid input: onnx-community exports call it grid_thw. */
    private readonly gridInput: string,
    spatialMergeSize: number,
  ) {
    this.mergeSize = preprocessor.merge_size ?? spatialMergeSize;
  }

  /** detail "low" caps the image at LOW_DETAIL_TOKENS tokens; "high" and "auto" use the processor's bounds. */
  async prepare(raw: RawImage, detail: ImageDetail | undefined, pixelType: "float32" | "float16"): Promise<PreparedImage> {
    const p = await preprocessQwen2VL({ merge_size: this.mergeSize, ...this.preprocessor }, raw, detail ?? "auto");
    const patches = p.data.length / p.patchValues;
    return {
      feeds: {
        pixel_values: floatInput(pixelType, p.data, [patches, p.patchValues]),
        [this.gridInput]: int64Tensor(p.grid, [1, 3]),
      },
      promptText: QWEN2VL_IMAGE_PAD.repeat(p.tokens),
      rows: p.tokens,
      grid: p.grid,
    };
  }
}
