// Bundles the extension (Node, `vscode` external), the webview script (browser) and the tests
// and benchmark (Node) with esbuild. `--production` minifies the shipped bundles.
import { build } from "esbuild";
import { existsSync, readdirSync } from "node:fs";

const production = process.argv.includes("--production");
const shared = { bundle: true, sourcemap: !production, minify: production, logLevel: "warning", target: "es2022" };

const testsIn = (dir) => (existsSync(dir) ? readdirSync(dir) : []).filter((f) => f.endsWith(".test.ts")).map((f) => `${dir}/${f}`);

await Promise.all([
  build({ ...shared, entryPoints: ["src/extension.ts"], outfile: "dist/extension.js", platform: "node", format: "cjs", external: ["vscode"] }),
  build({ ...shared, entryPoints: ["src/webview/main.ts"], outfile: "dist/webview.js", platform: "browser", format: "iife" }),
  production ? null : build({
    ...shared, entryPoints: testsIn("test/node"), outdir: "out/test", platform: "node", format: "cjs", packages: "external",
  }),
  production ? null : build({
    ...shared, entryPoints: testsIn("test/webview"), outdir: "out/webview-test", platform: "node", format: "cjs", packages: "external",
  }),
  production ? null : build({
    ...shared, entryPoints: testsIn("test/package"), outdir: "out/package-test", platform: "node", format: "cjs", packages: "external",
  }),
  production || !existsSync("bench/bench_webview.ts") ? null : build({
    ...shared, entryPoints: ["bench/bench_webview.ts"], outdir: "out/bench", platform: "node", format: "cjs", packages: "external",
  }),
]);
