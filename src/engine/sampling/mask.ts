// Allowed-token masks: one bit per token id (bit i of word i >> 5), as structured output builds them.

export type TokenMask = Uint32Array;

export function createMask(vocabSize: number, allowAll = false): TokenMask {
  const m = new Uint32Array((vocabSize + 31) >>> 5);
  if (allowAll) m.fill(0xffffffff);
  return m;
}

export function allowToken(mask: TokenMask, id: number): void {
  mask[id >>> 5] |= 1 << (id & 31);
}

export function isAllowed(mask: TokenMask, id: number): boolean {
  return ((mask[id >>> 5] >>> (id & 31)) & 1) === 1;
}
