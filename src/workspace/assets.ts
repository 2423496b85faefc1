// Static assets imported as text so that `bun build --compile` embeds them in the binary.
import appCss from "./assets/app.css" with { type: "text" };
import appJs from "./assets/app.js" with { type: "text" };
import hubPullCss from "./assets/hub-pull.css" with { type: "text" };
import hubPullJs from "./assets/hub-pull.js" with { type: "text" };

interface Asset {
  body: string;
  type: string;
}

export const ASSETS: Record<string, Asset> = {
  "app.css": { body: appCss, type: "text/css; charset=utf-8" },
  "app.js": { body: appJs, type: "text/javascript; charset=utf-8" },
  "hub-pull.js": { body: hubPullJs, type: "text/javascript; charset=utf-8" },
  "hub-pull.css": { body: hubPullCss, type: "text/css; charset=utf-8" },
};

/** Changes whenever an asset does, so browsers may cache them for long. */
export const ASSET_VERSION = Bun.hash(appCss + appJs).toString(36);

/** The admin page's Hub pull script and style, loaded by that section only. */
export const HUB_PULL_JS_VERSION = Bun.hash(hubPullJs + hubPullCss).toString(36);
