/**
 * The chat panel inside the webview: renders the controller's `ToView` messages as a chat
 * transcript and sends the user's actions back as `FromView` messages.
 *
 * Plain DOM. Markdown goes through markdown-it with raw HTML off, so model text can never
 * become markup. Streamed text is re-rendered at most once per frame and only for the part
 * that changed, never the whole transcript per delta.
 */

import MarkdownIt from "markdown-it";
import type { FromView, StepRow, ToView, TranscriptItem } from "../chat/view";
import type { Source, Summary } from "../protocol";

interface VsCodeApi {
  postMessage(message: FromView): void;
  getState(): PanelState | undefined;
  setState(state: PanelState): void;
}
interface PanelState {
  draft: string;
}
declare function acquireVsCodeApi(): VsCodeApi;

const vscode = acquireVsCodeApi();
const markdown = createMarkdown(false);
/** The user's own text keeps its line breaks (Shift+Enter), and a pasted selection its code block. */
const userMarkdown = createMarkdown(true);

const transcriptEl = byId("transcript");
const emptyEl = byId("empty");
const input = byId("input") as HTMLTextAreaElement;
const sendButton = byId("send") as HTMLButtonElement;
const stopButton = byId("stop") as HTMLButtonElement;
const statusEl = byId("status");

/** One streamed text part of the reply in flight. */
interface Part {
  el: HTMLElement;
  text: string;
  preamble: boolean;
}

/** The assistant message being answered. */
interface LiveReply {
  article: HTMLElement;
  flow: HTMLElement;
  parts: Map<number, Part>;
  steps: Map<string, HTMLElement>;
  stepGroup: HTMLElement | undefined;
  progress: HTMLElement;
  dirty: Set<Part>;
}

let live: LiveReply | undefined;
let busy = false;
let renderScheduled = false;

// -- rendering helpers -----------------------------------------------------------------------

function byId(id: string): HTMLElement {
  const el = document.getElementById(id);
  if (!el) throw new Error(`missing #${id}`);
  return el;
}

function element<K extends keyof HTMLElementTagNameMap>(tag: K, className?: string, text?: string): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text !== undefined) el.textContent = text;
  return el;
}

function createMarkdown(breaks: boolean): MarkdownIt {
  const md = new MarkdownIt({ html: false, linkify: true, breaks });
  md.renderer.rules.fence = (tokens, index) => {
    const token = tokens[index];
    const language = token.info.trim().split(/\s+/, 1)[0] ?? "";
    const escaped = md.utils.escapeHtml(token.content);
    const label = md.utils.escapeHtml(language || "text");
    return `<div class="code"><div class="code-bar"><span class="code-lang">${label}</span>` +
      `<button type="button" class="copy" aria-label="Copy code">Copy</button></div>` +
      `<pre><code>${escaped}</code></pre></div>`;
  };
  return md;
}

function renderMarkdown(el: HTMLElement, text: string): void {
  el.innerHTML = markdown.render(text);
}

function scrollToEnd(): void {
  const nearEnd = transcriptEl.scrollHeight - transcriptEl.scrollTop - transcriptEl.clientHeight < 120;
  if (nearEnd || busy) transcriptEl.scrollTop = transcriptEl.scrollHeight;
}

function append(el: HTMLElement): void {
  emptyEl.hidden = true;
  transcriptEl.appendChild(el);
}

function userMessage(text: string): HTMLElement {
  const article = element("article", "message user");
  article.appendChild(element("div", "role", "You"));
  const bubble = element("div", "bubble markdown");
  bubble.innerHTML = userMarkdown.render(text);
  article.appendChild(bubble);
  return article;
}

function assistantMessage(): { article: HTMLElement; flow: HTMLElement } {
  const article = element("article", "message assistant");
  article.appendChild(element("div", "role", "Imprint"));
  const flow = element("div", "flow");
  article.appendChild(flow);
  return { article, flow };
}

function stepRow(step: StepRow): HTMLElement {
  const row = element("div", `step ${step.state}`);
  row.dataset.callId = step.callId;
  updateStepRow(row, step);
  return row;
}

