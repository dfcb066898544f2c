/**
 * The chat webview in headless Chromium: a scripted conversation renders as expected, model
 * text can never become markup or script, the CSP blocks inline script without the nonce, the
 * keyboard works, drafts survive a reload, and screenshots are written for a person to look at.
 */

import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { Server } from "node:http";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { Browser, Page } from "playwright-core";
import { CONVERSATION, USAGE } from "./conversation";
import { OUTPUT_DIR, launchBrowser, openPanel, post, posted, servePanel, settle } from "./page";
import type { TranscriptItem } from "../../src/chat/view";

let browser: Browser;
let server: Server;
let origin: string;

before(async () => {
  ({ server, origin } = await servePanel());
  browser = await launchBrowser();
  mkdirSync(OUTPUT_DIR, { recursive: true });
});

after(async () => {
  await browser?.close();
  server?.close();
});

function texts(page: Page, selector: string): Promise<string[]> {
  return page.locator(selector).allTextContents();
}

test("a scripted conversation renders: steps, progress, thinking, summary divider, answer, sources, error", async () => {
  const page = await openPanel(browser, origin);
  // Post up to the progress report and look at the reply while it runs.
  const progressAt = CONVERSATION.findIndex((m) => m.type === "progress");
  await post(page, ...CONVERSATION.slice(0, progressAt + 1));
  await settle(page);
  assert.equal(await page.locator(".message.streaming .progress").isVisible(), true);
  assert.match(await page.locator(".message.streaming .progress").innerText(), /Searching the workspace for “billing port”\s*40%/);
  assert.equal(await page.locator("#stop").isVisible(), true);
  assert.equal(await page.locator("#send").isDisabled(), true);
  // The preamble folded into a collapsed "Thinking" block.
  assert.equal(await page.locator(".thinking").count(), 1);
  assert.equal(await page.locator(".thinking").getAttribute("open"), null);
  assert.equal((await page.locator(".thinking .thinking-text").textContent())?.trim(), "I'll search the deploy files and the billing client first.");

  await post(page, ...CONVERSATION.slice(progressAt + 1));
  await settle(page);
  await page.context().grantPermissions(["clipboard-read", "clipboard-write"], { origin });

  assert.deepEqual((await texts(page, ".message.user .bubble")).map((text) => text.trim()), ["Which port does billing use, and how long does its client wait?", "And in staging?"]);
  const steps = page.locator(".message.assistant").first().locator(".step");
  assert.deepEqual(await steps.evaluateAll((rows) => rows.map((row) => row.className)), ["step finished", "step failed", "step finished"]);
  assert.match(await steps.nth(1).innerText(), /Reading \.\.\/etc\/passwd[\s\S]*refused path '\.\.\/etc\/passwd'/);
  assert.equal(await page.locator(".progress").count(), 0, "progress is gone once the reply ends");

  const divider = page.locator(".summary-divider");
  assert.equal((await divider.locator("summary").textContent())?.trim(), "Earlier conversation summarized: #1–#12");
  assert.equal(await divider.locator(".summary-text").isVisible(), false);
  await divider.locator("summary").click();
  assert.equal(await divider.locator(".summary-text").isVisible(), true);
  assert.match(await divider.locator(".summary-text").innerText(), /billing runs on 8101/);

  // The result's text replaced the streamed answer: one answer, rendered as markdown with a code block.
  const first = page.locator(".message.assistant").first();
  assert.equal(await first.locator(".answer").count(), 1);
  assert.equal(await first.locator(".answer strong").textContent(), "port 8101");
  assert.equal(await first.locator(".code pre code").textContent(), "class BillingClient:\n    TIMEOUT_SECONDS = 7.5\n");
  assert.equal(await first.locator(".code .code-lang").textContent(), "python");
  await first.locator(".code button.copy").click();
  await page.locator(".code button.copy", { hasText: "Copied" }).waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), "class BillingClient:\n    TIMEOUT_SECONDS = 7.5\n");
  assert.equal(await first.locator(".thinking").count(), 1, "the preamble stays, folded");

  // The structured list replaces the daemon's trailing "Sources:" text: sources show once.
  assert.ok(!(await first.locator(".answer").innerText()).includes("Sources:"), "the trailing Sources block is hidden");
  assert.match(await first.locator(".answer").innerText(), /as you said earlier \[3\]\.$/m);
  assert.deepEqual(await texts(page, ".sources .source-label"),
    ["deploy/billing.yaml:3–5", "src/billing/client_configuration_defaults.py:41–42", "Your message #1"]);
  assert.deepEqual(await texts(page, ".sources .source-kind"), ["file", "file", "message"]);
  assert.deepEqual(await texts(page, ".sources .source-number"), ["1", "2", "3"]);
  // An unsupported citation is muted, its reason as the tooltip.
  const unsupported = page.locator(".sources .source-item.unsupported .source");
  assert.equal(await unsupported.count(), 1);
  assert.match((await unsupported.getAttribute("title")) ?? "", /^The citing sentence shares no number/);
  assert.equal(await unsupported.evaluate((el) => getComputedStyle(el).opacity), "0.6");
  assert.equal(await page.locator(".sources .source-item").first().locator(".source").evaluate((el) => getComputedStyle(el).opacity), "1");
  await page.locator(".sources .source").nth(1).click();
  assert.deepEqual((await posted(page)).at(-1),
    { type: "openSource", path: "src/billing/client_configuration_defaults.py", startLine: 41, endLine: 42 });
  // A message source whose message this live transcript shows without its seq asks the controller.
  await page.locator(".sources .source").nth(2).click();
  assert.deepEqual((await posted(page)).at(-1), { type: "revealMessage", seq: 1 });

  // The context meter: used of nCtx in the header, the parts and ranges on click.
  assert.equal(await page.locator("#header").isVisible(), true);
  assert.equal(await page.locator("#meter-text").textContent(), "5.3k / 8.2k tokens");
  assert.match((await page.locator("#meter").getAttribute("title")) ?? "", /5310 of 8192 tokens in use \(65%\), 1024 kept for the answer[\s\S]*Tool schemas: 1210[\s\S]*In view: #12–#40 · summarized: #1–#11 · dropped: none/);
  assert.equal(await page.locator("#meter-details").isVisible(), false);
  await page.locator("#meter").click();
  assert.equal(await page.locator("#meter-details").isVisible(), true);
  assert.deepEqual(await texts(page, "#meter-details dd"), ["410", "1210", "300", "2890", "150", "350", "1024"]);
  assert.match(await page.locator("#meter-details").innerText(), /Summarized: #1–#11/);
  assert.equal(await page.locator("#meter-details .meter-window").count(), 0, "chat.n_ctx's window goes unsaid");
  await page.locator("#meter").click();
  assert.equal(await page.locator("#meter-details").isVisible(), false);
  // A served model's own, smaller window: the meter says where it comes from.
  await post(page, { type: "context", usage: { ...USAGE, nCtx: 1024, used: 700, outputAllowance: 256, nCtxSource: "llama-server /props n_ctx" } });
  await settle(page);
  assert.match((await page.locator("#meter").getAttribute("title")) ?? "",
    /^700 of 1024 tokens in use \(68%\), 256 kept for the answer\nContext 1,024 tokens \(llama-server \/props n_ctx\)\n/);
  assert.equal(await page.locator("#meter-details .meter-window").textContent(), "Context 1,024 tokens (llama-server /props n_ctx)");
  await post(page, { type: "context", usage: { ...USAGE, nCtxSource: "chat.n_ctx" } });
  await settle(page);
  assert.doesNotMatch((await page.locator("#meter").getAttribute("title")) ?? "", /Context \d/);

  const error = page.locator(".message.assistant").nth(1).locator(".error");
  assert.equal(await error.getAttribute("role"), "alert");
  assert.match(await error.innerText(), /connection refused/);
  await error.locator("button.retry").click();
  assert.deepEqual((await posted(page)).at(-1), { type: "retry" });
  assert.equal(await page.locator("#stop").isVisible(), false);
  assert.equal(await page.locator("#transcript").getAttribute("aria-live"), "polite");
  await page.close();
});

