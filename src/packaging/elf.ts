// What a shared library needs, read from its ELF headers without loading it. Loading runs the
// library's initialisers, and some libraries must not be initialised outside their host: the CUDA
// execution provider's call into ONNX Runtime's provider bridge as they run, and crash the process
// (address 0) when no ONNX Runtime has handed the bridge over.
import { closeSync, fstatSync, openSync, readSync } from "node:fs";

export interface ElfDynamic {
  /** DT_NEEDED: the sonames the dynamic linker must find before the library loads. */
  needed: string[];
  soname: string | null;
  /** DT_RUNPATH or DT_RPATH, as written ($ORIGIN unexpanded). */
  runpath: string | null;
}

const PT_LOAD = 1;
const PT_DYNAMIC = 2;
const DT_NEEDED = 1n;
const DT_STRTAB = 5n;
const DT_STRSZ = 10n;
const DT_SONAME = 14n;
const DT_RPATH = 15n;
const DT_RUNPATH = 29n;
const MACHINE: Record<string, number> = { x64: 62, arm64: 183 };

function readAt(fd: number, offset: number, length: number): Buffer {
  const buf = Buffer.alloc(length);
  const got = readSync(fd, buf, 0, length, offset);
  if (got !== length) throw new Error(`truncated: wanted ${length} bytes at ${offset}, the file has fewer`);
  return buf;
}

/**
 * The dynamic section of a 64-bit little-endian shared object built for this machine's processor.
 * Throws with a reason a person can act on (not ELF, wrong architecture, truncated).
 */
export function readElfDynamic(path: string, arch: string = process.arch): ElfDynamic {
  const fd = openSync(path, "r");
  try {
    if (fstatSync(fd).size < 64) throw new Error("not a shared library (file too short)");
    const h = readAt(fd, 0, 64);
    if (h.readUInt32BE(0) !== 0x7f454c46) throw new Error("not a shared library (no ELF header)");
    if (h[4] !== 2 || h[5] !== 1) throw new Error("not a 64-bit little-endian ELF file");
    if (h.readUInt16LE(16) !== 3) throw new Error("not a shared library (ELF type is not ET_DYN)");
    const machine = h.readUInt16LE(18);
    if (MACHINE[arch] !== undefined && machine !== MACHINE[arch]) throw new Error(`built for another processor (ELF machine ${machine}, this is ${arch})`);
    const phoff = Number(h.readBigUInt64LE(32));
    const phentsize = h.readUInt16LE(54);
    const phnum = h.readUInt16LE(56);
    const ph = readAt(fd, phoff, phentsize * phnum);
    const loads: { vaddr: bigint; offset: bigint; filesz: bigint }[] = [];
    let dynamic: { offset: number; size: number } | null = null;
    for (let i = 0; i < phnum; i++) {
      const o = i * phentsize;
      const type = ph.readUInt32LE(o);
      const offset = ph.readBigUInt64LE(o + 8);
      const vaddr = ph.readBigUInt64LE(o + 16);
      const filesz = ph.readBigUInt64LE(o + 32);
      if (type === PT_LOAD) loads.push({ vaddr, offset, filesz });
      if (type === PT_DYNAMIC) dynamic = { offset: Number(offset), size: Number(filesz) };
    }
    if (!dynamic) throw new Error("no dynamic section (a static executable, not a shared library)");
    const dyn = readAt(fd, dynamic.offset, dynamic.size);
    const needed: bigint[] = [];
    let strtab: bigint | null = null;
    let strsz = 0n;
    let soname: bigint | null = null;
    let runpath: bigint | null = null;
    for (let o = 0; o + 16 <= dyn.length; o += 16) {
      const tag = dyn.readBigInt64LE(o);
      const val = dyn.readBigUInt64LE(o + 8);
      if (tag === 0n) break;
      if (tag === DT_NEEDED) needed.push(val);
      else if (tag === DT_STRTAB) strtab = val;
      else if (tag === DT_STRSZ) strsz = val;
      else if (tag === DT_SONAME) soname = val;
      else if (tag === DT_RUNPATH || (tag === DT_RPATH && runpath === null)) runpath = val;
    }
    if (strtab === null) throw new Error("no string table in the dynamic section");
    // DT_STRTAB is an address once loaded: the PT_LOAD segment holding it gives its file offset.
    const seg = loads.find((l) => strtab! >= l.vaddr && strtab! < l.vaddr + l.filesz);
    if (!seg) throw new Error("the dynamic string table lies outside the file's segments");
    const strings = readAt(fd, Number(strtab - seg.vaddr + seg.offset), Number(strsz));
    const str = (off: bigint) => {
      const start = Number(off);
      const end = strings.indexOf(0, start);
      return strings.toString("utf8", start, end < 0 ? strings.length : end);
    };
    return { needed: needed.map(str), soname: soname === null ? null : str(soname), runpath: runpath === null ? null : str(runpath) };
  } finally {
    closeSync(fd);
  }
}

/**
 * Whether the file holds `text` as a NUL-terminated string of its own (e.g. a version a library
 * was built with), read in chunks so a large library is never in memory at once.
 */
export function containsCString(path: string, text: string, chunkBytes = 8 << 20): boolean {
  const needle = Buffer.from(`\0${text}\0`);
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    const buf = Buffer.alloc(chunkBytes + needle.length);
    // Each chunk starts needle.length - 1 bytes before the previous one ended, so a match across
    // the boundary is still seen whole.
    for (let pos = 0; pos < size; pos += chunkBytes) {
      const start = Math.max(0, pos - (needle.length - 1));
      const got = readSync(fd, buf, 0, Math.min(buf.length, size - start), start);
      if (buf.subarray(0, got).indexOf(needle) >= 0) return true;
    }
    return false;
  } finally {
    closeSync(fd);
  }
}
