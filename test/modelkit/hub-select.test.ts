// The rules of a pull that need no network: which files a repository's layout needs for a dtype,
// what `auto` picks per device, where the token comes from, and which dtype's graph the engine
// loads from a directory holding several.
import { describe, expect, test } from "bun:test";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { locateModelFiles, modelDType } from "../../src/engine/runtime/decoder-spec.ts";
import { hubEndpoint, hubToken, hubTokenPath } from "../../src/modelkit/hub/auth.ts";
import { PullError } from "../../src/modelkit/hub/errors.ts";
import { parseGGUFQuantLabel } from "@huggingface/gguf";
import { defaultPullId, splitRepoSpec, validatePullOptions } from "../../src/modelkit/hub/pull.ts";
import { selectGenai, selectGguf, selectTransformersJs } from "../../src/modelkit/hub/select.ts";
import { DTYPE_SUFFIX, isExternalDataOf } from "../../src/onnx-dtypes.ts";
import { tempDir } from "../helpers/paths.ts";

const CONFIGS = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"];
/** onnx-community's layout for a text model, every dtype, the big ones with external data. */
const TEXT_REPO = [
  ".gitattributes",
  "README.md",
  ...CONFIGS,
  "onnx/model.onnx",
  "onnx/model.onnx_data",
  "onnx/model_fp16.onnx",
  "onnx/model_fp16.onnx_data",
  "onnx/model_q4.onnx",
  "onnx/model_q4f16.onnx",
  "onnx/model_quantized.onnx",
  "onnx/model_int8.onnx",
  "onnx/model_uint8.onnx",
  "onnx/model_bnb4.onnx",
];

function rejects(f: () => unknown, kind: PullError["kind"], text: RegExp): void {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(PullError);
    expect((e as PullError).kind).toBe(kind);
    expect((e as PullError).message).toMatch(text);
    return;
  }
  throw new Error("expected a PullError");
}

describe("transformers.js layout", () => {
  test("each dtype takes exactly its own graph and external data, with the configs", () => {
    const graphs = (dtype: Parameters<typeof selectTransformersJs>[1]) =>
      selectTransformersJs({ files: TEXT_REPO }, dtype, "cpu").files.filter((f) => f.startsWith("onnx/"));
    expect(graphs("fp32")).toEqual(["onnx/model.onnx", "onnx/model.onnx_data"]);
    expect(graphs("fp16")).toEqual(["onnx/model_fp16.onnx", "onnx/model_fp16.onnx_data"]);
    expect(graphs("q4")).toEqual(["onnx/model_q4.onnx"]);
    expect(graphs("q4f16")).toEqual(["onnx/model_q4f16.onnx"]);
    expect(graphs("q8")).toEqual(["onnx/model_quantized.onnx"]);
    expect(graphs("int8")).toEqual(["onnx/model_int8.onnx"]);
    expect(graphs("uint8")).toEqual(["onnx/model_uint8.onnx"]);
    expect(graphs("bnb4")).toEqual(["onnx/model_bnb4.onnx"]);
    const s = selectTransformersJs({ files: TEXT_REPO }, "fp32", "cpu");
    expect(s.files.filter((f) => !f.startsWith("onnx/"))).toEqual(CONFIGS);
    expect(s.available).toEqual(["fp32", "fp16", "q8", "int8", "uint8", "q4", "q4f16", "bnb4"]);
  });

  test("auto: q4 on CPU, else fp32; fp16 on CUDA, else q4f16; and it says so", () => {
    const cpu = selectTransformersJs({ files: TEXT_REPO }, "auto", "cpu");
    expect(cpu.dtype).toBe("q4");
    expect(cpu.note).toContain("auto on CPU");
    expect(selectTransformersJs({ files: TEXT_REPO }, "auto", "cuda").dtype).toBe("fp16");
    const noQ4 = TEXT_REPO.filter((f) => !f.includes("_q4.") && !f.includes("_fp16."));
    expect(selectTransformersJs({ files: noQ4 }, "auto", "cpu").dtype).toBe("fp32");
    expect(selectTransformersJs({ files: noQ4 }, "auto", "cuda").dtype).toBe("q4f16");
  });

  test("a dtype the repository lacks is refused with the dtypes it has", () => {
    const only = [...CONFIGS, "onnx/model.onnx", "onnx/model_q4.onnx"];
    rejects(() => selectTransformersJs({ files: only }, "fp16", "cpu"), "usage", /no fp16 export \(onnx\/model_fp16\.onnx\); it has: fp32, q4/);
  });

  test("vision-language exports take the encoder, embeddings and decoder of one dtype", () => {
    const files = [
      ...CONFIGS,
      "preprocessor_config.json",
      "processor_config.json",
      ...["vision_encoder", "embed_tokens", "decoder_model_merged"].flatMap((b) => [`onnx/${b}.onnx`, `onnx/${b}_fp16.onnx`, `onnx/${b}_q4.onnx`]),
      "onnx/decoder_model_merged_q4f16.onnx",
    ];
    const s = selectTransformersJs({ files }, "fp16", "cpu");
    expect(s.files.filter((f) => f.startsWith("onnx/"))).toEqual(["onnx/vision_encoder_fp16.onnx", "onnx/embed_tokens_fp16.onnx", "onnx/decoder_model_merged_fp16.onnx"]);
    expect(s.files).toContain("preprocessor_config.json");
    // q4f16 has only the decoder: not a complete export.
    expect(s.available).toEqual(["fp32", "fp16", "q4"]);
  });

  test("no tokenizer.json, or no decoder graph: refused in words", () => {
    rejects(() => selectTransformersJs({ files: ["config.json", "onnx/model.onnx"] }, "fp32", "cpu"), "no_model", /no tokenizer\.json/);
    rejects(() => selectTransformersJs({ files: [...CONFIGS, "onnx/encoder_model.onnx"] }, "auto", "cpu"), "no_model", /not a decoder export/);
  });
});

