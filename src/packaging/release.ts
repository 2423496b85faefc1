// `make release`: dist/sluice-<version>-linux-x64.tar.gz holding the binary, its SHA-256, the
// licence notices of everything embedded, and the README; plus the tarball's own checksum.
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { VERSION } from "../version.ts";
import { sha256Hex } from "./unpack.ts";

const ROOT = resolve(import.meta.dir, "../..");
const LICENCE_FILE = /^(licen[cs]e|copying|notice)(\.(md|txt))?$/i;

interface PackageNotice {
  name: string;
  version: string;
  license: string;
  texts: { file: string; text: string }[];
}

export function packageNotice(dir: string): PackageNotice {
  const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as { name: string; version: string; license?: string };
  const texts = readdirSync(dir)
    .filter((f) => LICENCE_FILE.test(f))
    .sort()
    .map((file) => ({ file, text: readFileSync(join(dir, file), "utf8").trimEnd() }));
  const license = pkg.license ?? "UNKNOWN";
  // tokenizers declares Apache-2.0 but ships only its binding template's MIT file; Apache-2.0
  // asks for its text to travel with the work, so the standard text is added from a package that
  // ships it verbatim (TypeScript, a build-time dependency).
  if (license === "Apache-2.0" && !texts.some((t) => t.text.includes("Apache License"))) {
    const apache = join(ROOT, "node_modules/typescript/LICENSE.txt");
    if (!existsSync(apache)) throw new Error(`${pkg.name} needs the Apache-2.0 text and ${apache} is missing`);
    texts.push({ file: "Apache-2.0 (the licence package.json declares)", text: readFileSync(apache, "utf8").trimEnd() });
  }
  // libvips (sharp's native library) is LGPL-3.0-or-later and its package ships no licence text;
  // the LGPL asks for it and for the GPL it builds on, taken from the system's common licences.
  if (license.startsWith("LGPL-3.0") && texts.length === 0) {
    for (const name of ["LGPL-3", "GPL-3"]) {
      const path = join("/usr/share/common-licenses", name);
      if (!existsSync(path)) throw new Error(`${pkg.name} needs the ${name} text and ${path} is missing`);
      texts.push({ file: `${name} (the licence package.json declares)`, text: readFileSync(path, "utf8").trimEnd() });
    }
  }
  return { name: pkg.name, version: pkg.version, license, texts };
}

/** The notices file: the hand-written part (Bun, ONNX Runtime) and every bundled package's licence. */
export function noticesText(packageDirs: string[], bunVersion: string): string {
  const head = readFileSync(join(import.meta.dir, "release-notices.md"), "utf8").replace("(for the version given\nbelow)", `(Bun ${bunVersion})`);
  const parts = [head.trimEnd(), ""];
  for (const dir of packageDirs) {
    const n = packageNotice(resolve(ROOT, dir));
    parts.push(`### ${n.name} ${n.version} (${n.license})`, "");
    if (n.texts.length === 0) parts.push(`No licence file in the package; its package.json declares ${n.license} (see the section above for ONNX Runtime).`, "");
    for (const t of n.texts) parts.push(`${t.file}:`, "", ...t.text.split("\n").map((l) => (l ? `    ${l}` : "")), "");
  }
  return parts.join("\n") + "\n";
}

export async function makeRelease(binary: string): Promise<{ tarball: string; sha256: string }> {
  const packagesFile = `${binary}.packages.json`;
  if (!existsSync(binary) || !existsSync(packagesFile)) throw new Error(`${binary} or ${packagesFile} missing: run make build`);
  const packages = JSON.parse(readFileSync(packagesFile, "utf8")) as string[];
  const name = `sluice-${VERSION}-linux-x64`;
  const out = dirname(binary);
  const stage = join(out, "release", name);
  rmSync(join(out, "release"), { recursive: true, force: true });
  mkdirSync(stage, { recursive: true });
  copyFileSync(binary, join(stage, "sluice"));
  const binSum = sha256Hex(readFileSync(binary));
  writeFileSync(join(stage, "sluice.sha256"), `${binSum}  sluice\n`);
  writeFileSync(join(stage, "THIRD_PARTY_NOTICES.md"), noticesText(packages, Bun.version));
  copyFileSync(join(ROOT, "README.md"), join(stage, "README.md"));
  if (existsSync(join(ROOT, "docs/GPU.md"))) copyFileSync(join(ROOT, "docs/GPU.md"), join(stage, "GPU.md"));
  const tarball = join(out, `${name}.tar.gz`);
  // System tar keeps the executable bit and is on every machine that builds releases.
  const tar = Bun.spawnSync(["tar", "-czf", tarball, "-C", join(out, "release"), "--owner=0", "--group=0", "--numeric-owner", name], { stderr: "pipe" });
  if (tar.exitCode !== 0) throw new Error(`tar failed: ${tar.stderr.toString()}`);
  const sum = sha256Hex(readFileSync(tarball));
  writeFileSync(`${tarball}.sha256`, `${sum}  ${basename(tarball)}\n`);
  rmSync(join(out, "release"), { recursive: true, force: true });
  return { tarball, sha256: sum };
}

if (import.meta.main) {
  const r = await makeRelease(resolve(process.argv[2] ?? join(ROOT, "dist/sluice")));
  console.log(`wrote ${r.tarball} (sha256 ${r.sha256}) and ${basename(r.tarball)}.sha256`);
}
