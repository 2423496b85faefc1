// How every form of the admin page (and its residency panel) answers: the change runs, and the
// page is shown again through a redirect with the outcome in its flash.
import { redirectWithFlash } from "../flash.ts";
import { BASE } from "../layout.ts";
import type { SignedCtx } from "../router.ts";

/**
 * Runs an admin change and answers with a redirect to `back` either way, the outcome in the flash
 * (a reload of that page repeats nothing; `back` may end in a #section, which a query string
 * after it would have broken).
 */
export async function change(c: SignedCtx, fn: () => string | Promise<string>, back = `${BASE}/admin`): Promise<Response> {
  try {
    const ok = await fn();
    c.opts.log.info("workspace admin change", { by: c.user.email, change: ok });
    return redirectWithFlash(c, back, { ok });
  } catch (e) {
    return redirectWithFlash(c, back, { error: (e as Error).message });
  }
}