describe("onnxruntime-genai layout", () => {
  test("takes the files genai_config.json names and their external data", () => {
    const files = ["genai_config.json", "tokenizer.json", "tokenizer_config.json", "model.onnx", "model.onnx.data", "other.onnx"];
    const s = selectGenai({ files }, { model: { decoder: { filename: "model.onnx" } } }, "auto");
    expect(s.files).toEqual(["genai_config.json", "tokenizer.json", "tokenizer_config.json", "model.onnx", "model.onnx.data"]);
    expect(s.dtype).toBeNull();
    rejects(() => selectGenai({ files }, { model: { decoder: { filename: "missing.onnx" } } }, "auto"), "no_model", /names missing\.onnx/);
  });
});

test("the dtype suffixes are transformers.js's, and external data names are recognised", () => {
  expect(DTYPE_SUFFIX).toEqual({ fp32: "", fp16: "_fp16", q8: "_quantized", int8: "_int8", uint8: "_uint8", q4: "_q4", q4f16: "_q4f16", bnb4: "_bnb4" });
  expect(isExternalDataOf("model.onnx", "model.onnx_data")).toBe(true);
  expect(isExternalDataOf("model.onnx", "model.onnx_data_2")).toBe(true);
  expect(isExternalDataOf("model.onnx", "model.onnx.data")).toBe(true);
  expect(isExternalDataOf("model.onnx", "model_fp16.onnx_data")).toBe(false);
});

test("endpoint and token come from the environment or huggingface_hub's token file", () => {
  const home = tempDir("sluice-hfhome-");
  try {
    expect(hubEndpoint({})).toBe("https://huggingface.co");
    expect(hubEndpoint({ HF_ENDPOINT: "http://mirror.local:8080/" })).toBe("http://mirror.local:8080");
    expect(hubToken({ HF_HOME: home.path })).toBeNull();
    writeFileSync(join(home.path, "token"), "hf_fromfile\n");
    expect(hubToken({ HF_HOME: home.path })).toEqual({ token: "hf_fromfile", source: join(home.path, "token") });
    expect(hubToken({ HF_HOME: home.path, HF_TOKEN: "hf_fromenv" })).toEqual({ token: "hf_fromenv", source: "HF_TOKEN" });
    expect(hubTokenPath({ HOME: "/home/u" })).toBe("/home/u/.cache/huggingface/token");
    expect(hubTokenPath({ HF_TOKEN_PATH: "/etc/hf" })).toBe("/etc/hf");
  } finally {
    home.remove();
  }
});

describe("the engine loads the dtype the card names", () => {
  test("several dtypes: the card's; none named: fp32's names, else the only one, else refused", () => {
    const d = tempDir("sluice-dtypes-");
    try {
      mkdirSync(join(d.path, "onnx"));
      for (const f of ["model.onnx", "model_fp16.onnx", "model_q4.onnx"]) writeFileSync(join(d.path, "onnx", f), "");
      expect(locateModelFiles(d.path).onnxPath).toBe(join(d.path, "onnx", "model.onnx"));
      writeFileSync(join(d.path, "sluice.json"), JSON.stringify({ dtype: "q4" }));
      expect(locateModelFiles(d.path).onnxPath).toBe(join(d.path, "onnx", "model_q4.onnx"));
      writeFileSync(join(d.path, "sluice.json"), JSON.stringify({ dtype: "q4f16" }));
      expect(() => locateModelFiles(d.path)).toThrow(/dtype q4f16.*onnx\/model_q4f16\.onnx/);
      writeFileSync(join(d.path, "sluice.json"), JSON.stringify({ dtype: "q3" }));
      expect(() => modelDType(d.path)).toThrow(/not one of/);
      writeFileSync(join(d.path, "sluice.json"), "{}");
      rmSync(join(d.path, "onnx", "model.onnx"));
      expect(() => modelDType(d.path)).toThrow(/holds the dtypes fp16, q4 and sluice\.json names none/);
      rmSync(join(d.path, "onnx", "model_fp16.onnx"));
      expect(modelDType(d.path)).toBe("q4");
    } finally {
      d.remove();
    }
  });
});

