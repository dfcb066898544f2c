/**
 * The chat webview in headless Chromium (playwright-core driving the system's `chromium`):
 * a loopback server serves the page exactly as the extension builds it (same HTML, same CSP,
 * same bundled script and stylesheet), with `acquireVsCodeApi` stubbed to record what the
 * panel posts and to keep its state in sessionStorage (as a webview reload keeps it).
 */

import { existsSync, readFileSync } from "node:fs";
import { AddressInfo } from "node:net";
import { createServer, Server } from "node:http";
import * as path from "node:path";
import { Browser, Page, chromium } from "playwright-core";
import { chatHtml } from "../../src/chat/html";
import type { FromView, ToView } from "../../src/chat/view";
import { THEMES } from "./themes";

export const EXTENSION_ROOT = path.resolve(__dirname, "..", "..");
export const OUTPUT_DIR = path.join(EXTENSION_ROOT, "test-output");
export const NONCE = "test-nonce-1234567890";

const FILES: Record<string, [string, string]> = {
  "/dist/webview.js": ["dist/webview.js", "text/javascript"],
  "/media/chat.css": ["media/chat.css", "text/css"],
};

export function chromiumPath(): string {
  const candidates = [process.env.CHROMIUM_PATH, "/usr/bin/chromium", "/usr/bin/chromium-browser"].filter(Boolean) as string[];
  const found = candidates.find((candidate) => existsSync(candidate));
  if (!found) throw new Error(`no Chromium found (tried ${candidates.join(", ")}); install it with: apt-get install -y chromium, or set CHROMIUM_PATH`);
  return found;
}

export async function launchBrowser(): Promise<Browser> {
  const args = process.getuid?.() === 0 ? ["--no-sandbox"] : [];
  return chromium.launch({ executablePath: chromiumPath(), args, headless: true });
}

/** Serves the panel page on loopback; returns its origin. */
export async function servePanel(): Promise<{ server: Server; origin: string }> {
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? "/", "http://127.0.0.1");
    if (url.pathname === "/") {
      const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const html = chatHtml({ cspSource: origin, scriptUri: `${origin}/dist/webview.js`, styleUri: `${origin}/media/chat.css`, nonce: NONCE });
      response.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
      response.end(html);
      return;
    }
    const file = FILES[url.pathname];
    if (!file) {
      response.writeHead(404).end();
      return;
    }
    response.writeHead(200, { "Content-Type": file[1] });
    response.end(readFileSync(path.join(EXTENSION_ROOT, file[0])));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

const STUB_API = `
  window.__posted = [];
  window.acquireVsCodeApi = () => ({
    postMessage: (message) => window.__posted.push(message),
    getState: () => JSON.parse(sessionStorage.getItem("imprint-state") || "null") ?? undefined,
    setState: (state) => sessionStorage.setItem("imprint-state", JSON.stringify(state)),
  });
`;

/** A page showing the panel in `theme`, with the VS Code API stubbed. */
export async function openPanel(browser: Browser, origin: string, theme: keyof typeof THEMES = "light", size = { width: 420, height: 760 }): Promise<Page> {
  const page = await browser.newPage({ viewport: size });
  await page.addInitScript(STUB_API);
  await page.goto(`${origin}/`);
  await setTheme(page, theme);
  await page.waitForFunction(() => (window as unknown as { __posted: FromView[] }).__posted.some((m) => m.type === "ready"));
  return page;
}

export async function setTheme(page: Page, theme: keyof typeof THEMES): Promise<void> {
  await page.evaluate(({ variables, theme }) => {
    const root = document.documentElement;
    for (const [name, value] of Object.entries(variables)) root.style.setProperty(name, value);
    document.body.className = `vscode-${theme}`;
  }, { variables: THEMES[theme], theme });
}

/** Posts messages to the panel as the extension host does. */
export async function post(page: Page, ...messages: ToView[]): Promise<void> {
  await page.evaluate((all) => {
    for (const message of all) window.postMessage(message, "*");
  }, messages);
}

/** What the panel posted to the extension. */
export function posted(page: Page): Promise<FromView[]> {
  return page.evaluate(() => (window as unknown as { __posted: FromView[] }).__posted);
}

/** Waits until every message posted so far was handled and a frame was rendered. */
export async function settle(page: Page): Promise<void> {
  // Messages are handled in the order posted, so once a marker posted last arrives, all have been.
  await page.evaluate(() => new Promise<void>((resolve) => {
    const marker = `settle-${Math.random()}`;
    const onMessage = (event: MessageEvent) => {
      if (event.data !== marker) return;
      window.removeEventListener("message", onMessage);
      requestAnimationFrame(() => setTimeout(resolve, 0));
    };
    window.addEventListener("message", onMessage);
    window.postMessage(marker, "*");
  }));
}
