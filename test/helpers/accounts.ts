// Accounts made directly in a store, as an operator would (the server sees them at its next lookup).
import type { Store } from "../../src/store/index.ts";

/** A new account named `name` that may use every model on an unlimited plan, and its key. */
export async function unlimitedAccountKey(store: Store, name: string): Promise<string> {
  const account = await store.accounts.create(name);
  await store.billing.setPlan(account.id, "unlimited");
  return (await store.keys.create(account.id, null)).key;
}
