// This node's place among the nodes sharing one database: a heartbeat registers the models it
// serves with their queues (and keeps the registration alive), and reads back who else is alive
// and serves what. The same beat removes nodes whose heartbeat expired, records their requests in
// flight as interrupted and forgets their rate-limit slots.
import type { Engine } from "../engine/types.ts";
import type { Logger } from "../log.ts";
import type { NodeInfo, NodeModel, Store } from "../store/index.ts";
import type { NodeTarget } from "../api/chat/forwarding.ts";

export interface MembershipOptions {
  store: Store;
  engine: Engine;
  log: Logger;
  nodeId: string;
  /** How other nodes reach this one (read at each heartbeat: known once the node listens). */
  url: () => string;
  version: string;
  heartbeatMs: number;
  /** A node whose heartbeat is older than this is dead. */
  timeoutMs: number;
}

export class Membership {
  private view: NodeInfo[] = [];
  private byModel = new Map<string, NodeInfo[]>();
  private live = new Set<string>();
  /** Requests this node is forwarding to each node now (added to the queue it reported). */
  private readonly sending = new Map<string, number>();
  private timer: ReturnType<typeof setInterval> | null = null;
  private beating: Promise<void> | null = null;
  private failing = false;
  private readonly startedAt = Date.now();

  constructor(private readonly opts: MembershipOptions) {}

  get nodeId(): string {
    return this.opts.nodeId;
  }

  /** Registers this node (awaited: the node is listed before it takes traffic), then beats on. */
  async start(): Promise<void> {
    await this.beat();
    this.timer = setInterval(() => void this.beat(), this.opts.heartbeatMs);
    this.timer.unref();
  }

  /** One heartbeat now (also after the models changed); at most one runs at a time. */
  beat(): Promise<void> {
    this.beating ??= this.beatOnce().finally(() => (this.beating = null));
    return this.beating;
  }

  private localModels(): NodeModel[] {
    const stats = new Map((this.opts.engine.stats?.().models ?? []).map((m) => [m.model, m]));
    return this.opts.engine.models().map((m) => {
      const s = stats.get(m.id);
      return { id: m.id, queueDepth: s ? s.runningRequests + s.queuedRequests : 0 };
    });
  }

  private async beatOnce(): Promise<void> {
    const { store, log } = this.opts;
    try {
      await store.nodes.heartbeat({ id: this.nodeId, url: this.opts.url(), version: this.opts.version, startedAt: this.startedAt }, this.localModels(), this.opts.timeoutMs);
      const dead = await store.nodes.sweep();
      if (dead.length) log.warn("nodes left the cluster: their heartbeat expired", { nodes: dead });
      this.setView(await store.nodes.live());
      const ids = this.view.map((n) => n.id);
      const interrupted = await store.inflight.sweep(ids);
      if (interrupted) log.warn("requests in flight on dead nodes recorded as interrupted", { count: interrupted });
      await store.rates.sweep(ids);
      if (this.failing) log.info("heartbeat restored: the database answers again");
      this.failing = false;
    } catch (e) {
      if (!this.failing) log.warn("heartbeat failed: the database does not answer", { error: (e as Error).message });
      this.failing = true;
    }
  }

  private setView(nodes: NodeInfo[]): void {
    this.view = nodes;
    this.live = new Set(nodes.map((n) => n.id));
    this.byModel = new Map();
    for (const n of nodes) {
      if (n.id === this.nodeId) continue;
      for (const m of n.models) {
        let list = this.byModel.get(m.id);
        if (!list) this.byModel.set(m.id, (list = []));
        list.push(n);
      }
    }
  }

  /** The live nodes as of the last heartbeat (this one included). */
  nodes(): NodeInfo[] {
    return this.view;
  }

  isLive(nodeId: string): boolean {
    return this.live.has(nodeId);
  }

  /**
   * "local" when this node serves the model, else the live node serving it with the shortest
   * queue. A model this node has not seen yet (a node joined since the last heartbeat) is looked
   * up in the database once more before the answer is no.
   */
  async target(modelId: string): Promise<"local" | NodeTarget | null> {
    if (this.opts.engine.models().some((m) => m.id === modelId)) return "local";
    if (!this.byModel.get(modelId)?.length) {
      try {
        this.setView(await this.opts.store.nodes.live());
      } catch {}
    }
    const candidates = this.byModel.get(modelId);
    if (!candidates?.length) return null;
    let best: NodeInfo | null = null;
    let bestLoad = Infinity;
    for (const n of candidates) {
      const load = (n.models.find((m) => m.id === modelId)?.queueDepth ?? 0) + (this.sending.get(n.id) ?? 0);
      // Ties go to either at random, so equal nodes share the work.
      if (load < bestLoad || (load === bestLoad && Math.random() < 0.5)) {
        best = n;
        bestLoad = load;
      }
    }
    return { id: best!.id, url: best!.url };
  }

  /** Counts a forward in flight to a node until `end` is called. */
  sendingTo(nodeId: string): () => void {
    this.sending.set(nodeId, (this.sending.get(nodeId) ?? 0) + 1);
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      const n = (this.sending.get(nodeId) ?? 1) - 1;
      if (n > 0) this.sending.set(nodeId, n);
      else this.sending.delete(nodeId);
    };
  }

  /** Leaves the cluster: no more beats, and the registration is removed (its models leave the lists at once). */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.beating;
    await this.opts.store.nodes.remove(this.nodeId).catch((e) => this.opts.log.warn("could not leave the cluster cleanly", { error: (e as Error).message }));
  }
}