function updateStepRow(row: HTMLElement, step: StepRow): void {
  row.className = `step ${step.state}`;
  row.replaceChildren();
  const icon = { started: "", finished: "✓", failed: "✕" }[step.state];
  row.appendChild(element("span", "step-icon", icon)).setAttribute("aria-hidden", "true");
  row.appendChild(element("span", "step-title", step.title));
  const label = { started: "running", finished: "done", failed: "failed" }[step.state];
  row.appendChild(element("span", "visually-hidden", `, ${label}`));
  if (step.state === "failed" && step.detail) row.appendChild(element("div", "step-detail", step.detail));
}

function summaryDivider(summary: Summary): HTMLElement {
  const details = element("details", "summary-divider");
  details.appendChild(element("summary", undefined, `Earlier conversation summarized: #${summary.firstSeq}–#${summary.lastSeq}`));
  const body = element("div", "markdown summary-text");
  renderMarkdown(body, summary.text);
  details.appendChild(body);
  return details;
}

function sourcesList(sources: Source[]): HTMLElement {
  const section = element("section", "sources");
  section.appendChild(element("div", "sources-title", "Sources"));
  const list = element("ol");
  for (const source of sources) {
    const item = element("li");
    const button = element("button", "source");
    button.type = "button";
    button.dataset.path = source.path;
    button.dataset.start = String(source.startLine);
    button.dataset.end = String(source.endLine);
    button.appendChild(element("span", "source-number", String(source.number)));
    button.appendChild(element("span", "source-label", source.label || source.path));
    button.appendChild(element("span", "source-place", `${source.path}:${source.startLine}–${source.endLine}`));
    button.title = `Open ${source.path} at lines ${source.startLine}–${source.endLine}`;
    item.appendChild(button);
    list.appendChild(item);
  }
  section.appendChild(list);
  return section;
}

// -- the reply in flight ---------------------------------------------------------------------

function startReply(): LiveReply {
  const { article, flow } = assistantMessage();
  article.classList.add("streaming");
  article.setAttribute("aria-busy", "true");
  const progress = element("div", "progress");
  progress.hidden = true;
  article.appendChild(progress);
  append(article);
  return { article, flow, parts: new Map(), steps: new Map(), stepGroup: undefined, progress, dirty: new Set() };
}

function partOf(reply: LiveReply, index: number): Part {
  let part = reply.parts.get(index);
  if (!part) {
    const el = element("div", "markdown answer");
    reply.flow.appendChild(el);
    reply.stepGroup = undefined;
    part = { el, text: "", preamble: false };
    reply.parts.set(index, part);
  }
  return part;
}

function onDelta(index: number, text: string): void {
  const reply = (live ??= startReply());
  const part = partOf(reply, index);
  part.text += text;
  reply.dirty.add(part);
  scheduleRender();
}

function scheduleRender(): void {
  if (renderScheduled) return;
  renderScheduled = true;
  requestAnimationFrame(flushRender);
}

function flushRender(): void {
  renderScheduled = false;
  if (!live) return;
  for (const part of live.dirty) renderMarkdown(part.preamble ? (part.el.querySelector(".thinking-text") as HTMLElement) : part.el, part.text);
  live.dirty.clear();
  scrollToEnd();
}

/** A part that turned out not to be the answer folds into a muted "Thinking" block. */
function onPreamble(index: number): void {
  const reply = live;
  const part = reply?.parts.get(index);
  if (!reply || !part || part.preamble) return;
  const details = element("details", "thinking");
  details.appendChild(element("summary", undefined, "Thinking"));
  const body = element("div", "markdown thinking-text");
  renderMarkdown(body, part.text);
  details.appendChild(body);
  part.el.replaceWith(details);
  part.el = details;
  part.preamble = true;
  reply.dirty.delete(part);
}

function onToolStep(step: StepRow): void {
  const reply = (live ??= startReply());
  const existing = reply.steps.get(step.callId);
  if (existing) {
    updateStepRow(existing, step);
    return;
  }
  if (!reply.stepGroup) {
    reply.stepGroup = element("div", "steps");
    reply.flow.appendChild(reply.stepGroup);
  }
  const row = stepRow(step);
  reply.steps.set(step.callId, row);
  reply.stepGroup.appendChild(row);
  scrollToEnd();
}

