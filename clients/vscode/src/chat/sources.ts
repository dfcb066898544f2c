/**
 * The daemon ends a written answer that has sources with a "Sources:" block (`[n] place` per
 * line) in its text. A client that shows the structured list hides that block, so sources do
 * not show twice.
 */

const TRAILING_SOURCES = /(?:^|\n+)Sources:[ \t]*\n(?:\[\d+\][^\n]*(?:\n|$))+\s*$/;

/** `text` without its trailing "Sources:" block. */
export function withoutSourcesBlock(text: string): string {
  return text.replace(TRAILING_SOURCES, "");
}
