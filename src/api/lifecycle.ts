// What a graceful shutdown needs to know: whether new work is still taken, and the generations in
// flight (their abort controllers), so they can run to a deadline and then be ended cleanly.

export class Lifecycle {
  draining = false;
  private readonly inflight = new Set<AbortController>();
  private idle: (() => void) | null = null;

  get active(): number {
    return this.inflight.size;
  }

  track(c: AbortController): void {
    this.inflight.add(c);
  }

  untrack(c: AbortController): void {
    this.inflight.delete(c);
    if (this.inflight.size === 0) this.idle?.();
  }

  /** Resolves when nothing is in flight, or after `ms`. */
  async settle(ms: number): Promise<void> {
    if (this.inflight.size === 0) return;
    await Promise.race([new Promise<void>((resolve) => (this.idle = resolve)), Bun.sleep(ms)]);
  }

  /** Resolves when nothing is in flight or the deadline passes; then aborts what is left. */
  async drain(deadlineMs: number): Promise<{ aborted: number }> {
    this.draining = true;
    if (this.inflight.size > 0) {
      await Promise.race([
        new Promise<void>((resolve) => (this.idle = resolve)),
        Bun.sleep(deadlineMs),
      ]);
    }
    const aborted = this.inflight.size;
    for (const c of this.inflight) c.abort();
    // Aborted generations end at their next step and record their usage; give them a moment.
    if (aborted > 0) {
      await Promise.race([new Promise<void>((resolve) => (this.idle = resolve)), Bun.sleep(5000)]);
    }
    return { aborted };
  }
}
