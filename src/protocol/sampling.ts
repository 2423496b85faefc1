// A model's sampling defaults as every room sees them: the engine reads them from the model's
// directory, the catalog stores them, the workspace, `models list` and doctor show them. Imports
// nothing.

/** The parameters a model may default; an absent field is not defaulted by the model. */
export interface SamplingDefaults {
  /** 0: greedy. */
  temperature?: number;
  topP?: number;
  /** 0 or -1: off. */
  topK?: number;
  minP?: number;
}

/** A short description for listings: "greedy", "temperature 0.6, top_p 0.95, top_k 20", or "" (the API's defaults). */
export function describeSamplingDefaults(d: SamplingDefaults | null | undefined): string {
  if (!d) return "";
  if (d.temperature === 0) return "greedy";
  const parts: string[] = [];
  if (d.temperature !== undefined) parts.push(`temperature ${d.temperature}`);
  if (d.topP !== undefined) parts.push(`top_p ${d.topP}`);
  if (d.topK !== undefined && d.topK > 0) parts.push(`top_k ${d.topK}`);
  if (d.minP !== undefined && d.minP > 0) parts.push(`min_p ${d.minP}`);
  return parts.join(", ");
}
