// Imported `with { type: "text" }`: the script's source as a string.
declare const source: string;
export default source;
