// Bundles the two test pages into dist/ (esbuild: no dev server, no network).
import { build } from "esbuild";
import { cpSync, mkdirSync } from "node:fs";

mkdirSync("dist", { recursive: true });
await build({
  entryPoints: ["src/react.jsx", "src/classic.jsx"],
  bundle: true,
  outdir: "dist",
  format: "esm",
  platform: "browser",
  jsx: "automatic",
  define: { "process.env.NODE_ENV": '"production"' },
  logLevel: "warning",
});
cpSync("pages", "dist", { recursive: true });
