// Values that are ready now on the hot path (answered from a cache) and a promise otherwise: the
// cached case stays synchronous, with no promise made and no turn of the event loop waited.

export type Maybe<T> = T | Promise<T>;

/** f(v) now when v is a value, after it settles when v is a promise. */
export function then<T, U>(v: Maybe<T>, f: (t: T) => Maybe<U>): Maybe<U> {
  return v instanceof Promise ? v.then(f) : f(v);
}
