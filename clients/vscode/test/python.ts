/**
 * The Python that runs the daemon and the scripted model server in tests: `IMPRINT_PYTHON`, else
 * the repository's `.venv`, else `python3` (CI activates its own virtual environment). The
 * repository root goes on PYTHONPATH so this checkout's `imprintd` and `tests` are imported.
 */

import { existsSync } from "node:fs";
import * as path from "node:path";

// Bundled tests run from clients/vscode/out/<suite>/.
export const REPO_ROOT = path.resolve(__dirname, "..", "..", "..", "..");

export function python(): string {
  if (process.env.IMPRINT_PYTHON) return process.env.IMPRINT_PYTHON;
  const venv = path.join(REPO_ROOT, ".venv", "bin", "python");
  return existsSync(venv) ? venv : "python3";
}

/** The environment for a Python child: no inherited IMPRINT_* settings, this checkout importable. */
export function pythonEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) if (!key.startsWith("IMPRINT_")) env[key] = value;
  const pythonPath = [REPO_ROOT, process.env.PYTHONPATH].filter(Boolean).join(path.delimiter);
  return { ...env, PYTHONPATH: pythonPath, PYTHONUNBUFFERED: "1", ...extra };
}
