/**
 * Where an exported conversation is proposed to be saved: the name the daemon gives it
 * (`imprint/export`'s `fileName`) in the workspace folder, else the home folder. VS Code opens an
 * untitled editor with that path (Save As proposes it; Save writes it without asking), and refuses
 * a path that exists, so a taken name gets a number: saving never replaces a file.
 */

import * as path from "node:path";

/** The first of `folder/name.md`, `folder/name-2.md`, … that `taken` says is free. */
export function exportPath(fileName: string, folder: string, taken: (file: string) => boolean): string {
  // The daemon's name is a file name; a path in it would name another folder.
  const { name, ext } = path.parse(path.basename(fileName) || "imprint-conversation.md");
  for (let number = 1; number < 10_000; number++) {
    const candidate = path.join(folder, number === 1 ? `${name}${ext}` : `${name}-${number}${ext}`);
    if (!taken(candidate)) return candidate;
  }
  return path.join(folder, `${name}-${Date.now()}${ext}`);
}
