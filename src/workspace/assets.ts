// Static assets imported as text so that `bun build --compile` embeds them in the binary.
import appCss from "./assets/app.css" with { type: "text" };
import appJs from "./assets/app.js" with { type: "text" };
import pullProgressCss from "./assets/pull-progress.css" with { type: "text" };
import pullProgressJs from "./assets/pull-progress.js" with { type: "text" };

interface Asset {
  body: string;
  type: string;
}

export const ASSETS: Record<string, Asset> = {
  "app.css": { body: appCss, type: "text/css; charset=utf-8" },
  "app.js": { body: appJs, type: "text/javascript; charset=utf-8" },
  "pull-progress.js": { body: pullProgressJs, type: "text/javascript; charset=utf-8" },
  "pull-progress.css": { body: pullProgressCss, type: "text/css; charset=utf-8" },
};

/** Changes whenever an asset does, so browsers may cache them for long. */
export const ASSET_VERSION = Bun.hash(appCss + appJs).toString(36);

/** The admin page's Hub pull script and style, loaded by that section only. */
export const PULL_PROGRESS_VERSION = Bun.hash(pullProgressJs + pullProgressCss).toString(36);
