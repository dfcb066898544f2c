/**
 * The packaged extension: `vsce package` (run by `npm run test:package` just before this test)
 * wrote test-output/imprint.vsix. Its manifest contributes the commands, views and every daemon
 * setting; it holds the bundles and media but no sources, tests or node_modules.
 */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { inflateRawSync } from "node:zlib";
import { SETTINGS, SETTING_KEYS } from "../../src/chat/settings";
import { REPO_ROOT, python, pythonEnv } from "../python";

const ROOT = path.resolve(__dirname, "..", "..");
const VSIX = path.join(ROOT, "test-output", "imprint.vsix");

/** The entries of a zip archive (a .vsix), from its central directory. */
function readZip(file: string): Map<string, () => Buffer> {
  const zip = readFileSync(file);
  const end = zip.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
  assert.ok(end >= 0, "not a zip archive");
  const count = zip.readUInt16LE(end + 10);
  let at = zip.readUInt32LE(end + 16);
  const entries = new Map<string, () => Buffer>();
  for (let index = 0; index < count; index++) {
    const method = zip.readUInt16LE(at + 10);
    const size = zip.readUInt32LE(at + 20);
    const nameLength = zip.readUInt16LE(at + 28);
    const extraLength = zip.readUInt16LE(at + 30);
    const commentLength = zip.readUInt16LE(at + 32);
    const local = zip.readUInt32LE(at + 42);
    const name = zip.toString("utf8", at + 46, at + 46 + nameLength);
    entries.set(name, () => {
      const start = local + 30 + zip.readUInt16LE(local + 26) + zip.readUInt16LE(local + 28);
      const data = zip.subarray(start, start + size);
      return method === 8 ? inflateRawSync(data) : Buffer.from(data);
    });
    at += 46 + nameLength + extraLength + commentLength;
  }
  return entries;
}

