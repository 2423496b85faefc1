// The distance of a state from which no document can be finished, in its own module, where every
// part of the budget takes it from: the searches (origins.ts) need it, and the context's tables
// import the searches' types, so it cannot live in the context (context.ts) without a circle.

/** No way to finish. */
export const UNREACHABLE = 1 << 29;