test("markup in model or user text renders as text and runs nothing", async () => {
  const page = await openPanel(browser, origin);
  const hostile = `Look: <img src=x onerror="window.__pwned = 'img'"> and <script>window.__pwned = 'script'</script> and [x](javascript:window.__pwned='link')`;
  await post(page,
    { type: "user", text: hostile },
    { type: "replyStart" },
    { type: "delta", part: 0, text: hostile },
  );
  await settle(page);
  await post(page, { type: "replyEnd", text: hostile, sources: [], stopReason: "answer" }, { type: "summary", summary: { text: hostile, firstSeq: 1, lastSeq: 2 } });
  await settle(page);
  await page.locator(".summary-divider summary").click();
  await settle(page);

  assert.equal(await page.locator("#transcript img").count(), 0);
  assert.equal(await page.locator("#transcript script").count(), 0);
  assert.equal(await page.locator(".answer a[href^='javascript']").count(), 0);
  assert.equal(await page.evaluate(() => (window as unknown as { __pwned?: string }).__pwned), undefined);
  assert.ok((await page.locator(".answer").innerText()).includes("<img src=x onerror="));
  assert.ok((await page.locator(".message.user .bubble").innerText()).includes("<script>window.__pwned = 'script'</script>"));
  await page.close();
});

test("the CSP blocks inline script without the nonce; the nonce'd bundle runs", async () => {
  const page = await openPanel(browser, origin);
  const violations = await page.evaluate(() => new Promise<string[]>((resolve) => {
    const seen: string[] = [];
    document.addEventListener("securitypolicyviolation", (event) => {
      seen.push(event.violatedDirective);
      resolve(seen);
    });
    const script = document.createElement("script");
    script.textContent = "window.__inline = 'ran'";
    document.body.appendChild(script);
    const handler = document.createElement("div");
    handler.setAttribute("onclick", "window.__inline = 'handler'");
    document.body.appendChild(handler);
    handler.click();
  }));
  assert.ok(violations.some((directive) => directive.startsWith("script-src")), `violations: ${violations}`);
  assert.equal(await page.evaluate(() => (window as unknown as { __inline?: string }).__inline), undefined);
  assert.deepEqual((await posted(page))[0], { type: "ready" }, "the bundle with the nonce ran");
  await page.close();
});

