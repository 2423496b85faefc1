// Limits for image input, set once by the server (serve --allow-image-hosts and friends) and read
// by the chat handler when it resolves image parts.

export interface ImageFetchPolicy {
  /** Largest image accepted, fetched or inline (bytes). */
  maxBytes: number;
  /** Whole fetch, from the first connection to the last body byte (ms). */
  timeoutMs: number;
  maxRedirects: number;
  /**
   * Hosts (names or IP literals, lower case, optionally with ":port") fetched even when they
   * resolve to loopback, private, link-local or metadata addresses. Empty by default.
   */
  allowHosts: string[];
}

export const DEFAULT_IMAGE_POLICY: ImageFetchPolicy = {
  maxBytes: 20 * 1024 * 1024,
  timeoutMs: 10_000,
  maxRedirects: 3,
  allowHosts: [],
};

let current: ImageFetchPolicy = { ...DEFAULT_IMAGE_POLICY };

export function imagePolicy(): ImageFetchPolicy {
  return current;
}

/** Replaces the process-wide policy (fields left out keep their defaults). */
export function configureImagePolicy(p: Partial<ImageFetchPolicy>): ImageFetchPolicy {
  current = { ...DEFAULT_IMAGE_POLICY, ...p, allowHosts: (p.allowHosts ?? []).map((h) => h.trim().toLowerCase()).filter(Boolean) };
  return current;
}
