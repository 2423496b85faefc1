// Several nodes on one database: membership (heartbeats, who serves what), the signed hop, and
// forwarding. `createCluster` gives the API what it needs (ChatForwarding) and the server what it
// runs (start, beat, stop).
import type { ChatForwarding } from "../api/chat/forwarding.ts";
import { ApiError } from "../api/errors.ts";
import type { Engine } from "../engine/types.ts";
import type { Logger } from "../log.ts";
import type { Store } from "../store/index.ts";
import { forwardChat } from "./forward.ts";
import { verifyHop } from "./hop.ts";
import { Membership } from "./membership.ts";

export interface ClusterOptions {
  store: Store;
  engine: Engine;
  log: Logger;
  nodeId: string;
  /** How other nodes reach this one (--node-url). */
  nodeUrl: string;
  /** Shared by every node; signs the hop (--cluster-secret). */
  secret: string;
  version: string;
  heartbeatMs: number;
  timeoutMs: number;
}

export interface Cluster {
  forwarding: ChatForwarding;
  membership: Membership;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export function createCluster(opts: ClusterOptions): Cluster {
  const membership = new Membership({
    store: opts.store,
    engine: opts.engine,
    log: opts.log,
    nodeId: opts.nodeId,
    url: () => opts.nodeUrl,
    version: opts.version,
    heartbeatMs: opts.heartbeatMs,
    timeoutMs: opts.timeoutMs,
  });
  const forwarding: ChatForwarding = {
    nodeId: opts.nodeId,
    hop(request, body) {
      const check = verifyHop(opts.secret, request.headers, body);
      if (check === null) return null;
      if (!check.ok) {
        opts.log.warn("forwarded request refused", { reason: check.reason });
        throw new ApiError(401, `This request claims to come from another node, but ${check.reason}.`, "authentication_error", null, "invalid_hop");
      }
      return check.hop;
    },
    target: (modelId) => membership.target(modelId),
    forward: (target, body, hop, signal, headers) =>
      forwardChat(
        { secret: opts.secret, log: opts.log, isLive: (id) => membership.isLive(id), sendingTo: (id) => membership.sendingTo(id) },
        target,
        body,
        hop,
        signal,
        headers,
      ),
  };
  return {
    forwarding,
    membership,
    start: () => membership.start(),
    stop: () => membership.stop(),
  };
}