test("the user's text keeps its line breaks and a pasted selection shows as a code block", async () => {
  const page = await openPanel(browser, origin);
  await post(page, { type: "user", text: "What does this do?\nAnd why?\n\nFrom src/math.py, lines 3–4:\n\n```python\ndef inc(x):\n    return x + 1\n```" });
  await settle(page);
  const bubble = page.locator(".message.user .bubble");
  assert.equal(await bubble.locator("br").count(), 1);
  assert.equal(await bubble.locator(".code pre code").textContent(), "def inc(x):\n    return x + 1\n");
  await page.close();
});

test("keyboard: Enter sends, Shift+Enter adds a line, Escape stops; the draft survives a reload", async () => {
  const page = await openPanel(browser, origin);
  const input = page.locator("#input");
  await input.focus();
  await page.keyboard.type("first line");
  await page.keyboard.press("Shift+Enter");
  await page.keyboard.type("second line");
  assert.equal(await input.inputValue(), "first line\nsecond line");
  await page.keyboard.press("Enter");
  assert.deepEqual((await posted(page)).at(-1), { type: "send", text: "first line\nsecond line" });
  assert.equal(await input.inputValue(), "");

  await post(page, { type: "busy", busy: true });
  await settle(page);
  await page.keyboard.type("typed while answering");
  await page.keyboard.press("Enter");
  assert.notDeepEqual((await posted(page)).at(-1), { type: "send", text: "typed while answering" }, "no second send while busy");
  await page.keyboard.press("Escape");
  assert.deepEqual((await posted(page)).at(-1), { type: "stop" });
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement?.id), "stop", "Stop is reachable from the keyboard");

  await page.reload();
  await page.waitForFunction(() => (window as unknown as { __posted: { type: string }[] }).__posted.some((m) => m.type === "ready"));
  assert.equal(await page.locator("#input").inputValue(), "typed while answering", "the draft is restored after a reload");
  await page.close();
});

