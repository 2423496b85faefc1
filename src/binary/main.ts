// The compiled binary's entry: registers what is embedded, then runs the ordinary CLI.
import "./embedded.ts";
import { main } from "../cli/main.ts";

const code = await main(process.argv.slice(2));
process.exit(code);