function onProgress(message: string, percentage: number | undefined, done: boolean): void {
  const reply = live;
  if (!reply) return;
  reply.progress.hidden = done || !message;
  if (done) return;
  reply.progress.replaceChildren(element("span", "spinner"), element("span", "progress-text", message));
  if (percentage !== undefined) {
    const bar = element("span", "progress-bar");
    const fill = element("span", "progress-fill");
    fill.style.width = `${Math.max(0, Math.min(100, percentage))}%`;
    bar.appendChild(fill);
    reply.progress.append(element("span", "progress-percent", `${percentage}%`), bar);
  }
  scrollToEnd();
}

/** The result's text is the answer: it replaces every streamed part not marked preamble. */
function finishReply(text: string, sources: Source[]): void {
  const reply = (live ??= startReply());
  for (const part of reply.parts.values()) if (!part.preamble) part.el.remove();
  const answer = element("div", "markdown answer");
  renderMarkdown(answer, text);
  reply.flow.appendChild(answer);
  if (sources.length) reply.article.appendChild(sourcesList(sources));
  endReply();
}

function endReply(): void {
  if (!live) return;
  flushRender();
  live.progress.remove();
  live.article.classList.remove("streaming");
  live.article.removeAttribute("aria-busy");
  live = undefined;
  scrollToEnd();
}

function replyNote(className: string, text: string, retry: boolean): void {
  const reply = (live ??= startReply());
  const note = element("div", className);
  note.appendChild(element("span", "note-text", text));
  if (className === "error") note.setAttribute("role", "alert");
  if (retry) {
    const button = element("button", "button secondary retry", "Retry");
    button.type = "button";
    note.appendChild(button);
  }
  reply.article.appendChild(note);
  endReply();
}

/** A summary written during a reply covers earlier messages: its divider goes above the question. */
function insertSummary(summary: Summary): void {
  const divider = summaryDivider(summary);
  const question = live?.article.previousElementSibling;
  if (question?.classList.contains("user")) question.before(divider);
  else append(divider);
}

// -- restored transcripts --------------------------------------------------------------------

/** Stored answers shown as escaped text until they come near the viewport, then as markdown. */
const pendingMarkdown = new Map<Element, string>();
const markdownWhenVisible = new IntersectionObserver((entries) => {
  for (const entry of entries) {
    if (!entry.isIntersecting) continue;
    const text = pendingMarkdown.get(entry.target);
    markdownWhenVisible.unobserve(entry.target);
    pendingMarkdown.delete(entry.target);
    if (text === undefined) continue;
    entry.target.classList.remove("pending");
    renderMarkdown(entry.target as HTMLElement, text);
  }
}, { root: transcriptEl, rootMargin: "1000px 0px" });

/**
 * A stored session is built as one HTML string and parsed once, its answers as plain text that
 * becomes markdown as it nears the viewport: thousands of messages open in about the time of
 * inserting their plain text. Every text is escaped or rendered by markdown-it with raw HTML off.
 */
function renderItems(items: TranscriptItem[]): void {
  const escape = markdown.utils.escapeHtml;
  const html: string[] = [];
  for (const item of items) {
    if (item.kind === "user") {
      html.push(`<article class="message user"><div class="role">You</div><div class="bubble markdown">${userMarkdown.render(item.text)}</div></article>`);
    } else if (item.kind === "summary") {
      const { firstSeq, lastSeq, text } = item.summary;
      html.push(`<details class="summary-divider"><summary>Earlier conversation summarized: #${firstSeq}–#${lastSeq}</summary>` +
        `<div class="markdown summary-text">${markdown.render(text)}</div></details>`);
    } else {
      html.push(`<article class="message assistant"><div class="role">Imprint</div><div class="flow">` +
        `${stepsHtml(item.steps)}<div class="markdown answer pending">${escape(item.text)}</div></div></article>`);
    }
  }
  if (items.length) emptyEl.hidden = true;
  const before = transcriptEl.children.length;
  transcriptEl.insertAdjacentHTML("beforeend", html.join(""));
  const answers = items.filter((item) => item.kind === "assistant").map((item) => item.text);
  const pending = [...transcriptEl.children].slice(before).flatMap((child) => [...child.querySelectorAll(".answer.pending")]);
  pending.forEach((el, index) => {
    pendingMarkdown.set(el, answers[index]);
    markdownWhenVisible.observe(el);
  });
}

