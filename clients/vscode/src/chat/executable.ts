/**
 * Finding the daemon executable before starting it, so a missing `imprintd` gets one clear
 * notification (how to install it, "Set path") instead of a spawn error.
 */

import { accessSync, constants, statSync } from "node:fs";
import * as path from "node:path";

function isExecutableFile(file: string): boolean {
  try {
    if (!statSync(file).isFile()) return false;
    accessSync(file, process.platform === "win32" ? constants.F_OK : constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The absolute path `command` runs: itself when it contains a path separator (`~` expanded),
 * else the first match on `searchPath`; undefined when there is none.
 */
export function resolveExecutable(command: string, searchPath = process.env.PATH ?? "", home = process.env.HOME ?? ""): string | undefined {
  const expanded = command.startsWith("~/") && home ? path.join(home, command.slice(2)) : command;
  const extensions = process.platform === "win32" ? ["", ".exe", ".cmd", ".bat"] : [""];
  if (expanded.includes("/") || expanded.includes(path.sep)) {
    const absolute = path.resolve(expanded);
    return extensions.map((ext) => absolute + ext).find(isExecutableFile);
  }
  for (const dir of searchPath.split(path.delimiter).filter(Boolean)) {
    const found = extensions.map((ext) => path.join(dir, expanded + ext)).find(isExecutableFile);
    if (found) return found;
  }
  return undefined;
}

/**
 * The notification for a daemon that was not found. Notifications show plain text, so names are
 * quoted, not in markdown backticks; a remote window reads the path from its Remote settings.
 */
export function missingDaemonMessage(configured: string, remoteName: string | undefined): string {
  const where = remoteName
    ? ` In this remote window (${remoteName}) it runs on the remote machine: install it there, and set “imprint.serverPath” in the Remote settings, not your local User settings.`
    : "";
  return `Imprint could not find its daemon “${configured}”. Install it with pip (Python 3.11+: “pip install ".[embedded]"” in an imprintd checkout) so “imprintd” is on PATH, or set its full path.${where}`;
}
