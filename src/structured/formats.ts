// String formats as byte patterns over the string content. Each produces a subset of what
// ajv-formats (full mode) accepts, so every generated value validates.

import { alt, byteClass, lit, opt, type Re, rep, seq } from "./automaton.ts";

const D = byteClass([0x30, 0x39]);
const HEX = byteClass([0x30, 0x39], [0x41, 0x46], [0x61, 0x66]);
const hex = (n: number) => rep(HEX, n, n);
const d = (a: number, b: number) => byteClass([0x30 + a, 0x30 + b]);

// Feb 29 is left out: it is only valid in leap years, which a byte pattern per position cannot
// express cheaply, and leaving it out keeps every produced date valid.
const MONTH_DAY = alt(
  seq(alt(seq(lit("0"), alt(lit("1"), lit("3"), lit("5"), lit("7"), lit("8"))), lit("10"), lit("12")), lit("-"), alt(seq(lit("0"), d(1, 9)), seq(d(1, 2), D), seq(lit("3"), d(0, 1)))),
  seq(alt(seq(lit("0"), alt(lit("4"), lit("6"), lit("9"))), lit("11")), lit("-"), alt(seq(lit("0"), d(1, 9)), seq(d(1, 2), D), lit("30"))),
  seq(lit("02-"), alt(seq(lit("0"), d(1, 9)), seq(lit("1"), D), seq(lit("2"), d(0, 8)))),
);
const DATE = seq(rep(D, 4, 4), lit("-"), MONTH_DAY);
const HOUR = alt(seq(d(0, 1), D), seq(lit("2"), d(0, 3)));
const MIN_SEC = seq(d(0, 5), D);
const TZ = alt(byteClass([0x5a, 0x5a], [0x7a, 0x7a]), seq(byteClass([0x2b, 0x2b], [0x2d, 0x2d]), HOUR, lit(":"), MIN_SEC));
const TIME = seq(HOUR, lit(":"), MIN_SEC, lit(":"), MIN_SEC, opt(seq(lit("."), rep(D, 1, 9))), TZ);
const UUID = seq(hex(8), lit("-"), hex(4), lit("-"), hex(4), lit("-"), hex(4), lit("-"), hex(12));
const ALNUM = byteClass([0x30, 0x39], [0x41, 0x5a], [0x61, 0x7a]);
const LOCAL_CHAR = byteClass([0x30, 0x39], [0x41, 0x5a], [0x61, 0x7a], [0x21, 0x21], [0x23, 0x27], [0x2a, 0x2b], [0x2d, 0x2d], [0x3d, 0x3d], [0x3f, 0x3f], [0x5e, 0x60], [0x7b, 0x7e]);
// Hyphen-joined alphanumeric runs, at most 62 characters: within the 63 of a DNS label, and
// deterministic (a free mix of hyphens with a length bound would blow up the DFA).
const LABEL = seq(rep(ALNUM, 1, 16), opt(seq(lit("-"), rep(ALNUM, 1, 16))));
// Local part and domain with bounded lengths (well inside RFC 5321's), dot-separated atoms; kept
// small so the automaton stays a few hundred states.
const EMAIL = seq(rep(LOCAL_CHAR, 1, 24), rep(seq(lit("."), rep(LOCAL_CHAR, 1, 16)), 0, 2), lit("@"), rep(seq(LABEL, lit(".")), 1, 2), LABEL);

const FORMATS: Record<string, Re> = {
  date: DATE,
  time: TIME,
  "date-time": seq(DATE, byteClass([0x54, 0x54], [0x74, 0x74]), TIME),
  uuid: UUID,
  email: EMAIL,
};

export function formatRe(name: string): Re | undefined {
  return FORMATS[name];
}

export const SUPPORTED_FORMATS: readonly string[] = Object.keys(FORMATS);
