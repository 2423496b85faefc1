// The order in which one model's waiting requests get KV memory. In "fair" order, requests carry an
// opaque fairness key (the api passes the account) and a priority: the highest priority waiting
// goes first; within a priority, the key that has been served the fewest tokens goes next (virtual
// token counters, as in "Fairness in Serving Large Language Models", Sheng et al., OSDI 2024), and
// a key's own requests keep their arrival order. Tokens, not requests, are counted, so an account
// sending long prompts or long answers does not get more of the model by sending fewer requests.
// In "fifo" order, the oldest request goes first whatever its key or priority.
//
// A key that starts waiting after a pause has its counter lifted to the least counter of the keys
// being served: credit does not pile up while away (a key idle for an hour would otherwise take
// every turn for as long as it took the others to serve that hour's worth of tokens).

export type QueueOrder = "fair" | "fifo";

export const QUEUE_ORDERS: readonly QueueOrder[] = ["fair", "fifo"];

/** What the queue needs of a waiting request. */
export interface Waiting {
  /** Opaque: requests with the same key take turns together with the other keys'. */
  readonly fairKey: string;
  /** Higher goes first. */
  readonly priority: number;
  /** Arrival order, from stamp(); a preempted request keeps its own, so it goes back in front. */
  readonly arrival: number;
}

export class FairQueue<T extends Waiting> {
  /** Waiting requests per key, oldest first. */
  private readonly waiting = new Map<string, T[]>();
  /** Tokens served per key (running sequences charge as they go). */
  private readonly served = new Map<string, number>();
  /** Requests running per key. */
  private readonly running = new Map<string, number>();
  /** Never decreases: the least counter among the keys being served, when last seen. */
  private floor = 0;
  private count = 0;
  private arrivals = 0;

  constructor(readonly order: QueueOrder = "fair") {}

  get length(): number {
    return this.count;
  }

  /** The next arrival number. */
  stamp(): number {
    return ++this.arrivals;
  }

  /** Requests of this key waiting. */
  waitingFor(key: string): number {
    return this.waiting.get(key)?.length ?? 0;
  }

  runningFor(key: string): number {
    return this.running.get(key) ?? 0;
  }

  /** A new request waits (after the others of its key). */
  push(item: T): void {
    this.enter(item.fairKey);
    const list = this.waiting.get(item.fairKey);
    if (list) list.push(item);
    else this.waiting.set(item.fairKey, [item]);
    this.count++;
  }

  /** A preempted request waits again, in front of the later arrivals of its key. */
  requeue(item: T): void {
    this.enter(item.fairKey);
    const list = this.waiting.get(item.fairKey) ?? [];
    let i = list.length;
    while (i > 0 && list[i - 1]!.arrival > item.arrival) i--;
    list.splice(i, 0, item);
    this.waiting.set(item.fairKey, list);
    this.count++;
  }

  /** The request to admit next, left in the queue (see take). */
  peek(): T | undefined {
    let best: T | undefined;
    if (this.order === "fifo") {
      for (const list of this.waiting.values()) if (!best || list[0]!.arrival < best.arrival) best = list[0];
      return best;
    }
    let bestServed = 0;
    for (const [key, list] of this.waiting) {
      const head = list[0]!;
      const served = this.served.get(key) ?? 0;
      if (!best || this.before(head, served, best, bestServed)) {
        best = head;
        bestServed = served;
      }
    }
    return best;
  }

  /** Takes a waiting request out (admitted: see started; or cancelled). False when it was not waiting. */
  take(item: T): boolean {
    const list = this.waiting.get(item.fairKey);
    const i = list ? list.indexOf(item) : -1;
    if (i < 0) return false;
    list!.splice(i, 1);
    if (list!.length === 0) this.waiting.delete(item.fairKey);
    this.count--;
    this.settle(item.fairKey);
    return true;
  }

  /** Every waiting request, in no particular order. */
  *items(): IterableIterator<T> {
    for (const list of this.waiting.values()) yield* list;
  }

  /** A request of this key started running. */
  started(key: string): void {
    this.enter(key);
    this.running.set(key, this.runningFor(key) + 1);
  }

  /** A running request of this key ended or was preempted. */
  ended(key: string): void {
    const n = this.runningFor(key) - 1;
    if (n > 0) this.running.set(key, n);
    else this.running.delete(key);
    this.settle(key);
  }

  /** Counts tokens served to a key (prompt tokens read, tokens generated). */
  charge(key: string, tokens: number): void {
    if (tokens > 0) this.served.set(key, (this.served.get(key) ?? 0) + tokens);
  }

  /** The tokens a key has been served, as the queue counts them (after lifting). */
  servedTo(key: string): number {
    return this.served.get(key) ?? 0;
  }

  private active(key: string): boolean {
    return this.waiting.has(key) || this.running.has(key);
  }

  /** A key starts waiting or running: lifted to the floor if it was away. */
  private enter(key: string): void {
    if (this.active(key)) return;
    this.floor = Math.max(this.floor, this.leastActive() ?? this.floor);
    this.served.set(key, Math.max(this.served.get(key) ?? 0, this.floor));
  }

  /** A key may have gone idle: its counter is forgotten when the floor would lift it anyway. */
  private settle(key: string): void {
    if (this.active(key)) return;
    const least = this.leastActive();
    if (least !== null) this.floor = Math.max(this.floor, least);
    if ((this.served.get(key) ?? 0) <= this.floor) this.served.delete(key);
  }

  private leastActive(): number | null {
    let least: number | null = null;
    for (const key of new Set([...this.waiting.keys(), ...this.running.keys()])) {
      const s = this.served.get(key) ?? 0;
      if (least === null || s < least) least = s;
    }
    return least;
  }

  /** Higher priority; then fewer tokens served; then fewer running; then the earlier arrival. */
  private before(a: T, aServed: number, b: T, bServed: number): boolean {
    if (a.priority !== b.priority) return a.priority > b.priority;
    if (aServed !== bServed) return aServed < bServed;
    const ra = this.runningFor(a.fairKey);
    const rb = this.runningFor(b.fairKey);
    if (ra !== rb) return ra < rb;
    return a.arrival < b.arrival;
  }
}
