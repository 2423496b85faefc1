// Values that are ready now on the hot path (answered from a cache) and a promise otherwise: the
// cached case stays synchronous, with no promise made and no turn of the event loop waited.

export type Maybe<T> = T | Promise<T>;
