/**
 * The chat webview's HTML: one script and one stylesheet, under a strict Content-Security-Policy
 * with a per-load nonce. Shared by the extension and the headless-browser test, so the test
 * loads exactly what VS Code loads.
 */

import { randomBytes } from "node:crypto";

export interface PageResources {
  /** The webview's `cspSource` (VS Code), or the test server's origin. */
  cspSource: string;
  scriptUri: string;
  styleUri: string;
  nonce?: string;
}

export function newNonce(): string {
  return randomBytes(18).toString("base64url");
}

export function chatHtml(resources: PageResources): string {
  const nonce = resources.nonce ?? newNonce();
  const csp = [
    "default-src 'none'",
    `style-src ${resources.cspSource}`,
    `script-src 'nonce-${nonce}'`,
    `img-src ${resources.cspSource} data:`,
    `font-src ${resources.cspSource}`,
  ].join("; ");
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="${resources.styleUri}">
<title>Imprint</title>
</head>
<body>
<main id="app" class="app">
  <header id="header" class="header" hidden>
    <button id="meter" type="button" class="meter" aria-expanded="false" aria-controls="meter-details">
      <span class="meter-bar" aria-hidden="true"><span id="meter-fill" class="meter-fill"></span><span id="meter-kept" class="meter-kept"></span></span>
      <span id="meter-text" class="meter-text"></span>
    </button>
    <div id="meter-details" class="meter-details" hidden></div>
  </header>
  <div id="transcript" class="transcript" role="log" aria-label="Conversation" aria-live="polite" aria-relevant="additions text" tabindex="0">
    <div id="empty" class="empty">
      <div class="empty-mark" aria-hidden="true">✦</div>
      <h2>Ask about your workspace</h2>
      <p id="empty-text">Imprint searches and reads the files of this folder and remembers the conversation.</p>
    </div>
    <div id="log" class="log"></div>
  </div>
  <div id="research" class="research-off" role="status" hidden>
    <span id="research-text" class="research-text"></span>
    <button id="research-action" type="button" class="button secondary"></button>
  </div>
  <form id="composer" class="composer">
    <textarea id="input" rows="1" placeholder="Ask Imprint… (Enter to send, Shift+Enter for a new line)" aria-label="Message Imprint"></textarea>
    <div class="composer-bar">
      <span id="status" class="status" aria-live="polite"></span>
      <button id="stop" type="button" class="button secondary" hidden title="Stop the reply (Escape)">■ Stop</button>
      <button id="send" type="submit" class="button" title="Send (Enter)">Send</button>
    </div>
  </form>
</main>
<script nonce="${nonce}" src="${resources.scriptUri}"></script>
</body>
</html>`;
}