test("the .vsix holds the bundles and media, and no sources, tests or node_modules", () => {
  const names = [...readZip(VSIX).keys()];
  for (const required of ["extension/package.json", "extension/dist/extension.js", "extension/dist/webview.js",
    "extension/media/chat.css", "extension/media/imprint.svg", "extension/readme.md", "extension/images/panel-light.png",
    "extension.vsixmanifest"]) {
    assert.ok(names.includes(required), `${required} missing from ${names.join(", ")}`);
  }
  const forbidden = names.filter((name) => /^extension\/(src|test|bench|out|scripts|node_modules|test-output)\//.test(name) || name.endsWith(".ts") || name.endsWith(".map"));
  assert.deepEqual(forbidden, []);
});

test("the manifest contributes the commands, the chat view and every daemon setting", () => {
  const manifest = JSON.parse(readZip(VSIX).get("extension/package.json")!().toString("utf8"));
  const commands = manifest.contributes.commands.map((command: { command: string }) => command.command).sort();
  assert.deepEqual(commands, ["imprint.askAboutSelection", "imprint.cancelReply", "imprint.compactConversation",
    "imprint.deleteSession", "imprint.exportConversation", "imprint.newChat", "imprint.openSession", "imprint.pickModel",
    "imprint.renameConversation", "imprint.restartDaemon", "imprint.searchConversations", "imprint.showLog"]);
  assert.deepEqual(manifest.contributes.viewsContainers.activitybar.map((c: { id: string }) => c.id), ["imprint"]);
  assert.deepEqual(manifest.contributes.views.imprint, [{ type: "webview", id: "imprint.chat", name: "Chat" }]);
  assert.ok(manifest.contributes.menus["editor/context"].some((item: { command: string }) => item.command === "imprint.askAboutSelection"));
  // The panel's title bar: search beside New Chat, compact, export and rename in its "…" menu.
  const titleBar = manifest.contributes.menus["view/title"]
    .filter((item: { when: string }) => item.when === "view == imprint.chat")
    .map((item: { command: string; group: string }) => [item.command, item.group.split("@")[0]]);
  for (const [command, group] of [["imprint.searchConversations", "navigation"], ["imprint.compactConversation", "overflow"],
    ["imprint.exportConversation", "overflow"], ["imprint.renameConversation", "overflow"]]) {
    assert.ok(titleBar.some(([c, g]: string[]) => c === command && g === group), `${command} in the panel's ${group}`);
  }
  assert.equal(manifest.main, "./dist/extension.js");
  assert.equal(manifest.engines.vscode, "^1.91.0");
  assert.equal(manifest.capabilities.untrustedWorkspaces.supported, "limited");
  // A workspace's own serverPath and MCP servers start programs: not read in an untrusted workspace.
  assert.deepEqual(manifest.capabilities.untrustedWorkspaces.restrictedConfigurations, ["imprint.serverPath", "imprint.mcpServers"]);

  // Every contributed command is registered by the extension, and nothing else is.
  const source = readFileSync(path.join(ROOT, "src", "extension.ts"), "utf8");
  const registered = [...source.matchAll(/registerCommand\("([^"]+)"/g)].map((match) => match[1]).sort();
  assert.deepEqual(registered, commands);
  const viewIds = [...source.matchAll(/registerWebviewViewProvider\("([^"]+)"/g)].map((match) => match[1]);
  assert.deepEqual(viewIds, ["imprint.chat"]);

  const properties = manifest.contributes.configuration.properties;
  assert.equal(properties["imprint.serverPath"].default, "imprintd");
  // Read on the machine the extension runs on; the description says where a remote window reads it.
  assert.equal(properties["imprint.serverPath"].scope, "machine-overridable");
  assert.match(properties["imprint.serverPath"].markdownDescription, /remote window.*\*\*Remote\*\* tab/);
  const daemonKeys = Object.keys(properties).filter((key) => key.startsWith("imprint.chat.") || key === "imprint.mcpServers");
  assert.deepEqual(daemonKeys, SETTINGS.map(({ editor }) => `imprint.${editor}`));
});

test("the contributed settings match the daemon's settings table: keys, defaults, types and ranges", () => {
  // The daemon's own table (imprintd/settings.py), read from the daemon's code.
  const script = [
    "import json, imprintd.settings as s",
    "print(json.dumps({k: {'default': s.DEFAULTS.get(k), 'type': v.type.__name__} for k, v in s.KEYS.items()}))",
  ].join("\n");
  const daemon = JSON.parse(execFileSync(python(), ["-c", script], {
    cwd: REPO_ROOT, env: pythonEnv(),
  }).toString()) as Record<string, { default: unknown; type: string }>;
  assert.deepEqual(Object.keys(daemon), [...SETTING_KEYS]);
  const properties = JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")).contributes.configuration.properties;
  // A structured value (chat.mcp_servers: a tuple of servers in the daemon) is an object of servers by name in the editor.
  const jsonType: Record<string, string> = { str: "string", int: "integer", float: "number", bool: "boolean", tuple: "object" };
  const editorName = new Map<string, string>(SETTINGS.map(({ daemon, editor }) => [daemon, editor]));
  for (const [key, spec] of Object.entries(daemon)) {
    const property = properties[`imprint.${editorName.get(key)}`];
    if (spec.type === "tuple") assert.deepEqual([property.default, spec.default], [{}, []], `${key} default: none`);
    else assert.equal(property.default, spec.default, `${key} default`);
    assert.equal(property.type, jsonType[spec.type], `${key} type`);
    assert.ok(property.markdownDescription?.includes(`\`${key}\``), `${key}: the description names the daemon's key`);
  }
  // Ranges: the contributed bounds are accepted by the daemon, one step past them is refused.
  const daemonName = new Map<string, string>(SETTINGS.map(({ daemon, editor }) => [`imprint.${editor}`, daemon]));
  const bounds = Object.entries(properties as Record<string, { minimum?: number; maximum?: number }>)
    .filter(([, property]) => property.minimum !== undefined)
    .map(([key, property]) => [daemonName.get(key), property.minimum, property.maximum]);
  const check = [
    "import json, sys, imprintd.settings as s",
    "out = {}",
    "for key, low, high in json.loads(sys.argv[1]):",
    "    def accepted(v):",
    "        try: s.coerce(key, v); return True",
    "        except s.SettingsError: return False",
    "    out[key] = [accepted(low), accepted(high), accepted(low - 1), accepted(high + 1)]",
    "print(json.dumps(out))",
  ].join("\n");
  const verdicts = JSON.parse(execFileSync(python(), ["-c", check, JSON.stringify(bounds)], {
    cwd: REPO_ROOT, env: pythonEnv(),
  }).toString()) as Record<string, boolean[]>;
  assert.equal(Object.keys(verdicts).length, Object.values(daemon).filter((spec) => spec.type === "int" || spec.type === "float").length);
  for (const [key, verdict] of Object.entries(verdicts)) assert.deepEqual(verdict, [true, true, false, false], key);
});