function stepsHtml(steps: StepRow[]): string {
  if (!steps.length) return "";
  const escape = markdown.utils.escapeHtml;
  const rows = steps.map((step) => {
    const icon = step.state === "failed" ? "✕" : "✓";
    const detail = step.state === "failed" && step.detail ? `<div class="step-detail">${escape(step.detail)}</div>` : "";
    return `<div class="step ${step.state}"><span class="step-icon" aria-hidden="true">${icon}</span>` +
      `<span class="step-title">${escape(step.title)}</span>${detail}</div>`;
  });
  const label = steps.length === 1 ? "1 tool step" : `${steps.length} tool steps`;
  return `<details class="steps-collapsed"><summary>${label}</summary><div class="steps">${rows.join("")}</div></details>`;
}

function reset(items: TranscriptItem[]): void {
  live = undefined;
  markdownWhenVisible.disconnect();
  pendingMarkdown.clear();
  for (const child of [...transcriptEl.children]) if (child !== emptyEl) child.remove();
  emptyEl.hidden = false;
  renderItems(items);
  transcriptEl.scrollTop = transcriptEl.scrollHeight;
}

// -- composer --------------------------------------------------------------------------------

function setBusy(value: boolean): void {
  busy = value;
  stopButton.hidden = !value;
  sendButton.disabled = value;
  document.body.classList.toggle("busy", value);
}

function saveDraft(): void {
  vscode.setState({ draft: input.value });
}

function autosize(): void {
  input.style.height = "auto";
  input.style.height = `${Math.min(input.scrollHeight, 240)}px`;
}

function send(): void {
  const text = input.value.trim();
  if (!text || busy) return;
  vscode.postMessage({ type: "send", text });
  input.value = "";
  saveDraft();
  autosize();
}

function onKeyDown(event: KeyboardEvent): void {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send();
  } else if (event.key === "Escape" && busy) {
    event.preventDefault();
    vscode.postMessage({ type: "stop" });
  }
}

function onClick(event: MouseEvent): void {
  const target = event.target as HTMLElement;
  const copy = target.closest<HTMLButtonElement>("button.copy");
  if (copy) {
    const code = copy.closest(".code")?.querySelector("code")?.textContent ?? "";
    void navigator.clipboard?.writeText(code).then(() => {
      copy.textContent = "Copied";
      setTimeout(() => (copy.textContent = "Copy"), 1500);
    });
    return;
  }
  const source = target.closest<HTMLButtonElement>("button.source");
  if (source) {
    vscode.postMessage({
      type: "openSource", path: source.dataset.path ?? "",
      startLine: Number(source.dataset.start), endLine: Number(source.dataset.end),
    });
    return;
  }
  if (target.closest("button.retry")) vscode.postMessage({ type: "retry" });
}

// -- messages from the extension -------------------------------------------------------------

function onMessage(message: ToView): void {
  switch (message.type) {
    case "reset": reset(message.items); break;
    case "user": append(userMessage(message.text)); scrollToEnd(); break;
    case "replyStart": live = startReply(); scrollToEnd(); break;
    case "delta": onDelta(message.part, message.text); break;
    case "preamble": onPreamble(message.part); break;
    case "toolStep": onToolStep(message); break;
    case "progress": onProgress(message.message, message.percentage, message.done); break;
    case "summary": insertSummary(message.summary); break;
    case "replyEnd": finishReply(message.text, message.sources); break;
    case "replyCancelled": replyNote("note cancelled", "Stopped.", false); break;
    case "replyError": replyNote("error", message.message, true); break;
    case "busy": setBusy(message.busy); break;
    case "status":
      statusEl.textContent = message.status === "ready" || message.status === "answering" ? "" : message.status === "starting" ? "Starting Imprint…" : message.detail || "Imprint is not running";
      statusEl.className = `status ${message.status}`;
      break;
    case "draft": input.value = message.text; saveDraft(); autosize(); input.focus(); break;
  }
}

window.addEventListener("message", (event: MessageEvent<ToView>) => onMessage(event.data));
byId("composer").addEventListener("submit", (event) => { event.preventDefault(); send(); });
input.addEventListener("keydown", onKeyDown);
input.addEventListener("input", () => { saveDraft(); autosize(); });
stopButton.addEventListener("click", () => vscode.postMessage({ type: "stop" }));
transcriptEl.addEventListener("click", onClick);

input.value = vscode.getState()?.draft ?? "";
autosize();
vscode.postMessage({ type: "ready" });
