// Runs one `sluice` command (bench/hf-import.ts: `models import hf …`) in this process and prints
// its exit code and the process's peak resident set, as the last line of stdout.
import { readFileSync } from "node:fs";
import { main } from "../src/cli/main.ts";

const code = await main(process.argv.slice(2));
// VmHWM is this process's own peak (its memory map's high-water mark). Not ru_maxrss
// (process.resourceUsage().maxRSS): Linux keeps the larger of it and the spawning process's
// resident set at the fork, so a bench that had grown to 700 MiB reported 700 MiB for every import.
const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync("/proc/self/status", "utf8"));
console.log(JSON.stringify({ code, maxRssKiB: hwm ? Number(hwm[1]) : process.resourceUsage().maxRSS }));
process.exit(code);