test("an opened session renders its messages, tool steps collapsed, the summary divider, and escapes markup", async () => {
  const page = await openPanel(browser, origin);
  await post(page, {
    type: "reset", title: "Billing", items: [
      { kind: "user", seq: 1, text: "Paste: <img src=x onerror=\"window.__pwned = 1\">" },
      { kind: "assistant", seq: 2, text: "Noted, *the compose file*.", steps: [], sources: [] },
      { kind: "summary", summary: { text: "- (#1–#2) a compose file <script>window.__pwned = 2</script>", firstSeq: 1, lastSeq: 2 } },
      { kind: "user", seq: 3, text: "Which port?" },
      {
        kind: "assistant", seq: 6, text: "Port **8101**.", sources: [], steps: [
          { callId: "c1", title: "search: billing port", state: "finished", detail: "" },
          { callId: "c2", title: "read_file: ../x", state: "failed", detail: "Error: refused <b>path</b>" },
        ],
      },
    ],
  });
  await settle(page);
  assert.equal(await page.locator(".message").count(), 4);
  assert.equal(await page.locator("#empty").isVisible(), false);
  const collapsed = page.locator(".steps-collapsed");
  assert.equal(await collapsed.count(), 1);
  assert.equal((await collapsed.locator("summary").textContent())?.trim(), "2 tool steps");
  assert.equal(await collapsed.locator(".step").first().isVisible(), false, "tool steps start collapsed");
  await collapsed.locator("summary").focus();
  await page.keyboard.press("Enter");
  assert.equal(await collapsed.locator(".step.failed .step-detail").innerText(), "Error: refused <b>path</b>");
  // Answers near the viewport become markdown (far ones on scrolling, below).
  await page.locator(".message.assistant").nth(1).locator(".answer strong").waitFor();
  assert.equal(await page.locator(".message.assistant").nth(1).locator(".answer strong").textContent(), "8101");
  assert.equal(await page.locator(".message.assistant").nth(0).locator(".answer em").textContent(), "the compose file");
  assert.equal((await page.locator(".summary-divider summary").textContent())?.trim(), "Earlier conversation summarized: #1–#2");
  assert.equal(await page.locator("#transcript img, #transcript script, #transcript b").count(), 0);
  assert.equal(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned), undefined);

  // A long session: the far answers stay text until scrolled to, then render as markdown.
  const long = Array.from({ length: 400 }, (_, index) => index % 2
    ? { kind: "assistant" as const, seq: index + 1, text: `Answer **${index}**`, steps: [], sources: [] }
    : { kind: "user" as const, seq: index + 1, text: `Question ${index}` });
  await post(page, { type: "reset", title: "Long", items: long });
  await settle(page);
  await page.locator(".message.assistant").last().locator(".answer strong").waitFor();
  const first = page.locator(".message.assistant").first().locator(".answer");
  assert.equal(await first.locator("strong").count(), 0, "far from the viewport: not rendered yet");
  assert.equal(await first.textContent(), "Answer **1**");
  await first.scrollIntoViewIfNeeded();
  await first.locator("strong").waitFor();
  assert.equal(await first.locator("strong").textContent(), "1");

  // A new chat clears it.
  await post(page, { type: "reset", title: "New chat", items: [] });
  await settle(page);
  assert.equal(await page.locator(".message").count(), 0);
  assert.equal(await page.locator("#empty").isVisible(), true);
  await page.close();
});

for (const theme of ["light", "dark", "high-contrast"] as const) {
  test(`screenshot in the ${theme} theme`, async () => {
    const page = await openPanel(browser, origin, theme);
    await post(page, ...CONVERSATION);
    await settle(page);
    await page.locator(".thinking summary").click();
    await page.locator("#input").fill("How is the timeout configured in staging?");
    const file = path.join(OUTPUT_DIR, `panel-${theme}.png`);
    await page.screenshot({ path: file });
    const background = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    const expected = { light: "rgb(248, 248, 248)", dark: "rgb(24, 24, 24)", "high-contrast": "rgb(0, 0, 0)" }[theme];
    assert.equal(background, expected, "the panel follows the theme's variables");
    await page.close();
  });
}

test("screenshots of the empty panel and of a reply in flight (dark theme)", async () => {
  const page = await openPanel(browser, origin, "dark");
  await post(page, { type: "reset", title: "New chat", items: [] }, { type: "status", status: "ready", detail: "" });
  await settle(page);
  assert.equal(await page.locator("#empty").isVisible(), true);
  await page.screenshot({ path: path.join(OUTPUT_DIR, "panel-empty-dark.png") });

  const until = CONVERSATION.findIndex((m) => m.type === "summary");
  await post(page, ...CONVERSATION.slice(0, until + 4),
    { type: "progress", message: "Writing the answer from the research notes…", percentage: 90, done: false });
  await settle(page);
  assert.equal(await page.locator("#empty").isVisible(), false);
  assert.equal(await page.locator(".message.streaming").getAttribute("aria-busy"), "true");
  assert.match(await page.locator(".message.streaming .answer").innerText(), /^Billing listens on port 8101/);
  assert.ok(!(await page.locator(".message.streaming .answer").innerText()).includes("Sources:"), "the streamed Sources block is not shown");
  assert.equal(await page.locator("#stop").isVisible(), true);
  await page.screenshot({ path: path.join(OUTPUT_DIR, "panel-streaming-dark.png") });
  await page.close();
});

