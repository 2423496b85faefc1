// Which IP addresses a remote image fetch may connect to. Everything that is not a public unicast
// address is refused: loopback, private, link-local (cloud metadata lives at 169.254.169.254),
// carrier-grade NAT, multicast, reserved, and the IPv6 forms of all of these (mapped, NAT64,
// unique-local, site-local).
import { isIP } from "node:net";

function v4Octets(ip: string): number[] | null {
  const parts = ip.split(".");
  if (parts.length !== 4) return null;
  const o = parts.map((p) => (/^\d{1,3}$/.test(p) ? Number(p) : NaN));
  return o.every((n) => n >= 0 && n <= 255) ? o : null;
}

function forbiddenV4(o: number[]): string | null {
  const [a, b] = o as [number, number, number, number];
  if (a === 0) return "an unspecified address";
  if (a === 127) return "a loopback address";
  if (a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168)) return "a private address";
  if (a === 169 && b === 254) return "a link-local (metadata) address";
  if (a === 100 && b >= 64 && b <= 127) return "a shared (carrier-grade NAT) address";
  if (a === 192 && b === 0 && o[2] === 0) return "an IETF protocol address";
  if (a === 198 && (b === 18 || b === 19)) return "a benchmarking address";
  if (a >= 224) return "a multicast or reserved address";
  return null;
}

/** The 8 groups of an IPv6 address (an embedded dotted IPv4 tail becomes two groups). */
function v6Groups(ip: string): number[] | null {
  let s = ip.toLowerCase();
  const zone = s.indexOf("%");
  if (zone >= 0) s = s.slice(0, zone);
  const tail = s.match(/(\d+\.\d+\.\d+\.\d+)$/);
  if (tail) {
    const o = v4Octets(tail[1]!);
    if (!o) return null;
    s = `${s.slice(0, -tail[1]!.length)}${((o[0]! << 8) | o[1]!).toString(16)}:${((o[2]! << 8) | o[3]!).toString(16)}`;
  }
  const halves = s.split("::");
  if (halves.length > 2) return null;
  const parse = (h: string) => (h === "" ? [] : h.split(":").map((g) => parseInt(g, 16)));
  const head = parse(halves[0]!);
  const rest = halves.length === 2 ? parse(halves[1]!) : [];
  const fill = halves.length === 2 ? 8 - head.length - rest.length : 0;
  const groups = [...head, ...new Array<number>(Math.max(0, fill)).fill(0), ...rest];
  return groups.length === 8 && groups.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff) ? groups : null;
}

/** Why a connection to `ip` is refused, or null when it is a public address. */
export function forbiddenAddressReason(ip: string): string | null {
  const family = isIP(ip);
  if (family === 4) return forbiddenV4(v4Octets(ip)!);
  if (family !== 6) return "not an IP address";
  const g = v6Groups(ip);
  if (!g) return "not an IP address";
  const v4 = (hi: number, lo: number) => [hi >> 8, hi & 0xff, lo >> 8, lo & 0xff];
  if (g.every((x) => x === 0)) return "an unspecified address";
  if (g.slice(0, 7).every((x) => x === 0) && g[7] === 1) return "a loopback address";
  // ::ffff:a.b.c.d (mapped), ::a.b.c.d (compatible), 64:ff9b::a.b.c.d (NAT64): judge the IPv4 inside.
  if (g.slice(0, 5).every((x) => x === 0) && (g[5] === 0xffff || g[5] === 0)) return forbiddenV4(v4(g[6]!, g[7]!));
  if (g[0] === 0x64 && g[1] === 0xff9b) return forbiddenV4(v4(g[6]!, g[7]!));
  if ((g[0]! & 0xfe00) === 0xfc00) return "a unique-local (private) address";
  if ((g[0]! & 0xffc0) === 0xfe80) return "a link-local address";
  if ((g[0]! & 0xffc0) === 0xfec0) return "a site-local address";
  if ((g[0]! & 0xff00) === 0xff00) return "a multicast address";
  if (g[0] === 0x2001 && g[1] === 0xdb8) return "a documentation address";
  return null;
}
