// GPT-2's byte-level alphabet: every byte is written as one printable character so that BPE
// vocabularies never contain raw control bytes or spaces.

function buildCharToByte(): Map<number, number> {
  const printable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const map = new Map<number, number>();
  let next = 256;
  for (let b = 0; b < 256; b++) {
    if (printable(b)) map.set(b, b);
    else map.set(next++, b);
  }
  return map;
}

const CHAR_TO_BYTE = buildCharToByte();
const utf8 = new TextEncoder();

/**
 * The bytes a byte-level piece stands for. Like the Hugging Face ByteLevel decoder, a piece with
 * any character outside the alphabet (an added token such as "<|im_start|>" with a space, say) is
 * taken as its own UTF-8 text.
 */
export function byteLevelBytes(piece: string): Uint8Array {
  const out = new Uint8Array(piece.length);
  let n = 0;
  for (const ch of piece) {
    const b = CHAR_TO_BYTE.get(ch.codePointAt(0)!);
    if (b === undefined) return utf8.encode(piece);
    out[n++] = b;
  }
  return out.subarray(0, n);
}
