/**
 * Webview rendering cost in headless Chromium, as ratios against a plain-text baseline measured
 * side by side in the same page and run (not a test; absolute times on a shared machine mean little).
 *
 * 1. Opening a 2,000-message session (markdown, code blocks) vs inserting the same text as plain
 *    text nodes. Target: ≤ 2×.
 * 2. 10,000 deltas of one reply, through the panel's streaming render (throttled markdown) vs
 *    appending the same 10,000 pieces to a text node on the same message path. Target: ≤ 1.5×.
 *
 * Run: npm run bench
 */

import { Page } from "playwright-core";
import type { ToView, TranscriptItem } from "../src/chat/view";
import { launchBrowser, openPanel, servePanel, settle } from "../test/webview/page";

const ROUNDS = 5;

function sessionItems(count: number): TranscriptItem[] {
  const items: TranscriptItem[] = [];
  for (let seq = 1; seq <= count; seq++) {
    if (seq % 2) {
      items.push({ kind: "user", seq, text: `Question ${seq}: which port does service ${seq} listen on, and where is it configured?` });
    } else {
      items.push({
        kind: "assistant", seq, steps: [], sources: [],
        text: `Service ${seq} listens on **port ${8000 + seq}** (see \`deploy/service-${seq}.yaml\`).\n\n` +
          "- the gateway forwards to it\n- retries on 5xx\n\n```yaml\nports:\n  - \"" + (8000 + seq) + ":" + (8000 + seq) + "\"\n```\n",
      });
    }
  }
  return items;
}

function deltas(count: number): string[] {
  const words = ["The", " billing", " service", " listens", " on", " **port", " 8101**", " and", " retries", " `3`", " times.", "\n\n"];
  return Array.from({ length: count }, (_, index) => words[index % words.length]);
}

/** Milliseconds for `run` in the page, layout included. */
async function timed(page: Page, run: () => Promise<void>): Promise<number> {
  const start = performance.now();
  await run();
  await settle(page);
  await page.evaluate(() => document.body.offsetHeight);
  return performance.now() - start;
}

async function openSession(page: Page, items: TranscriptItem[]): Promise<number> {
  await page.evaluate(() => window.postMessage({ type: "reset", title: "", items: [] }, "*"));
  await settle(page);
  return timed(page, () => page.evaluate((all) => window.postMessage({ type: "reset", title: "bench", items: all }, "*"), items));
}

async function insertPlain(page: Page, items: TranscriptItem[]): Promise<number> {
  await page.evaluate(() => window.postMessage({ type: "reset", title: "", items: [] }, "*"));
  await settle(page);
  return timed(page, () => page.evaluate((all) => {
    const transcript = document.getElementById("transcript")!;
    const fragment = document.createDocumentFragment();
    for (const item of all) {
      const article = document.createElement("article");
      article.className = "message";
      const body = document.createElement("div");
      body.textContent = item.kind === "summary" ? item.summary.text : item.kind === "unanswered" ? "" : item.text;
      article.appendChild(body);
      fragment.appendChild(article);
    }
    transcript.appendChild(fragment);
  }, items));
}

async function streamReply(page: Page, pieces: string[]): Promise<number> {
  await page.evaluate(() => window.postMessage({ type: "reset", title: "", items: [] }, "*"));
  await settle(page);
  return timed(page, () => page.evaluate((all) => {
    window.postMessage({ type: "replyStart" } satisfies ToView, "*");
    for (const text of all) window.postMessage({ type: "delta", part: 0, text } satisfies ToView, "*");
  }, pieces));
}

async function appendPlain(page: Page, pieces: string[]): Promise<number> {
  await page.evaluate(() => window.postMessage({ type: "reset", title: "", items: [] }, "*"));
  await settle(page);
  await page.evaluate(() => {
    const target = document.createElement("div");
    target.id = "plain";
    document.getElementById("transcript")!.appendChild(target);
    const text = document.createTextNode("");
    target.appendChild(text);
    window.addEventListener("message", (event) => {
      if (event.data?.type === "plainDelta") text.appendData(event.data.text);
    });
  });
  return timed(page, () => page.evaluate((all) => {
    for (const text of all) window.postMessage({ type: "plainDelta", text }, "*");
  }, pieces));
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

async function main(): Promise<void> {
  const { server, origin } = await servePanel();
  const browser = await launchBrowser();
  try {
    const items = sessionItems(2000);
    const pieces = deltas(10000);
    const open: number[] = [], plain: number[] = [], stream: number[] = [], append: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      // Fresh pages each round, alternating the order, so neither side gets a warmer page.
      const a = await openPanel(browser, origin), b = await openPanel(browser, origin);
      if (round % 2) { plain.push(await insertPlain(b, items)); open.push(await openSession(a, items)); }
      else { open.push(await openSession(a, items)); plain.push(await insertPlain(b, items)); }
      const c = await openPanel(browser, origin), d = await openPanel(browser, origin);
      if (round % 2) { append.push(await appendPlain(d, pieces)); stream.push(await streamReply(c, pieces)); }
      else { stream.push(await streamReply(c, pieces)); append.push(await appendPlain(d, pieces)); }
      await Promise.all([a.close(), b.close(), c.close(), d.close()]);
    }
    const report = (label: string, ours: number[], base: number[], target: number) => {
      const ratio = median(ours) / median(base);
      console.log(`${label}: ${median(ours).toFixed(0)} ms vs ${median(base).toFixed(0)} ms baseline (median of ${ROUNDS}) = ${ratio.toFixed(2)}× (target ≤ ${target}×)`);
    };
    report("open a 2,000-message session vs inserting the same plain text", open, plain, 2);
    report("10,000 deltas of one reply vs appending the same text without markdown", stream, append, 1.5);
  } finally {
    await browser.close();
    server.close();
  }
}

void main();