test("a model that reuses a call id across rounds gets a row per step, as the reopened session lists them", async () => {
  const page = await openPanel(browser, origin);
  await post(page, { type: "user", text: "Which port?" }, { type: "replyStart" });
  for (const title of ["Searching the workspace for “billing”", "Reading deploy/billing.yaml", "Searching the workspace for “port”", "Reading src/app.py"]) {
    await post(page, { type: "toolStep", callId: "call_0", title, state: "started", detail: "" },
      { type: "toolStep", callId: "call_0", title, state: "finished", detail: "" });
  }
  await settle(page);
  assert.deepEqual((await texts(page, ".step .step-title")),
    ["Searching the workspace for “billing”", "Reading deploy/billing.yaml", "Searching the workspace for “port”", "Reading src/app.py"]);
  assert.deepEqual(await page.locator(".step").evaluateAll((rows) => rows.map((row) => row.className)), Array(4).fill("step finished"));
  await page.close();
});

test("a source path breaks between its names, never inside one", async () => {
  const page = await openPanel(browser, origin, "light", { width: 260, height: 600 });
  await post(page, { type: "user", text: "Where?" }, { type: "replyStart" },
    { type: "replyEnd", text: "In the defaults [1].", stopReason: "answer", sources: [{
      number: 1, kind: "file", label: "src/billing/internal/client_configuration_defaults.py:41–42",
      path: "src/billing/internal/client_configuration_defaults.py", startLine: 41, endLine: 42, message: null, cited: true, supported: true, reason: "",
    }] });
  await settle(page);
  const layout = await page.locator(".source-label").evaluate((label) => {
    const pieces = [...label.childNodes].filter((node) => node.nodeType === Node.TEXT_NODE);
    const lines = new Set<number>();
    const split = pieces.filter((node) => {
      const range = document.createRange();
      range.selectNodeContents(node);
      const rects = [...range.getClientRects()].filter((rect) => rect.width > 0);
      rects.forEach((rect) => lines.add(Math.round(rect.top)));
      return new Set(rects.map((rect) => Math.round(rect.top))).size > 1;
    });
    return { split: split.map((node) => node.textContent), lines: lines.size };
  });
  assert.ok(layout.lines >= 2, `the narrow panel wraps the label (${layout.lines} line)`);
  assert.deepEqual(layout.split, [], "no name is broken across lines");
  await page.close();
});

test("an MCP tool's result is a source named by its server and tool; one naming a web address opens it", async () => {
  const page = await openPanel(browser, origin);
  const tool = (number: number, label: string, uri: string | null) => ({
    number, kind: "tool" as const, label, path: null, startLine: null, endLine: null, message: null, cited: true, supported: true, reason: "",
    origin: { server: "docs", tool: "fetch_page", arguments: { slug: "rollout" }, uri },
  });
  await post(page, { type: "user", text: "How long is a rollout?" }, { type: "replyStart" },
    { type: "replyEnd", text: "Five minutes [1], as the runbook says [2].", stopReason: "answer", sources: [
      tool(1, 'docs: fetch_page {"slug": "rollout"}', "https://docs.example.com/rollout"),
      tool(2, 'docs: fetch_page {"slug": "runbook"}', "javascript:alert(1)"),
    ] });
  await settle(page);
  assert.deepEqual(await texts(page, ".sources .source-kind"), ["MCP", "MCP"]);
  const [linked, unlinked] = [page.locator(".sources .source").nth(0), page.locator(".sources .source").nth(1)];
  assert.equal(await linked.isDisabled(), false);
  assert.equal(await linked.getAttribute("title"), "Open https://docs.example.com/rollout");
  await linked.click();
  assert.deepEqual((await posted(page)).at(-1), { type: "openUri", uri: "https://docs.example.com/rollout" });
  assert.equal(await unlinked.isDisabled(), true, "an address that is not a web page is not a link");
  await page.close();
});

