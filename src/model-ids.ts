// Canonical model ids: path-like segments of letters, digits, '.', '_' and '-'. Below the rooms:
// the engine names discovered directories with them and the model kit's Hub pull places models
// under them.

export const MODEL_ID = /^[A-Za-z0-9][A-Za-z0-9._-]*(\/[A-Za-z0-9][A-Za-z0-9._-]*)*$/;

export function isCanonicalModelId(id: string): boolean {
  return id.length <= 256 && MODEL_ID.test(id) && !id.split("/").some((s) => s === "." || s === "..");
}
