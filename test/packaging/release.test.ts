// The release's licence notices: which packages count as embedded, and that each one's licence
// text (or, lacking a file, its declared licence) is in the notices.
import { describe, expect, test } from "bun:test";
import { embeddedPackages } from "../../src/packaging/build.ts";
import { noticesText, packageNotice } from "../../src/packaging/release.ts";
import { REPO } from "../helpers/paths.ts";

describe("release notices", () => {
  test("embedded packages are the node_modules directories of the bundled inputs, scoped ones whole", () => {
    expect(
      embeddedPackages([
        "src/cli/main.ts",
        "node_modules/elysia/dist/index.mjs",
        "node_modules/elysia/dist/x.mjs",
        "node_modules/@sinclair/typebox/build/esm/index.mjs",
        `${REPO}/node_modules/onnxruntime-node/bin/napi-v6/linux/x64/libonnxruntime.so.1`,
      ]),
    ).toEqual(["node_modules/@sinclair/typebox", "node_modules/elysia", "node_modules/onnxruntime-node"]);
  });

  test("each package's licence file is quoted; a package without one is named with its declared licence", () => {
    const tok = packageNotice(`${REPO}/node_modules/tokenizers`);
    expect(tok.license).toBe("Apache-2.0");
    // Its shipped LICENSE is the binding template's MIT; the declared Apache-2.0 text is added.
    expect(tok.texts.map((t) => t.file)).toEqual(["LICENSE", "Apache-2.0 (the licence package.json declares)"]);
    expect(tok.texts[1]!.text).toContain("Apache License");
    const text = noticesText(["node_modules/tokenizers", "node_modules/onnxruntime-node"], "1.2.3");
    expect(text).toContain("### tokenizers 0.23.2 (Apache-2.0)");
    expect(text).toContain("### onnxruntime-node 1.29.0 (MIT)");
    expect(text).toContain("No licence file in the package; its package.json declares MIT");
    expect(text).toContain("(Bun 1.2.3)");
    expect(text).toContain("ThirdPartyNotices.txt");
  });

  test("libvips, embedded for images, carries the LGPL-3.0 and GPL-3.0 texts", () => {
    const vips = packageNotice(`${REPO}/node_modules/@img/sharp-libvips-linux-x64`);
    expect(vips.license).toBe("LGPL-3.0-or-later");
    expect(vips.texts.map((t) => t.file)).toEqual(["LGPL-3 (the licence package.json declares)", "GPL-3 (the licence package.json declares)"]);
    expect(vips.texts[0]!.text).toContain("GNU LESSER GENERAL PUBLIC LICENSE");
  });
});
