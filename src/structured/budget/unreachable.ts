// The distance of a state from which no document can be finished, in its own module: the
// budget's searches (origins.ts) and its context (context.ts) both take it, and the context's
// tables import the searches' types.

/** No way to finish. */
export const UNREACHABLE = 1 << 29;
