// Turns every image part of a conversation into an inline data: URL before the engine sees it:
// remote images are fetched here (network policy belongs to the gateway, not the model worker),
// inline ones are checked. Bytes must be PNG, JPEG, WebP or GIF whatever the sender claims.
import type { ChatMessage, ContentPart } from "../protocol/chat.ts";
import { checkImageSize } from "./decode.ts";
import { ImageInputError } from "./errors.ts";
import { fetchImage, type Resolver } from "./fetch.ts";
import { ACCEPTED_MIME_TYPES, IMAGE_MIME, sniffImageFormat } from "./formats.ts";
import type { ImageFetchPolicy } from "./policy.ts";

/** The bytes of a `data:image/...;base64,` URL. */
export function decodeDataUrl(url: string, maxBytes: number): Uint8Array {
  const comma = url.indexOf(",");
  if (comma < 0) throw new ImageInputError("the data: URL has no ',' before its data");
  const meta = url.slice(5, comma).split(";").map((s) => s.trim().toLowerCase());
  const type = meta[0] ?? "";
  if (!ACCEPTED_MIME_TYPES.has(type)) throw new ImageInputError(`the data: URL's media type '${type || "none"}' is not PNG, JPEG, WebP or GIF`);
  if (!meta.includes("base64")) throw new ImageInputError("the data: URL must be base64-encoded");
  const data = url.slice(comma + 1).replace(/\s+/g, "");
  if (Math.floor((data.length * 3) / 4) > maxBytes + 3) throw new ImageInputError(`the image is larger than the limit of ${maxBytes} bytes`);
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(data) || data.length % 4 === 1) throw new ImageInputError("the data: URL's base64 data is malformed");
  const bytes = new Uint8Array(Buffer.from(data, "base64"));
  if (bytes.length > maxBytes) throw new ImageInputError(`the image is larger than the limit of ${maxBytes} bytes`);
  return bytes;
}

async function toDataUrl(bytes: Uint8Array): Promise<string> {
  const format = sniffImageFormat(bytes);
  if (!format) throw new ImageInputError("the image data is not a PNG, JPEG, WebP or GIF file");
  await checkImageSize(bytes);
  return `data:${IMAGE_MIME[format]};base64,${Buffer.from(bytes).toString("base64")}`;
}

async function resolvePart(url: string, policy: ImageFetchPolicy, resolver?: Resolver): Promise<string> {
  if (/^data:/i.test(url)) return toDataUrl(decodeDataUrl(url, policy.maxBytes));
  if (/^https?:/i.test(url)) return toDataUrl((await fetchImage(url, policy, resolver)).bytes);
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1];
  throw new ImageInputError(scheme ? `the image URL scheme '${scheme}' is not supported (use https, http or a data: URL)` : "the image URL is not a valid URL");
}

/** Messages whose image parts all carry checked data: URLs; throws ImageInputError naming the part. */
export async function resolveImageParts(messages: ChatMessage[], policy: ImageFetchPolicy, resolver?: Resolver): Promise<ChatMessage[]> {
  const jobs: Promise<void>[] = [];
  const out = messages.map((m, i) => {
    if (!Array.isArray(m.content) || !m.content.some((p) => p.type === "image_url")) return m;
    const content: ContentPart[] = m.content.map((p) => ({ ...p }) as ContentPart);
    content.forEach((p, j) => {
      if (p.type !== "image_url") return;
      const param = `messages[${i}].content[${j}]`;
      jobs.push(
        resolvePart(p.image_url.url, policy, resolver).then(
          (url) => {
            content[j] = { type: "image_url", image_url: { ...p.image_url, url } };
          },
          (e: unknown) => {
            const why = e instanceof ImageInputError ? e.message : String((e as Error)?.message ?? e);
            throw new ImageInputError(`Invalid image in ${param}: ${why}.`, param);
          },
        ),
      );
    });
    return { ...m, content };
  });
  // All fetched concurrently; the first failure in message order is the one reported.
  const results = await Promise.allSettled(jobs);
  const failed = results.find((r) => r.status === "rejected");
  if (failed) throw (failed as PromiseRejectedResult).reason;
  return out;
}
