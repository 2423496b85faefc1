// SmolVLM / Idefics3: tiles of the image (plus a global view), each becoming image_seq_len
// <image> tokens between tile markers.
import * as ort from "onnxruntime-node";
import { floatInput } from "../runtime/tensors.ts";
import type { RawImage } from "../../vision/decode.ts";
import { preprocessImage, type PreprocessorConfig } from "../../vision/preprocess.ts";
import type { ImageAdapter, ImageDetail, PreparedImage } from "./adapter.ts";
import { imagePromptString, type ImageTokens } from "./placeholders.ts";

export class Idefics3Adapter implements ImageAdapter {
  readonly placeholder: string;
  readonly mergeSize = null;
  private readonly tokens: ImageTokens = { image: "<image>", fake: "<fake_token_around_image>", global: "<global-img>" };

  constructor(
    private readonly preprocessor: PreprocessorConfig,
    private readonly imageSeqLen: number,
  ) {
    this.placeholder = this.tokens.image;
  }

  async prepare(raw: RawImage, detail: ImageDetail | undefined, pixelType: "float32" | "float16"): Promise<PreparedImage> {
    // detail "low": one global tile; "high" and "auto": the processor's own tiling.
    const tiles = await preprocessImage(this.preprocessor, raw, detail === "low" ? false : undefined);
    const { count, height, width } = tiles;
    return {
      feeds: {
        pixel_values: floatInput(pixelType, tiles.data, [1, count, 3, height, width]),
        pixel_attention_mask: new ort.Tensor("bool", new Uint8Array(count * height * width).fill(1), [1, count, height, width]),
      },
      promptText: imagePromptString(tiles.rows, tiles.cols, this.imageSeqLen, this.tokens),
      rows: count * this.imageSeqLen,
      grid: null,
    };
  }
}
