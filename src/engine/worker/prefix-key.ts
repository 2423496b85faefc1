// What the prefix cache matches a prompt by. A text prompt is its token ids. In a prompt with
// images, every image position holds the same placeholder id whatever the image, so there it
// stands for the position's content instead: the image feature row it takes (and its 3-D rotary
// position, for Qwen2-VL), interned to a negative id no token can have. Equal keys up to a position
// then mean equal embeddings (and positions) up to it, hence an equal cache: a conversation that
// sends the same image again reuses its prefill, and a different image never matches past it.
import { createHash } from "node:crypto";
import type { PromptImages } from "../vision/vision-model.ts";

/** Content hashes of feature rows → their negative ids, least recently used first. Ids are never reused. */
const interned = new Map<string, number>();
/**
 * Beyond this many rows the least recently used is forgotten: a later prompt with that row gets a
 * new id, so an entry keyed by the old one can only miss, never match wrongly.
 */
const MAX_INTERNED = 1 << 16;
let nextId = -1;

function internRow(digest: string): number {
  let id = interned.get(digest);
  if (id !== undefined) interned.delete(digest);
  else {
    if (interned.size >= MAX_INTERNED) interned.delete(interned.keys().next().value!);
    id = nextId--;
  }
  interned.set(digest, id);
  return id;
}

export function prefixKey(prompt: number[], images: PromptImages | null): number[] {
  if (!images) return prompt;
  const { rowAt, features, hidden, rope } = images;
  const bytes = new Uint8Array(features.buffer, features.byteOffset, features.byteLength);
  const rowBytes = hidden * 4;
  const position = new Int32Array(3);
  return prompt.map((token, i) => {
    const row = i < rowAt.length ? rowAt[i]! : -1;
    if (row < 0) return token;
    const h = createHash("sha256").update(bytes.subarray(row * rowBytes, (row + 1) * rowBytes));
    if (rope && i < rope.length) {
      for (let r = 0; r < 3; r++) position[r] = rope.positions[r * rope.length + i]!;
      h.update(new Uint8Array(position.buffer));
    }
    return internRow(h.digest("base64"));
  });
}