test("a reopened session keeps its sources, notes unanswered questions and opens at the end of the last answer", async () => {
  const page = await openPanel(browser, origin, "light", { width: 420, height: 500 });
  const longAnswer = Array.from({ length: 30 }, (_, index) => `Paragraph ${index} about **billing** and \`port ${8100 + index}\`.\n\n\`\`\`yaml\nport: ${8100 + index}\n\`\`\``).join("\n\n");
  const sources = [{ number: 1, kind: "file" as const, label: "deploy/billing.yaml:3–5", path: "deploy/billing.yaml", startLine: 3, endLine: 5, message: null, cited: true, supported: true, reason: "" },
    { number: 2, kind: "file" as const, label: "src/app.py", path: "src/app.py", startLine: null, endLine: null, message: null, cited: false, supported: null, reason: "" }];
  await post(page, {
    type: "reset", title: "Billing", items: [
      { kind: "user", seq: 1, text: "Tell me a long story" },
      { kind: "unanswered", seq: 1 },
      { kind: "user", seq: 2, text: "Which port?" },
      { kind: "assistant", seq: 3, text: `${longAnswer}\n\nSources:\n[1] deploy/billing.yaml:3-5 (file)`, steps: [], sources },
    ],
  });
  await settle(page);
  await page.locator(".message.assistant").last().locator(".answer .code").first().waitFor();
  await settle(page);
  assert.equal((await page.locator(".message.unanswered .note-text").textContent()), "Stopped, or the reply failed: no answer was stored.");
  assert.equal(await page.locator(".message.assistant").last().locator(".sources .source").count(), 2);
  assert.deepEqual(await texts(page, ".sources .source-number"), ["1", "read"]);
  assert.ok(!(await page.locator(".message.assistant").last().locator(".answer").innerText()).includes("Sources:"));
  const gap = await page.locator("#transcript").evaluate((el) => el.scrollHeight - el.scrollTop - el.clientHeight);
  assert.ok(gap <= 2, `the transcript opens at its end (${gap}px short)`);

  // A stored message source scrolls to its message.
  await post(page, { type: "reveal", seq: 1 });
  await settle(page);
  const top = await page.evaluate(() => {
    const target = document.querySelector(".message[data-seq='1']")!.getBoundingClientRect().top;
    return target - document.getElementById("transcript")!.getBoundingClientRect().top;
  });
  assert.ok(Math.abs(top) < 20, `message #1 is at the top (${top}px)`);
  await page.close();
});

test("the end of a long answer and its sources stay in view when the reply ends, unless the reader scrolled away", async () => {
  const page = await openPanel(browser, origin, "light", { width: 420, height: 500 });
  const text = Array.from({ length: 25 }, (_, index) => `Finding ${index}: \`service-${index}\` listens on ${8000 + index}.`).join("\n\n");
  const sources = Array.from({ length: 6 }, (_, index) => ({
    number: index + 1, kind: "file" as const, label: `deploy/service-${index}.yaml:1–4`, path: `deploy/service-${index}.yaml`,
    startLine: 1, endLine: 4, message: null, cited: true, supported: true, reason: "",
  }));
  await post(page, { type: "user", text: "List the services" }, { type: "replyStart" }, { type: "busy", busy: true },
    { type: "delta", part: 0, text: "Looking." }, { type: "replyEnd", text, stopReason: "answer", sources }, { type: "busy", busy: false });
  await settle(page);
  await settle(page);
  const gap = await page.locator("#transcript").evaluate((el) => el.scrollHeight - el.scrollTop - el.clientHeight);
  assert.ok(gap <= 2, `the last source is in view (${gap}px below)`);

  // Scrolled up to read: a new reply's growth leaves the reader where they are.
  await page.locator("#transcript").evaluate((el) => { el.scrollTop = 0; el.dispatchEvent(new Event("scroll")); });
  await post(page, { type: "replyStart" }, { type: "delta", part: 0, text: text });
  await settle(page);
  assert.equal(await page.locator("#transcript").evaluate((el) => el.scrollTop), 0);
  await page.close();
});

