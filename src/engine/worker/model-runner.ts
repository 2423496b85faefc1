// A loaded model inside its worker: the decoder session, the tokenizer and chat template, and the
// translation of a chat request into prompt token ids (with the checks that need the tokenizer).
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { chooseProviders, type ProviderChoice } from "../providers.ts";
import { DEFAULT_ORT_BINDING, openDecoder, openHostSession } from "../decoders.ts";
import type { Decoder } from "../runtime/decoder.ts";
import { ChatTemplateError, renderChatPrompt } from "../text/chat-template.ts";
import { modelSamplingDefaults } from "../sampling/defaults.ts";
import { PromptBound } from "../text/prompt-bound.ts";
import { TextTokenizer } from "../text/tokenizer.ts";
import { EngineRequestError, type EngineModel, type ImagePart } from "../types.ts";
import { ImageInputError } from "../../vision/errors.ts";
import { VisionModel, type EncodedImage, type PromptImages, type RequestImage } from "../vision/vision-model.ts";
import { expandPlaceholders } from "../vision/placeholders.ts";
import { promptOpensBlock, type ReasoningCard } from "../../structured/reasoning/index.ts";
import type { WireRequest, WorkerOptions } from "./protocol.ts";
import { modelReasoning, templateContext, templateSettings, type ModelReasoning, type TemplateContext } from "./reasoning.ts";
import type { ThinkingPlan } from "./thinking.ts";
import { resolveToolFormat, type ToolFormatCard } from "../tool-format.ts";
import { toolFormat } from "../../structured/tools/index.ts";

interface ModelCard extends ToolFormatCard {
  id?: string;
  display_name?: string;
  context_length?: number;
  capabilities?: { tools?: boolean; structured_output?: boolean; images?: boolean };
  /** The thinking block's tags and budgets, or false: the model does not think. */
  reasoning?: ReasoningCard;
  /** Requests that may wait for this model's KV memory (over serve --max-queue). */
  max_queue?: number;
  /** Sampling defaults over generation_config.json's (see sampling/defaults.ts). */
  defaults?: unknown;
}

export class ModelRunner {
  private constructor(
    readonly decoder: Decoder,
    readonly tokenizer: TextTokenizer,
    readonly info: EngineModel,
    readonly providers: ProviderChoice,
    /** The image encoder of a vision-language model; null for text-only models. */
    readonly vision: VisionModel | null,
    /** What the chat template reads (for chat_template_kwargs). */
    readonly template: TemplateContext,
    /** The thinking block the model writes, or null. */
    readonly reasoning: ModelReasoning | null,
    /** A lower bound on a prompt's tokens without tokenising it (null: none for this tokenizer). */
    readonly promptBound: PromptBound | null,
    /** This model's queue bound from its sluice.json, or null (the server's). */
    readonly queueLimit: number | null = null,
  ) {}

  static async load(opts: Pick<WorkerOptions, "id" | "dir" | "device" | "threads"> & Partial<WorkerOptions>): Promise<ModelRunner> {
    const providers = chooseProviders(opts.device);
    const decoder = await openDecoder(opts.dir, {
      providers: providers.providers,
      threads: opts.threads,
      binding: opts.binding ?? DEFAULT_ORT_BINDING,
      batchInvariant: opts.batchInvariant === true,
    });
    const tokenizer = TextTokenizer.load(opts.dir);
    const binding = opts.binding ?? DEFAULT_ORT_BINDING;
    const vision = await VisionModel.load(opts.dir, { open: (path) => openHostSession(path, { providers: providers.providers, threads: opts.threads, binding }) });
    if (vision?.needs3dPositions && decoder.spec.positionRows !== 3) {
      await vision.release();
      throw new Error("the vision encoder's image tokens take 3-D (multimodal rotary) positions, but the decoder's position_ids are not [3, batch, sequence]");
    }
    const cardPath = join(opts.dir, "sluice.json");
    const card = (existsSync(cardPath) ? JSON.parse(readFileSync(cardPath, "utf8")) : {}) as ModelCard;
    // The card may lower the context (to bound KV memory), never raise it past the graph's.
    const contextLength = Math.min(card.context_length ?? decoder.spec.contextLength, decoder.spec.contextLength);
    if (tokenizer.chatTemplates.default === null && Object.keys(tokenizer.chatTemplates.named).length === 0) {
      throw new Error("the tokenizer has no chat_template (tokenizer_config.json or chat_template.jinja)");
    }
    const info: EngineModel = {
      id: opts.id,
      displayName: card.display_name ?? opts.id,
      contextLength,
      // Images need the vision encoder; the card may still switch them off.
      supportsImages: vision !== null && card.capabilities?.images !== false,
      supportsTools: card.capabilities?.tools ?? false,
      supportsStructuredOutput: card.capabilities?.structured_output ?? false,
      toolFormat: resolveToolFormat(card, tokenizer.chatTemplates)?.name ?? null,
      dir: opts.dir,
      provider: decoder.provider,
      samplingDefaults: modelSamplingDefaults(opts.dir, card.defaults),
    };
    const template = templateContext(tokenizer);
    const reasoning = await modelReasoning(tokenizer, card.reasoning, template);
    const queueLimit = Number.isInteger(card.max_queue) && card.max_queue! > 0 ? card.max_queue! : null;
    let promptBound: PromptBound | null = null;
    try {
      promptBound = PromptBound.fromTokenizerJson(JSON.parse(readFileSync(join(opts.dir, "tokenizer.json"), "utf8")));
    } catch {
      // No bound: long prompts are then refused only after tokenising.
    }
    return new ModelRunner(decoder, tokenizer, info, providers, vision, template, reasoning, promptBound, queueLimit);
  }

