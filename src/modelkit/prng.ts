// A seeded PRNG (sfc32 seeded through splitmix32): the same seed gives the same weights on
// every platform, which keeps synthetic models byte-for-byte reproducible.

export class Prng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(seed: number) {
    let s = seed >>> 0;
    const next = () => {
      s = (s + 0x9e3779b9) >>> 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = next();
    this.b = next();
    this.c = next();
    this.d = next();
    for (let i = 0; i < 12; i++) this.nextU32();
  }

  nextU32(): number {
    const t = (((this.a + this.b) >>> 0) + this.d) >>> 0;
    this.d = (this.d + 1) >>> 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) >>> 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.c = (this.c + t) >>> 0;
    return t;
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.nextU32() / 4294967296;
  }

  int(maxExclusive: number): number {
    return Math.floor(this.next() * maxExclusive);
  }

  /**
   * `n` values uniform in [-a, a] with a = std * sqrt(3), i.e. standard deviation `std`.
   * Uniform rather than normal: cheaper, and the spread is all that matters here.
   */
  uniformArray(n: number, std: number): Float32Array {
    const out = new Float32Array(n);
    const a = 2 * std * Math.sqrt(3);
    for (let i = 0; i < n; i++) out[i] = (this.nextU32() / 4294967296 - 0.5) * a;
    return out;
  }
}