test("research off: the panel says why and offers the way to turn it on", async () => {
  const page = await openPanel(browser, origin);
  assert.equal(await page.locator("#research").isVisible(), false);
  await post(page, { type: "research", state: "untrusted" });
  await settle(page);
  assert.equal(await page.locator("#research").isVisible(), true);
  assert.match(await page.locator("#research-text").innerText(), /not trusted/);
  assert.match(await page.locator("#empty-text").innerText(), /Restricted Mode/);
  assert.doesNotMatch(await page.locator("#empty").innerText(), /searches and reads the files of this folder/);
  await page.locator("#research-action").click();
  assert.deepEqual((await posted(page)).at(-1), { type: "manageTrust" });
  await page.screenshot({ path: path.join(OUTPUT_DIR, "panel-untrusted-light.png") });

  await post(page, { type: "research", state: "noFolder" });
  await settle(page);
  assert.equal(await page.locator("#research-action").innerText(), "Open Folder…");
  await page.locator("#research-action").click();
  assert.deepEqual((await posted(page)).at(-1), { type: "openFolder" });

  await post(page, { type: "research", state: "on" });
  await settle(page);
  assert.equal(await page.locator("#research").isVisible(), false);
  assert.match(await page.locator("#empty-text").innerText(), /searches and reads the files of this folder/);
  await page.close();
});

test("a reasoning model's thoughts fold into closed “Thinking” blocks, never into the answer, live and stored", async () => {
  const page = await openPanel(browser, origin);
  await post(page,
    { type: "reset", title: "New chat", items: [] },
    { type: "user", text: "Which port does billing use?" },
    { type: "replyStart" },
    { type: "reasoning", part: 0, text: "The user asks about billing. " },
    { type: "reasoning", part: 0, text: "I should **search**." },
    { type: "preamble", part: 0 },
    { type: "toolStep", callId: "step-1", title: "Searching the workspace for “billing port”", state: "started", detail: "" },
    { type: "toolStep", callId: "step-1", title: "Searching the workspace for “billing port”", state: "finished", detail: "" },
    { type: "reasoning", part: 1, text: "The config says 8101 <img src=x onerror=\"window.__pwned = 3\">." },
    { type: "delta", part: 1, text: "Billing listens on 8101." },
  );
  await settle(page);
  const live = page.locator(".message.streaming");
  assert.equal(await live.locator(".reasoning").count(), 2);
  assert.equal(await live.locator(".thinking").count(), 0, "a round that only thought leaves no empty preamble block");
  assert.deepEqual(await live.locator(".reasoning").evaluateAll((blocks) => blocks.map((b) => b.hasAttribute("open"))), [false, false]);
  assert.equal(await live.locator(".reasoning .thinking-text").first().isVisible(), false, "thoughts start folded");
  assert.equal((await live.locator(".reasoning summary").first().textContent())?.trim(), "Thinking");
  assert.equal(await live.locator(".reasoning .thinking-text strong").first().textContent(), "search");
  // The second round's thoughts come before its text, after the first round's step.
  const order = await live.locator(".flow > *").evaluateAll((children) => children.map((child) => child.className));
  assert.deepEqual(order, ["reasoning", "steps", "reasoning", "markdown answer"]);

  await post(page, { type: "replyEnd", text: "Billing listens on 8101.", sources: [], stopReason: "answer" });
  await settle(page);
  await page.locator(".reasoning summary").last().click(); // one opened, for a person to look at
  await page.screenshot({ path: path.join(OUTPUT_DIR, "panel-reasoning.png") });
  const answer = page.locator(".message.assistant").last();
  assert.equal((await answer.locator(".answer").innerText()).trim(), "Billing listens on 8101.");
  assert.equal(await answer.locator(".reasoning").count(), 2, "the thoughts stay, folded, once the answer is in");
  assert.equal(await page.locator("#transcript img").count(), 0);

  // A stored session shows the answer's thoughts folded above it.
  await post(page, {
    type: "reset", title: "Billing", items: [
      { kind: "user", seq: 1, text: "Which port?" },
      { kind: "assistant", seq: 4, text: "Port 8101.", steps: [], sources: [], reasoning: "I should search.\n\nIt says 8101." },
      { kind: "user", seq: 5, text: "Thanks" },
      { kind: "assistant", seq: 6, text: "You're welcome.", steps: [], sources: [] },
    ],
  });
  await settle(page);
  const stored = page.locator(".message.assistant");
  assert.equal(await stored.nth(0).locator(".reasoning").count(), 1);
  assert.equal(await stored.nth(0).locator(".reasoning").getAttribute("open"), null);
  assert.match(await stored.nth(0).locator(".reasoning .thinking-text").textContent() ?? "", /I should search\.\s*It says 8101\./);
  assert.equal(await stored.nth(1).locator(".reasoning").count(), 0);
  assert.equal(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned), undefined);
});