  get vocabSize(): number {
    return this.decoder.spec.vocabSize;
  }

  /** Renders and tokenises the conversation; refuses what this model cannot take. */
  async promptIds(req: WireRequest): Promise<number[]> {
    return (await this.prompt(req)).ids;
  }

  /**
   * The prompt's token ids and, when it has images, their features (image tokens count as prompt
   * tokens); for a model that thinks, where the prompt leaves its output and the thinking budget.
   */
  async prompt(req: WireRequest): Promise<{ ids: number[]; images: PromptImages | null; thinking: ThinkingPlan | null }> {
    let banned = 0;
    for (const [key, bias] of Object.entries(req.sampling.logitBias)) {
      const id = Number(key);
      if (id >= this.vocabSize) {
        throw new EngineRequestError(
          `logit_bias names token ${id}, but this model's vocabulary has ${this.vocabSize} tokens.`,
          "logit_bias",
          "invalid_value",
        );
      }
      // -100 bans a token (the sampler never picks it); only the tokenizer's ids are ever sampled.
      if (bias <= -100 && id < this.tokenizer.vocabSize) banned++;
    }
    if (banned >= this.tokenizer.vocabSize) {
      throw new EngineRequestError(
        `logit_bias bans all ${this.tokenizer.vocabSize} tokens of this model's vocabulary (a bias of -100 bans a token): nothing could be generated.`,
        "logit_bias",
        "invalid_value",
      );
    }
    const settings = templateSettings(req, this.info.id, this.template, this.reasoning);
    let text: string;
    try {
      text = renderChatPrompt(this.tokenizer, req.messages, {
        tools: req.tools,
        toolChoice: req.toolChoice,
        toolFormat: this.info.toolFormat ? toolFormat(this.info.toolFormat) : null,
        addGenerationPrompt: true,
        kwargs: settings.kwargs,
      });
    } catch (e) {
      if (e instanceof ChatTemplateError) {
        throw new EngineRequestError(`The model's chat template refused the messages: ${e.message}`, "messages", "invalid_value");
      }
      throw e;
    }
    const limit = this.info.contextLength;
    // Before tokenising (and before any image is encoded): a long prompt that cannot fit is
    // refused at once. A short one is tokenised, so its refusal can say by how much it is over.
    if (text.length > EXACT_PROMPT_CHARS && this.promptBound?.atLeast(text, limit)) {
      throw new EngineRequestError(
        `This model's maximum context length is ${limit} tokens. However, your messages (${text.length} characters) ` +
          `result in more tokens than that (at least one token must be left for the completion). Please reduce the length of the messages.`,
        "messages",
        "context_length_exceeded",
      );
    }
    const thinking = this.reasoning ? { startsInside: promptOpensBlock(text, this.reasoning.format.tags), budget: settings.budget } : null;
    const requestImages = imagesOf(req);
    let encoded: EncodedImage[] = [];
    if (requestImages.length > 0) {
      const vision = this.vision;
      if (!vision || !this.info.supportsImages) {
        throw new EngineRequestError(`The model '${this.info.id}' does not accept image input (${requestImages[0]!.param}).`, requestImages[0]!.param, "image_input_not_supported");
      }
      try {
        for (const img of requestImages) encoded.push(await vision.encode(img));
      } catch (e) {
        if (e instanceof ImageInputError) throw new EngineRequestError(e.message, e.param, "invalid_image");
        throw e;
      }
      const expanded = expandPlaceholders(text, vision.placeholder, encoded.map((e) => e.promptText));
      if (expanded === null) {
        throw new EngineRequestError(
          `The messages hold ${requestImages.length} image(s) but the rendered prompt has a different number of '${vision.placeholder}' placeholders (is '${vision.placeholder}' written in a text part?).`,
          "messages",
          "invalid_value",
        );
      }
      text = expanded;
    }
    const ids = await this.tokenizer.encode(text, { addSpecialTokens: false });
    let images: PromptImages | null = null;
    if (encoded.length > 0) {
      images = this.vision!.placeFeatures(ids, encoded);
      if (!images) throw new EngineRequestError("The image tokens of the prompt do not match the images' features (an image token written as text?).", "messages", "invalid_value");
    }
    if (ids.length >= limit) {
      throw new EngineRequestError(
        `This model's maximum context length is ${limit} tokens. However, your messages resulted in ${ids.length} tokens, ` +
          `${ids.length - limit + 1} more than fit (at least one token must be left for the completion). Please reduce the length of the messages.`,
        "messages",
        "context_length_exceeded",
      );
    }
    return { ids, images, thinking };
  }
}

/** Prompts up to this many characters are tokenised before being refused (a few milliseconds). */
const EXACT_PROMPT_CHARS = 50_000;

/** Image parts in message order, which is the order chat templates write them. */
function imagesOf(req: WireRequest): RequestImage[] {
  const out: RequestImage[] = [];
  req.messages.forEach((m, i) => {
    if (!Array.isArray(m.content)) return;
    m.content.forEach((p, j) => {
      if (p.type === "image_url") out.push({ part: p as ImagePart, param: `messages[${i}].content[${j}]` });
    });
  });
  return out;
}