describe("GGUF: which file REPO:QUANT and --file take", () => {
  // As unsloth's and bartowski's *-GGUF repositories hold them.
  const GGUF_REPO = [
    ".gitattributes",
    "README.md",
    "Qwen3-8B-Q4_K_M.gguf",
    "Qwen3-8B-Q8_0.gguf",
    "Qwen3-8B-UD-Q4_K_XL.gguf",
    "Qwen3-8B-IQ4_XS.gguf",
    "mmproj-F16.gguf",
    "BF16/Qwen3-8B-BF16-00001-of-00002.gguf",
    "BF16/Qwen3-8B-BF16-00002-of-00002.gguf",
  ];
  const pick = (want: { quant?: string; file?: string }, files = GGUF_REPO) => selectGguf({ files }, want, parseGGUFQuantLabel);

  test("a quantisation by its label, any case; Q4_K_M by default; a split model whole; projectors never", () => {
    expect(pick({ quant: "q8_0" }).files).toEqual(["Qwen3-8B-Q8_0.gguf"]);
    expect(pick({ quant: "UD-Q4_K_XL" }).files).toEqual(["Qwen3-8B-UD-Q4_K_XL.gguf"]);
    expect(pick({})).toMatchObject({ files: ["Qwen3-8B-Q4_K_M.gguf"], quant: "Q4_K_M", note: "GGUF Q4_K_M (the default, as llama.cpp and Ollama choose; the repo has BF16, IQ4_XS, Q4_K_M, Q8_0, UD-Q4_K_XL)" });
    expect(pick({ quant: "BF16" }).files).toEqual(["BF16/Qwen3-8B-BF16-00001-of-00002.gguf", "BF16/Qwen3-8B-BF16-00002-of-00002.gguf"]);
    expect(pick({ file: "BF16/Qwen3-8B-BF16-00002-of-00002.gguf" }).files).toEqual(["BF16/Qwen3-8B-BF16-00001-of-00002.gguf", "BF16/Qwen3-8B-BF16-00002-of-00002.gguf"]);
    expect(pick({}, ["README.md", "model-Q5_K_M.gguf", "mmproj-model-f16.gguf"]).files).toEqual(["model-Q5_K_M.gguf"]);
  });

  test("refusals in words", () => {
    rejects(() => pick({ quant: "Q2_K" }), "usage", /^the repository has no Q2_K GGUF file; it has: BF16, IQ4_XS, Q4_K_M, Q8_0, UD-Q4_K_XL$/);
    rejects(() => pick({}, ["a-Q8_0.gguf", "a-F16.gguf"]), "usage", /several GGUF models; choose one with REPO:QUANT or --file \(it has: F16, Q8_0\)/);
    rejects(() => pick({ quant: "Q8_0" }, ["a-Q8_0-00001-of-00003.gguf", "a-Q8_0-00003-of-00003.gguf"]), "no_model", /split in 3 files, and the repository lacks a-Q8_0-00002-of-00003\.gguf/);
    rejects(() => pick({}, ["README.md", "mmproj-F16.gguf"]), "no_model", /no GGUF model file/);
    rejects(() => pick({ quant: "Q4_0" }, ["a-Q4_0.gguf", "b/a-Q4_0.gguf"]), "usage", /several Q4_0 GGUF files; choose one with --file: a-Q4_0\.gguf, b\/a-Q4_0\.gguf/);
  });

  test("REPO:QUANT, the id it is served as, and what is refused before any request", () => {
    expect(splitRepoSpec("unsloth/Qwen3-8B-GGUF:Q4_K_M")).toEqual({ repo: "unsloth/Qwen3-8B-GGUF", quant: "Q4_K_M" });
    expect(defaultPullId("unsloth/Qwen3-8B-GGUF:Q4_K_M")).toBe("unsloth/Qwen3-8B-GGUF-Q4_K_M");
    expect(defaultPullId("unsloth/Qwen3-8B-GGUF", "BF16/Qwen3-8B-BF16-00001-of-00002.gguf")).toBe("unsloth/Qwen3-8B-GGUF-BF16");
    expect(defaultPullId("onnx-community/Qwen3-0.6B-ONNX")).toBe("onnx-community/Qwen3-0.6B-ONNX");
    rejects(() => validatePullOptions({ repo: "a/b:Q4 K" }), "usage", /not a GGUF quantisation/);
    rejects(() => validatePullOptions({ repo: "a/b", file: "../x.gguf" }), "usage", /--file must be a \.gguf file of the repository/);
    rejects(() => validatePullOptions({ repo: "a/b:Q8_0", file: "x.gguf" }), "usage", /give REPO:QUANT or --file, not both/);
  });
});