test("a long step title wraps beside its icon, never under it", async () => {
  const page = await openPanel(browser, origin, "light", { width: 260, height: 600 });
  const title = "Searching the workspace for “which port does the billing service listen on in staging”";
  await post(page, { type: "user", text: "Which port?" }, { type: "replyStart" },
    { type: "toolStep", callId: "call_0", title, state: "started", detail: "" },
    { type: "toolStep", callId: "call_0", title, state: "finished", detail: "" });
  await settle(page);
  const layout = await page.locator(".step").evaluate((row) => {
    const icon = row.querySelector(".step-icon")!.getBoundingClientRect();
    const text = row.querySelector(".step-title")!;
    const range = document.createRange();
    range.selectNodeContents(text);
    const lines = [...range.getClientRects()].filter((rect) => rect.width > 0);
    return { iconRight: icon.right, lefts: lines.map((rect) => rect.left), tops: new Set(lines.map((rect) => Math.round(rect.top))).size };
  });
  assert.ok(layout.tops >= 2, `the narrow panel wraps the title (${layout.tops} line)`);
  assert.ok(layout.lefts.every((left) => left > layout.iconRight), `every line starts right of the icon: ${JSON.stringify(layout)}`);
  await page.close();
});

test("a message a search result leads to is marked in view, and stays marked until the reader moves on", async () => {
  const page = await openPanel(browser, origin, "light", { width: 420, height: 500 });
  const items: TranscriptItem[] = [];
  for (let seq = 1; seq <= 20; seq += 2) {
    items.push({ kind: "user", seq, text: `Question ${seq} about billing?` },
      { kind: "assistant", seq: seq + 1, text: Array.from({ length: 6 }, (_, line) => `Answer ${seq + 1}, paragraph ${line}.`).join("\n\n"), steps: [], sources: [] });
  }
  await post(page, { type: "reset", title: "Billing", items });
  await settle(page);
  // Every timer the panel sets for a second or more can be fired at once: time passing, without waiting.
  await page.evaluate(() => {
    const long: (() => void)[] = [];
    const setTimer = window.setTimeout;
    (window as unknown as { setTimeout: unknown }).setTimeout = (handler: () => void, delay = 0, ...rest: unknown[]) =>
      delay >= 1000 ? long.push(handler) : setTimer(handler, delay, ...rest);
    (window as unknown as { __elapse: () => void }).__elapse = () => long.splice(0).forEach((handler) => handler());
  });
  await post(page, { type: "reveal", seq: 9 });
  await settle(page);
  await settle(page);

  const marked = page.locator(".message.revealed");
  assert.equal(await marked.getAttribute("data-seq"), "9");
  // A highlight of the message's own box: its background, not a hairline outline the transcript's edge cuts.
  const look = await marked.evaluate((el) => {
    const style = getComputedStyle(el);
    const box = el.getBoundingClientRect();
    const view = document.getElementById("transcript")!.getBoundingClientRect();
    return { background: style.backgroundColor, top: box.top - view.top, bottom: view.bottom - box.bottom };
  });
  assert.notEqual(look.background, "rgba(0, 0, 0, 0)", "the marked message has a background of its own");
  assert.ok(look.top >= 0 && look.top < 30, `the marked message is at the top, whole (${look.top}px)`);
  assert.ok(look.bottom >= 0, `the marked message ends in view (${look.bottom}px)`);
  await page.screenshot({ path: path.join(OUTPUT_DIR, "panel-revealed.png") });

  await page.evaluate(() => (window as unknown as { __elapse: () => void }).__elapse());
  await settle(page);
  assert.equal(await page.locator(".message.revealed").count(), 1, "still marked after time passed");

  // Moving on: a new question unmarks it; a click elsewhere unmarks the next one.
  await post(page, { type: "user", text: "And the gateway?" });
  await settle(page);
  assert.equal(await page.locator(".message.revealed").count(), 0);
  await post(page, { type: "reveal", seq: 3 });
  await settle(page);
  assert.equal(await page.locator(".message.revealed").getAttribute("data-seq"), "3");
  await page.locator(".message[data-seq='4'] .answer").click();
  assert.equal(await page.locator(".message.revealed").count(), 0);
  await page.close();
});
