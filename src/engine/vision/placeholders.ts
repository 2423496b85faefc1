// How one image is written into the prompt, as Idefics3Processor (SmolVLM) does: each tile as
// <fake_token_around_image><row_r_col_c> followed by image_seq_len <image> tokens, rows ended by
// a newline, then the global image; or, unsplit, just the global image.

export interface ImageTokens {
  image: string;
  fake: string;
  global: string;
}

export function imagePromptString(rows: number, cols: number, seqLen: number, t: ImageTokens): string {
  const run = t.image.repeat(seqLen);
  const global = `${t.fake}${t.global}${run}${t.fake}`;
  if (rows === 0 && cols === 0) return global;
  let out = "";
  for (let r = 1; r <= rows; r++) {
    for (let c = 1; c <= cols; c++) out += `${t.fake}<row_${r}_col_${c}>${run}`;
    out += "\n";
  }
  return `${out}\n${global}`;
}

/** Replaces the n-th occurrence of `placeholder` with `expansions[n]`; null when the counts differ. */
export function expandPlaceholders(text: string, placeholder: string, expansions: string[]): string | null {
  const pieces = text.split(placeholder);
  if (pieces.length - 1 !== expansions.length) return null;
  let out = pieces[0]!;
  expansions.forEach((e, i) => (out += e + pieces[i + 1]!));
  return out;
}
