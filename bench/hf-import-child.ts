// Runs one `sluice` command (bench/hf-import.ts: `models import hf …`) in this process and prints
// its exit code and the process's peak resident set, as the last line of stdout.
import { main } from "../src/cli/main.ts";

const code = await main(process.argv.slice(2));
// process.resourceUsage().maxRSS is in KiB (the kernel's ru_maxrss).
console.log(JSON.stringify({ code, maxRssKiB: process.resourceUsage().maxRSS }));
process.exit(code);
