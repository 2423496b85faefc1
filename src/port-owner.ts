// Who listens on a TCP port, for the message of a server that cannot take it. Linux tells through
// /proc: the listening socket's inode in /proc/net/tcp{,6}, then the process holding that inode
// among its open files. Elsewhere, or for another user's process, the port is named alone.
import { readdirSync, readFileSync, readlinkSync } from "node:fs";

export interface PortOwner {
  pid: number;
  /** Its command line, as /proc shows it (arguments joined by spaces). */
  command: string;
}

/** Inodes of the sockets listening on `port` (any address). */
function listeningInodes(port: number): Set<string> {
  const inodes = new Set<string>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = readFileSync(table, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      // local_address is ADDR:PORT in hex; state 0A is LISTEN; the inode is the tenth field.
      if (f.length < 10 || f[3] !== "0A") continue;
      if (Number.parseInt(f[1]!.split(":").pop()!, 16) === port && f[9] !== "0") inodes.add(f[9]!);
    }
  }
  return inodes;
}

/** The process listening on `port`, where this user may see it; null otherwise. */
export function portOwner(port: number): PortOwner | null {
  const inodes = listeningInodes(port);
  if (inodes.size === 0) return null;
  let pids: string[];
  try {
    pids = readdirSync("/proc").filter((p) => /^\d+$/.test(p));
  } catch {
    return null;
  }
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let target: string;
      try {
        target = readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      const m = /^socket:\[(\d+)\]$/.exec(target);
      if (!m || !inodes.has(m[1]!)) continue;
      let command = "";
      try {
        command = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean).join(" ");
      } catch {}
      return { pid: Number(pid), command };
    }
  }
  return null;
}

/** "port 8080 on 127.0.0.1 is already in use by process 1234 (sluice serve): …", without the process where it cannot be found. */
export function portInUseMessage(host: string, port: number, flag = "--port"): string {
  const owner = portOwner(port);
  const command = owner?.command && owner.command.length > 120 ? `${owner.command.slice(0, 117)}...` : owner?.command;
  const by = owner ? ` by process ${owner.pid}${command ? ` (${command})` : ""}` : " by another program";
  return `port ${port} on ${host} is already in use${by}: one server per port; stop that one, or give this one another ${flag}`;
}

const inUse = (e: unknown) => (e as { code?: string })?.code === "EADDRINUSE";

/**
 * Fails at once, with the message above, when `port` cannot be listened on (0 is always free):
 * checked before a server opens its store and loads its models, so a second one on a taken port
 * changes nothing. The server listens later; the same check then covers a port taken meanwhile.
 */
export function assertPortFree(host: string, port: number, flag = "--port"): void {
  if (port === 0) return;
  let probe: { stop(closeActiveConnections?: boolean): void } | null = null;
  try {
    probe = Bun.listen({ hostname: host, port, socket: { data() {} } });
  } catch (e) {
    if (inUse(e)) throw new Error(portInUseMessage(host, port, flag));
    throw e;
  } finally {
    probe?.stop(true);
  }
}

/** Runs `listen`; an address in use becomes the message above. */
export function listenOrExplain<T>(host: string, port: number, listen: () => T, flag = "--port"): T {
  try {
    return listen();
  } catch (e) {
    if (inUse(e)) throw new Error(portInUseMessage(host, port, flag));
    throw e;
  }
}
