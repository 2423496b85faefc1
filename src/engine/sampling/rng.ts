// Seeded pseudo-random numbers for sampling: xoshiro128** seeded through splitmix32, so that the
// same seed (and stream, one per choice of an n>1 request) replays the same draws.

export type Random = () => number;

function splitmix32(state: { s: number }): number {
  state.s = (state.s + 0x9e3779b9) | 0;
  let z = state.s;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}

/** Uniform doubles in [0, 1) with 53 random bits. Without a seed, seeded from the OS. */
export function createRandom(seed?: number, stream = 0): Random {
  let lo: number;
  let hi: number;
  if (seed === undefined || !Number.isFinite(seed)) {
    const words = crypto.getRandomValues(new Uint32Array(2));
    lo = words[0]!;
    hi = words[1]!;
  } else {
    const s = Math.trunc(seed);
    lo = s >>> 0;
    hi = Math.floor(s / 4294967296) >>> 0;
  }
  const st = { s: (lo ^ Math.imul(stream + 1, 0x632be5ab)) | 0 };
  let a = splitmix32(st);
  st.s ^= hi;
  let b = splitmix32(st);
  let c = splitmix32(st);
  let d = splitmix32(st);
  if ((a | b | c | d) === 0) a = 1;

  const next = (): number => {
    const result = Math.imul(rotl(Math.imul(b, 5), 7), 9) >>> 0;
    const t = b << 9;
    c ^= a;
    d ^= b;
    b ^= c;
    a ^= d;
    c ^= t;
    d = rotl(d, 11);
    return result;
  };
  return () => ((next() >>> 5) * 67108864 + (next() >>> 6)) / 9007199254740992;
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}
