// What the chat handler needs from the cluster (src/cluster implements it; the server wires it
// in when several nodes share a database): who a request from another node speaks for, which node
// runs a model, and the forwarding of a request to it.

/** The header a forwarded request carries its signature in (see src/cluster/hop.ts). */
export const HOP_HEADER = "x-sluice-hop";

/** A request forwarded by another node: already authenticated, admitted and counted there. */
export interface HopIdentity {
  requestId: string;
  accountId: number;
  accountName: string;
  keyId: string | null;
  /** The request in flight the forwarding node registered; this node records it. */
  inflightId: string;
  /** The token estimate the forwarding node counted against token limits; 0 when none applied. */
  estimatedTokens: number;
}

export interface NodeTarget {
  id: string;
  url: string;
}

/**
 * How a forwarded request ended, for the forwarding node's own bookkeeping: answered (the other
 * node recorded it), refused there before it ran (an error status: nothing was recorded), failed
 * (the node broke off), or cancelled by the client.
 */
export type ForwardOutcome = "ok" | "refused" | "failed" | "cancelled";

export interface ChatForwarding {
  /** This node's id (requests it runs are registered in flight under it). */
  readonly nodeId: string;
  /**
   * The verified identity of a request another node forwarded, null for a client's request;
   * throws (an ApiError 401) when a request claims to come from a node and its signature is wrong.
   */
  hop(request: Request, body: string): HopIdentity | null;
  /** "local" when this node serves the model; else the least loaded live node serving it, or null. */
  target(modelId: string): Promise<"local" | NodeTarget | null>;
  /**
   * Sends the request to the node and answers with its response, streamed through unchanged.
   * Throws an ApiError 503 (Retry-After) when the node cannot be reached or fails before it
   * answers; `done` settles once the response has ended, however it ended.
   */
  forward(
    target: NodeTarget,
    body: string,
    hop: HopIdentity,
    signal: AbortSignal,
    /** Extra headers for the node: the trace context the forward continues. */
    headers?: Record<string, string>,
  ): Promise<{ response: Response; done: Promise<ForwardOutcome> }>;
}
