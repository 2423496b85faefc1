// Cached id -> vocabulary piece lookups. The native lookup costs about a microsecond; the
// streaming decoder asks for every generated token, so each piece is fetched once.

export class TokenPieces {
  private readonly cache: (string | null | undefined)[] = [];

  constructor(
    private readonly lookup: (id: number) => string | null,
    private readonly specialIds: ReadonlySet<number>,
  ) {}

  /** The raw vocabulary string of `id`, or null when the id is outside the vocabulary. */
  piece(id: number): string | null {
    let p = this.cache[id];
    if (p === undefined) {
      p = Number.isInteger(id) && id >= 0 ? this.lookup(id) : null;
      this.cache[id] = p;
    }
    return p;
  }

  isSpecial(id: number): boolean {
    return this.specialIds.has(id);
  }
}
