// A request body, bounded in time: a client that promises more body than it sends (its
// Content-Length) must not hold its connection and a handler for long. Shared by the API and the
// workspace; each turns BodyTimeout into its own 408.

export class BodyTimeout extends Error {
  constructor(readonly ms: number) {
    super(`The request body did not arrive within ${ms / 1000} seconds.`);
  }
}

/**
 * The body's bytes, or BodyTimeout once `timeoutMs` (0: no bound) passed without all of them. A
 * body already received (the usual case) resolves at once; a slow one is read by Bun meanwhile.
 */
export async function readBodyBytes(request: Request, timeoutMs: number): Promise<Uint8Array> {
  const reading = request.arrayBuffer();
  if (timeoutMs <= 0) return new Uint8Array(await reading);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new BodyTimeout(timeoutMs)), timeoutMs)));
  try {
    return new Uint8Array(await Promise.race([reading, late]));
  } catch (e) {
    // The read that lost the race fails later, when the connection closes: nobody waits for it.
    if (e instanceof BodyTimeout) reading.catch(() => {});
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

/** The answer's header that ends the connection: what is left of the body is never read. */
export const CLOSE_CONNECTION = { connection: "close" };
