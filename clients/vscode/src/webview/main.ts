/**
 * The chat panel inside the webview: renders the controller's `ToView` messages as a chat
 * transcript and sends the user's actions back as `FromView` messages.
 *
 * Plain DOM. Markdown goes through markdown-it with raw HTML off, so model text can never
 * become markup. Streamed text is re-rendered at most once per frame and only for the part
 * that changed, never the whole transcript per delta. The transcript stays scrolled to its
 * end while the reader is there, however its content grows (a rendered answer, a sources
 * list, a stored answer becoming markdown), and stays put once they scroll away.
 */

import MarkdownIt from "markdown-it";
import { contextWindow } from "../chat/models";
import { linkedUri } from "../chat/permissions";
import { withoutSourcesBlock } from "../chat/sources";
import type { FromView, ResearchState, StepRow, ToView, TranscriptItem } from "../chat/view";
import type { ContextUsage, SeqRanges, Source, Summary } from "../protocol";

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
const logEl = byId("log");
const emptyEl = byId("empty");
const input = byId("input") as HTMLTextAreaElement;
const sendButton = byId("send") as HTMLButtonElement;
const stopButton = byId("stop") as HTMLButtonElement;
const statusEl = byId("status");

/** One streamed text part of the reply in flight, and what the model thought before it. */
interface Part {
  el: HTMLElement;
  text: string;
  preamble: boolean;
  thought?: Thought;
}

/** A reasoning model's thoughts in a part: a collapsed "Thinking" block before the part's text. */
interface Thought {
  body: HTMLElement;
  text: string;
}

/** The assistant message being answered. */
interface LiveReply {
  article: HTMLElement;
  flow: HTMLElement;
  parts: Map<number, Part>;
  /** Each call id's latest row: a finished id that starts again is a new step (ids can repeat across rounds). */
  steps: Map<string, HTMLElement>;
  stepGroup: HTMLElement | undefined;
  progress: HTMLElement;
  dirty: Set<Part>;
  dirtyThoughts: Set<Thought>;
}

let live: LiveReply | undefined;
let busy = false;
let renderScheduled = false;
/** Whether the reader is at the transcript's end, where growing content keeps them. */
let pinned = true;

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

/** Pixels from the end within which the reader counts as at the end. */
const PIN_SLACK = 48;

function scrollToEnd(): void {
  if (pinned) transcriptEl.scrollTop = transcriptEl.scrollHeight;
}

function pinToEnd(): void {
  pinned = true;
  transcriptEl.scrollTop = transcriptEl.scrollHeight;
}

