// Stylesheets are imported `with { type: "text" }`: their source as a string.
declare module "*.css" {
  const source: string;
  export default source;
}