function append(el: HTMLElement): void {
  emptyEl.hidden = true;
  logEl.appendChild(el);
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

/** A source as the wire sends it, with what a daemon predating kinds and citations leaves out. */
function normalSource(source: Partial<Source> & { number: number }): Source {
  const path = source.path ?? null;
  const startLine = source.startLine ?? null, endLine = source.endLine ?? null;
  const lines = startLine === null ? "" : endLine === null || endLine === startLine ? `:${startLine}` : `:${startLine}–${endLine}`;
  return {
    number: source.number, kind: source.kind ?? "file", label: source.label || (path ? `${path}${lines}` : `Source ${source.number}`),
    path, startLine, endLine, message: source.message ?? null, cited: source.cited ?? true,
    supported: source.supported ?? null, reason: source.reason ?? "", origin: source.origin ?? null,
  };
}

const KIND_WORDS: Record<Source["kind"], string> = { file: "file", message: "message", section: "section", tool: "MCP" };

/** A label broken only after path separators and punctuation, never inside a name. */
function breakableLabel(label: string): HTMLElement {
  const span = element("span", "source-label");
  // The line range stays whole: Chromium may break after its en dash ("py:41–" / "42").
  const lines = /:\d+(?:–\d+)?$/.exec(label);
  const name = lines ? label.slice(0, lines.index) : label;
  for (const piece of name.split(/(?<=[/\\._-])/)) {
    span.append(piece, document.createElement("wbr"));
  }
  if (lines) span.append(element("span", "source-lines", lines[0]));
  return span;
}

/**
 * The clickable list: cited sources with their [n], then places read but not cited. A source
 * whose citing sentence shares nothing checkable with it is muted, its reason as the tooltip.
 */
function sourcesList(wireSources: Source[]): HTMLElement {
  const sources = wireSources.map(normalSource);
  const section = element("section", "sources");
  const cited = sources.filter((source) => source.cited), read = sources.filter((source) => !source.cited);
  section.appendChild(element("div", "sources-title", cited.length ? "Sources" : "Read, not cited"));
  const list = element("ol");
  for (const source of [...cited, ...read]) {
    const item = element("li", `source-item ${source.kind}${source.cited ? "" : " read"}${source.supported === false ? " unsupported" : ""}`);
    const button = element("button", "source");
    button.type = "button";
    button.dataset.kind = source.kind;
    if (source.path !== null) button.dataset.path = source.path;
    if (source.startLine !== null) button.dataset.start = String(source.startLine);
    if (source.endLine !== null) button.dataset.end = String(source.endLine);
    if (source.message !== null) button.dataset.message = String(source.message);
    const uri = source.path === null ? linkedUri(source.origin) : undefined;
    if (uri !== undefined) button.dataset.uri = uri;
    button.appendChild(element("span", "source-number", source.cited ? String(source.number) : "read"));
    button.appendChild(breakableLabel(source.label));
    button.appendChild(element("span", "source-kind", KIND_WORDS[source.kind] ?? source.kind));
    const opens = source.path !== null ? `Open ${source.path}${source.startLine !== null ? ` at line ${source.startLine}` : ""}`
      : source.message !== null ? `Show message #${source.message}` : uri !== undefined ? `Open ${uri}` : "";
    if (!opens) button.disabled = true;
    button.title = source.supported === false ? `${source.reason || "The citing sentence shares nothing checkable with this source."}${opens ? `\n${opens}` : ""}` : opens;
    if (source.supported === false) button.setAttribute("aria-description", source.reason);
    item.appendChild(button);
    list.appendChild(item);
  }
  section.appendChild(list);
  return section;
}

/** The answer's text, less the trailing "Sources:" block when the list shows them. */
function answerText(text: string, sources: Source[]): string {
  return sources.length ? withoutSourcesBlock(text) : text;
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
  return { article, flow, parts: new Map(), steps: new Map(), stepGroup: undefined, progress, dirty: new Set(), dirtyThoughts: new Set() };
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

/** The folded block a part's thoughts stream into, before its text (and its steps). */
function reasoningBlock(text: string): { details: HTMLElement; body: HTMLElement } {
  const details = element("details", "reasoning");
  details.appendChild(element("summary", undefined, "Thinking"));
  const body = element("div", "markdown thinking-text");
  if (text) renderMarkdown(body, text);
  details.appendChild(body);
  return { details, body };
}

function onReasoning(index: number, text: string): void {
  const reply = (live ??= startReply());
  const part = partOf(reply, index);
  if (!part.thought) {
    const { details, body } = reasoningBlock("");
    part.el.before(details);
    part.thought = { body, text: "" };
  }
  part.thought.text += text;
  reply.dirtyThoughts.add(part.thought);
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
  // The daemon streams its "Sources:" block too; the list that comes with the result shows it.
  for (const part of live.dirty) {
    if (part.preamble) renderMarkdown(part.el.querySelector(".thinking-text") as HTMLElement, part.text);
    else renderMarkdown(part.el, withoutSourcesBlock(part.text));
  }
  live.dirty.clear();
  for (const thought of live.dirtyThoughts) renderMarkdown(thought.body, thought.text);
  live.dirtyThoughts.clear();
  scrollToEnd();
}

/** A part that turned out not to be the answer folds into a muted "Thinking" block. */
function onPreamble(index: number): void {
  const reply = live;
  const part = reply?.parts.get(index);
  if (!reply || !part || part.preamble) return;
  if (!part.text) {
    // A round that only thought, then called tools: its thoughts stay folded, there is no text to fold.
    part.el.remove();
    part.preamble = true;
    reply.dirty.delete(part);
    return;
  }
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
  if (existing && !(step.state === "started" && !existing.classList.contains("started"))) {
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
  renderMarkdown(answer, answerText(text, sources));
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

/** Growing content keeps a pinned reader at the end; only their own scrolling unpins them. */
new ResizeObserver(() => scrollToEnd()).observe(logEl);

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
      html.push(`<article class="message user" data-seq="${item.seq}"><div class="role">You</div><div class="bubble markdown">${userMarkdown.render(item.text)}</div></article>`);
    } else if (item.kind === "unanswered") {
      html.push(`<article class="message assistant unanswered"><div class="role">Imprint</div>` +
        `<div class="note cancelled"><span class="note-text">Stopped, or the reply failed: no answer was stored.</span></div></article>`);
    } else if (item.kind === "summary") {
      const { firstSeq, lastSeq, text } = item.summary;
      html.push(`<details class="summary-divider"><summary>Earlier conversation summarized: #${firstSeq}–#${lastSeq}</summary>` +
        `<div class="markdown summary-text">${markdown.render(text)}</div></details>`);
    } else {
      const thought = item.reasoning
        ? `<details class="reasoning"><summary>Thinking</summary><div class="markdown thinking-text">${markdown.render(item.reasoning)}</div></details>`
        : "";
      html.push(`<article class="message assistant" data-seq="${item.seq}"><div class="role">Imprint</div><div class="flow">` +
        `${thought}${stepsHtml(item.steps)}<div class="markdown answer pending">${escape(answerText(item.text, item.sources))}</div></div></article>`);
    }
  }
  if (items.length) emptyEl.hidden = true;
  const before = logEl.children.length;
  logEl.insertAdjacentHTML("beforeend", html.join(""));
  const added = [...logEl.children].slice(before);
  const answers = items.filter((item) => item.kind === "assistant");
  const articles = added.filter((child) => child.matches(".message.assistant:not(.unanswered)"));
  articles.forEach((article, index) => {
    const { text, sources } = answers[index];
    const el = article.querySelector(".answer.pending")!;
    pendingMarkdown.set(el, answerText(text, sources));
    markdownWhenVisible.observe(el);
    // Few answers cite; their lists are built as elements, like a live reply's.
    if (sources.length) article.appendChild(sourcesList(sources));
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
  revealed = undefined;
  markdownWhenVisible.disconnect();
  pendingMarkdown.clear();
  logEl.replaceChildren();
  emptyEl.hidden = false;
  renderItems(items);
  pinToEnd();
}

/** The message a search result or a message source led to, marked until the reader moves on. */
let revealed: HTMLElement | undefined;

function unmarkRevealed(): void {
  revealed?.classList.remove("revealed");
  revealed = undefined;
}

/**
 * A search result or a message source: the message, scrolled to its top and marked until the
 * reader moves on (another message revealed, a new question, another session, a click elsewhere).
 */
function reveal(seq: number): boolean {
  const target = logEl.querySelector<HTMLElement>(`.message[data-seq="${seq}"]`);
  if (!target) return false;
  unmarkRevealed();
  pinned = false;
  target.classList.add("revealed");
  revealed = target;
  target.scrollIntoView({ block: "start" });
  // Messages above it take their real height as they render near the viewport: scroll again once they have.
  requestAnimationFrame(() => {
    if (revealed === target) target.scrollIntoView({ block: "start" });
  });
  return true;
}

// -- the header: what fills the context ------------------------------------------------------

const headerEl = byId("header");
const meterButton = byId("meter") as HTMLButtonElement;
const meterDetails = byId("meter-details");

function thousands(tokens: number): string {
  return tokens < 1000 ? String(tokens) : `${(tokens / 1000).toFixed(tokens < 10_000 ? 1 : 0)}k`;
}

function ranges(list: SeqRanges): string {
  return list.length ? list.map(([first, last]) => (first === last ? `#${first}` : `#${first}–#${last}`)).join(", ") : "none";
}

const PART_NAMES: [keyof ContextUsage["parts"], string][] = [
  ["system", "System prompt"], ["tools", "Tool schemas"], ["summary", "Summary"], ["earlier", "Earlier messages"],
  ["question", "Question"], ["research", "This reply's research"],
];

function showContext(usage: ContextUsage | null): void {
  headerEl.hidden = !usage;
  if (!usage) {
    meterDetails.hidden = true;
    meterButton.setAttribute("aria-expanded", "false");
    return;
  }
  const share = usage.nCtx ? usage.used / usage.nCtx : 0;
  const about = usage.exact ? "" : "≈";
  byId("meter-fill").style.width = `${Math.min(100, share * 100)}%`;
  byId("meter-kept").style.width = `${Math.min(100, (usage.outputAllowance / Math.max(1, usage.nCtx)) * 100)}%`;
  byId("meter-text").textContent = `${about}${thousands(usage.used)} / ${thousands(usage.nCtx)} tokens`;
  meterButton.classList.toggle("full", usage.used + usage.outputAllowance > usage.nCtx * 0.9);
  // A served model's own window, smaller than chat.n_ctx: said where it comes from.
  const window = usage.nCtxSource && usage.nCtxSource !== "chat.n_ctx" ? contextWindow(usage.nCtx, usage.nCtxSource) : "";
  const lines = [
    `${about}${usage.used} of ${usage.nCtx} tokens in use (${Math.round(share * 100)}%), ${usage.outputAllowance} kept for the answer`,
    ...(window ? [window.charAt(0).toUpperCase() + window.slice(1)] : []),
    ...PART_NAMES.map(([key, name]) => `${name}: ${about}${usage.parts[key] ?? 0}`),
    `In view: ${ranges(usage.inView)} · summarized: ${ranges(usage.summarized)} · dropped: ${ranges(usage.dropped)}`,
    usage.exact ? "Counted with the model's tokenizer." : "Estimated (a remote model's tokenizer is not known here).",
  ];
  meterButton.title = lines.join("\n");
  meterButton.setAttribute("aria-label", `Context: ${lines[0]}. Show the breakdown.`);
  const table = element("dl", "meter-parts");
  for (const [key, name] of PART_NAMES) table.append(element("dt", undefined, name), element("dd", undefined, `${about}${usage.parts[key] ?? 0}`));
  table.append(element("dt", undefined, "Kept for the answer"), element("dd", undefined, String(usage.outputAllowance)));
  meterDetails.replaceChildren(
    element("div", "meter-summary", lines[0]),
    ...(window ? [element("div", "meter-ranges meter-window", lines[1])] : []),
    table,
    element("div", "meter-ranges", `Messages in view: ${ranges(usage.inView)}`),
    element("div", "meter-ranges", `Summarized: ${ranges(usage.summarized)}`),
    element("div", "meter-ranges", `Dropped: ${ranges(usage.dropped)}`),
    element("div", "meter-note", lines.at(-1)!),
  );
}

// -- research on or off ----------------------------------------------------------------------

const RESEARCH: Record<ResearchState, { empty: string; banner: string; action: string; message?: FromView }> = {
  on: { empty: "Imprint searches and reads the files of this folder and remembers the conversation.", banner: "", action: "" },
  untrusted: {
    empty: "This folder is not trusted (Restricted Mode), so Imprint answers without searching or reading its files.",
    banner: "Research is off: this folder is not trusted, so Imprint does not read its files.",
    action: "Trust Folder…", message: { type: "manageTrust" },
  },
  noFolder: {
    empty: "No folder is open, so Imprint answers without searching or reading files.",
    banner: "Research is off: open a folder for Imprint to search and read.",
    action: "Open Folder…", message: { type: "openFolder" },
  },
};

let research: ResearchState = "on";

function showResearch(state: ResearchState): void {
  research = RESEARCH[state] ? state : "on";
  const words = RESEARCH[research];
  byId("empty-text").textContent = words.empty;
  byId("research").hidden = research === "on";
  byId("research-text").textContent = words.banner;
  byId("research-action").textContent = words.action;
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
  pinToEnd();
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
  if (revealed && !revealed.contains(target)) unmarkRevealed();
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
    const { path, start, end, message, uri } = source.dataset;
    if (uri !== undefined) {
      vscode.postMessage({ type: "openUri", uri });
    } else if (path !== undefined) {
      vscode.postMessage({
        type: "openSource", path, startLine: start === undefined ? null : Number(start), endLine: end === undefined ? null : Number(end),
      });
    } else if (message !== undefined && !reveal(Number(message))) {
      vscode.postMessage({ type: "revealMessage", seq: Number(message) });
    }
    return;
  }
  if (target.closest("button.retry")) vscode.postMessage({ type: "retry" });
}

// -- messages from the extension -------------------------------------------------------------

function onMessage(message: ToView): void {
  switch (message.type) {
    case "reset": reset(message.items); break;
    case "user": unmarkRevealed(); append(userMessage(message.text)); pinToEnd(); break;
    case "replyStart": live = startReply(); scrollToEnd(); break;
    case "delta": onDelta(message.part, message.text); break;
    case "preamble": onPreamble(message.part); break;
    case "reasoning": onReasoning(message.part, message.text); break;
    case "toolStep": onToolStep(message); break;
    case "progress": onProgress(message.message, message.percentage, message.done); break;
    case "summary": insertSummary(message.summary); break;
    case "replyEnd": finishReply(message.text, message.sources); break;
    case "replyCancelled": replyNote("note cancelled", "Stopped.", false); break;
    case "replyError": replyNote("error", message.message, true); break;
    case "busy": setBusy(message.busy); break;
    case "status":
      statusEl.textContent = message.status === "ready" || message.status === "answering" ? ""
        : message.status === "starting" ? message.detail || "Starting Imprint…" : message.detail || "Imprint is not running";
      statusEl.className = `status ${message.status}`;
      break;
    case "draft": input.value = message.text; saveDraft(); autosize(); input.focus(); break;
    case "research": showResearch(message.state); break;
    case "context": showContext(message.usage); break;
    case "reveal": reveal(message.seq); break;
  }
}

window.addEventListener("message", (event: MessageEvent<ToView>) => onMessage(event.data));
byId("composer").addEventListener("submit", (event) => { event.preventDefault(); send(); });
input.addEventListener("keydown", onKeyDown);
input.addEventListener("input", () => { saveDraft(); autosize(); });
stopButton.addEventListener("click", () => vscode.postMessage({ type: "stop" }));
transcriptEl.addEventListener("click", onClick);
transcriptEl.addEventListener("scroll", () => {
  pinned = transcriptEl.scrollHeight - transcriptEl.scrollTop - transcriptEl.clientHeight < PIN_SLACK;
}, { passive: true });
meterButton.addEventListener("click", () => {
  meterDetails.hidden = !meterDetails.hidden;
  meterButton.setAttribute("aria-expanded", String(!meterDetails.hidden));
});
byId("research-action").addEventListener("click", () => {
  const action = RESEARCH[research].message;
  if (action) vscode.postMessage(action);
});

input.value = vscode.getState()?.draft ?? "";
autosize();
vscode.postMessage({ type: "ready" });
