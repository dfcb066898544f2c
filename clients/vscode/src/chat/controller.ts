/**
 * The chat panel's logic: turns user actions into imprintd requests and the daemon's
 * notifications into panel updates (`ToView` messages).
 *
 * It knows nothing of VS Code: the extension wires it to a `LanguageClient` and a webview,
 * tests wire it to a plain `vscode-jsonrpc` connection to the real daemon and a recorder.
 */

import { CancellationTokenSource, ResponseError } from "vscode-jsonrpc";
import { ChatConnection, Disposable, WorkDoneProgressValue, workDoneProgress } from "./connection";
import { ConnectionStatus, FromView, ResearchState, StepRow, ToView, TranscriptItem } from "./view";
import { Prompt, askPermission, linkedUri, mcpCallFailed, mcpServerOf, stepTitleOf } from "./permissions";
import * as wire from "../protocol";

/** How long a question waits for a starting or restarting daemon before it fails. */
export const START_WAIT_MS = 60_000;

export interface ControllerOptions {
  /** Where panel updates go (the webview's postMessage, or a test's recorder). */
  post(message: ToView): void;
  /** The folder to research, or undefined (untrusted workspace, no folder open). */
  workspace(): string | undefined;
  /** Whether replies research the workspace, and if not why (the panel says so); "on" when omitted. */
  research?(): ResearchState;
  /** Opens a cited file at its lines (the editor); tests record it. */
  openSource?(path: string, startLine: number | null, endLine: number | null): void;
  /** Opens the web page an MCP result names (outside the editor); only http(s) addresses reach it. */
  openUri?(uri: string): void;
  /** Status changes, for the status bar. */
  onStatus?(status: ConnectionStatus, detail: string): void;
  /** The model the daemon reports (undefined: not reported), for the status bar; it names itself
   *  (`name`), as the model picker does. */
  onModel?(model: wire.ModelReport | undefined): void;
  /** The session the panel shows, kept so that a reloaded window opens it again. */
  rememberSession?(sessionId: string | undefined): void;
  /** A session to open once the daemon is running (the one a reloaded window showed). */
  restoreSession?: string;
  /** The panel's "Trust…" and "Open Folder…" actions. */
  manageTrust?(): void;
  openFolder?(): void;
  /** How long a question waits for the daemon to start (START_WAIT_MS). */
  startWaitMs?: number;
  /** Asks the user whether an MCP tool may run (the extension: a modal); without it every such call is rejected. */
  askPermission?: Prompt;
}

/** What an editor selection contributes to a question. */
export interface SelectionContext {
  path: string;
  startLine: number;
  endLine: number;
  text: string;
  languageId?: string;
}

interface Reply {
  question: string;
  /** The transcript the reply belongs to; a new chat or an opened session starts another. */
  transcript: number;
  cancel: CancellationTokenSource;
  sessionId?: string;
  replyId?: string;
  progress?: Disposable;
}

let progressTokens = 0;

export class ChatController {
  private connection: ChatConnection | undefined;
  private handlers: Disposable[] = [];
  private reply: Reply | undefined;
  private failedQuestion: string | undefined;
  /** Everything posted since the last reset, replayed when the webview (re)loads. */
  private transcript: ToView[] = [];
  private title = "New chat";
  private transcriptNumber = 0;
  private status: { status: ConnectionStatus; detail: string } = { status: "starting", detail: "" };
  private waiting: (() => void)[] = [];
  private restoring: string | undefined;
  private context: wire.ContextUsage | null = null;
  /** The model the daemon reports; undefined until it does (or when it does not). */
  model: wire.ModelReport | undefined;
  /** Sessions whose `imprint/compact` runs: the summary it sends belongs to no reply. */
  private compacting = new Set<string>();
  private session: string | undefined;

  constructor(private readonly options: ControllerOptions) {
    this.restoring = options.restoreSession;
  }

  /** The session the panel shows and continues; undefined for a new chat. */
  get sessionId(): string | undefined {
    return this.session;
  }

  set sessionId(sessionId: string | undefined) {
    if (sessionId === this.session) return;
    this.session = sessionId;
    this.options.rememberSession?.(sessionId);
  }

  get busy(): boolean {
    return this.reply !== undefined;
  }

  /**
   * Use `connection` from now on (a freshly started or restarted daemon); `initialize` is its
   * `initialize` result, whose `capabilities.experimental.imprint` names the model.
   */
  attach(connection: ChatConnection, initialize?: { capabilities?: { experimental?: unknown } }): Promise<void> {
    this.disposeHandlers();
    this.connection = connection;
    this.handlers = [
      connection.onNotification(wire.REPLY_DELTA, (p: wire.ReplyDelta) => this.onDelta(p)),
      connection.onNotification(wire.REPLY_PREAMBLE, (p: wire.ReplyPreamble) => this.onPreamble(p)),
      connection.onNotification(wire.REPLY_REASONING, (p: wire.ReplyReasoning) => this.onReasoning(p)),
      connection.onNotification(wire.TOOL_STEP, (p: wire.ToolStep) => this.onToolStep(p)),
      connection.onNotification(wire.SUMMARY_UPDATED, (p: wire.SummaryUpdated) => this.onSummary(p)),
      connection.onNotification(wire.CONTEXT_USAGE, (p: wire.ContextUsage) => this.onContextUsage(p)),
      connection.onNotification(wire.MODEL_CHANGED, (p: wire.ModelReport) => this.onModelChanged(connection, p)),
      connection.onRequest(wire.REQUEST_PERMISSION, (p: wire.PermissionRequest) => this.onPermission(p)),
    ];
    const experimental = initialize?.capabilities?.experimental as { imprint?: wire.ModelReport } | undefined;
    this.setModel(experimental?.imprint);
    this.setStatus(this.reply ? "answering" : "ready", "");
    for (const resolve of this.waiting.splice(0)) resolve();
    return this.restore();
  }

  /** Opens the session a reloaded window showed, once, unless the panel has moved on; resolves when done. */
  private async restore(): Promise<void> {
    const restoring = this.restoring;
    this.restoring = undefined;
    if (!restoring || this.sessionId || this.transcript.some((message) => message.type === "user")) return;
    try {
      await this.openSession(restoring);
    } catch {
      this.options.rememberSession?.(undefined); // deleted meanwhile: the panel stays a new chat
    }
  }

  /**
   * The daemon is gone; a reply in flight fails. `restarting`: a new one is on its way, and
   * questions wait for it (START_WAIT_MS); otherwise `reason` is an error the panel shows.
   */
  detach(reason: string, restarting = false): void {
    this.disposeHandlers();
    this.connection = undefined;
    this.setStatus(restarting ? "starting" : "error", reason);
    // A daemon that will not come (not found, stopping for good) fails waiting questions now.
    if (!restarting) for (const resolve of this.waiting.splice(0)) resolve();
  }

  /** Research turned on or off (workspace trust granted, a folder opened). */
  setResearch(): void {
    this.post({ type: "research", state: this.research() }, false);
  }

  private research(): ResearchState {
    return this.options.research?.() ?? "on";
  }

  /** A new model or window: the meter shows the open session's next question against it now, not
   *  after the next question; a running reply's next round reports its own. */
  private onModelChanged(connection: ChatConnection, model: wire.ModelReport): void {
    this.setModel(model);
    if (this.sessionId && !this.reply) void this.refreshContext(connection, this.sessionId);
  }

  private setModel(model: wire.ModelReport | undefined): void {
    this.model = model && typeof model.provider === "string" && typeof model.model === "string" ? model : undefined;
    this.options.onModel?.(this.model);
  }

  setStatus(status: ConnectionStatus, detail: string): void {
    this.status = { status, detail };
    this.options.onStatus?.(status, detail);
    this.post({ type: "status", status, detail }, false);
  }

  /** A message from the webview. */
  async handle(message: FromView): Promise<void> {
    switch (message.type) {
      case "ready":
        this.replay();
        break;
      case "send":
        await this.ask(message.text);
        break;
      case "stop":
        this.stop();
        break;
      case "retry":
        if (this.failedQuestion !== undefined) await this.ask(this.failedQuestion);
        break;
      case "newChat":
        this.newChat();
        break;
      case "openSource":
        this.options.openSource?.(message.path, message.startLine, message.endLine);
        break;
      case "openUri": {
        // Checked again here: the panel's messages are not trusted to have checked it.
        const uri = linkedUri({ server: "", tool: "", arguments: {}, uri: message.uri });
        if (uri) this.options.openUri?.(uri);
        break;
      }
      case "revealMessage":
        await this.revealMessage(message.seq);
        break;
      case "manageTrust":
        this.options.manageTrust?.();
        break;
      case "openFolder":
        this.options.openFolder?.();
        break;
    }
  }

  /** Asks `text` in the current session (a new one when there is none). Resolves when the reply ends. */
  async ask(text: string): Promise<void> {
    const question = text.trim();
    if (!question || this.reply) return;
    this.post({ type: "user", text: question });
    if (this.transcript.length === 1) this.title = firstLine(question);
    this.post({ type: "replyStart" });
    const reply: Reply = { question, transcript: this.transcriptNumber, cancel: new CancellationTokenSource(), sessionId: this.sessionId };
    this.reply = reply;
    this.post({ type: "busy", busy: true }, false);
    const connection = this.connection ?? await this.startedConnection(reply);
    if (!connection || !this.current(reply) || reply.cancel.token.isCancellationRequested) {
      reply.cancel.dispose();
      this.reply = undefined;
      this.post({ type: "busy", busy: false }, false);
      if (!this.current(reply)) return;
      if (reply.cancel.token.isCancellationRequested) this.post({ type: "replyCancelled" });
      else this.fail(question, this.status.status === "starting"
        ? `The Imprint daemon did not start within ${Math.round(this.startWaitMs() / 1000)} s. See “Imprint: Show Log”, then Retry.`
        : `The Imprint daemon is not running${this.status.detail ? ` (${this.status.detail})` : ""}. Use “Imprint: Restart Daemon” or check “Imprint: Show Log”.`);
      return;
    }
    const token = `imprint-vscode-${process.pid}-${++progressTokens}`;
    reply.progress = connection.onProgress(workDoneProgress, token, (value) => this.onProgress(value));
    this.failedQuestion = undefined;
    this.setStatus("answering", "");
    const params: wire.ChatParams = { text: question, workDoneToken: token };
    if (this.sessionId) params.sessionId = this.sessionId;
    const workspace = this.options.workspace();
    if (workspace) params.workspace = workspace;
    try {
      const result = await connection.sendRequest<wire.ChatResult>(wire.CHAT, params, reply.cancel.token);
      if (!this.current(reply)) return;
      this.sessionId = result.sessionId;
      this.post({ type: "replyEnd", text: result.text, sources: result.sources, stopReason: result.stopReason });
    } catch (error) {
      if (!this.current(reply)) return;
      // A reply that reached the daemon is in a session even when it failed (the question is stored).
      if (reply.sessionId) this.sessionId = reply.sessionId;
      if (error instanceof ResponseError && error.code === wire.REQUEST_CANCELLED) {
        this.post({ type: "replyCancelled" });
      } else {
        this.fail(question, describeError(error), error instanceof ResponseError ? error.code : undefined);
      }
    } finally {
      reply.progress?.dispose();
      reply.cancel.dispose();
      this.reply = undefined;
      this.post({ type: "progress", message: "", done: true }, false);
      this.post({ type: "busy", busy: false }, false);
      if (this.connection) this.setStatus("ready", "");
    }
  }

  /** The daemon once it has started, or undefined: it is not starting, or not within the wait. */
  private async startedConnection(reply: Reply): Promise<ChatConnection | undefined> {
    if (this.status.status !== "starting") return undefined;
    this.post({ type: "progress", message: "Waiting for the Imprint daemon to start…", done: false }, false);
    let timer: ReturnType<typeof setTimeout> | undefined;
    let onCancel: Disposable | undefined;
    await new Promise<void>((resolve) => {
      this.waiting.push(resolve);
      timer = setTimeout(resolve, this.startWaitMs());
      onCancel = reply.cancel.token.onCancellationRequested(() => resolve());
    });
    clearTimeout(timer);
    onCancel?.dispose();
    this.post({ type: "progress", message: "", done: true }, false);
    return this.connection;
  }

  private startWaitMs(): number {
    return this.options.startWaitMs ?? START_WAIT_MS;
  }

  /** Asks about an editor selection: its file name and lines go with the question. */
  askAboutSelection(question: string, selection: SelectionContext): Promise<void> {
    const fence = selection.text.includes("```") ? "````" : "```";
    const where = selection.startLine === selection.endLine
      ? `${selection.path}, line ${selection.startLine}`
      : `${selection.path}, lines ${selection.startLine}–${selection.endLine}`;
    const text = `${question.trim()}\n\nFrom ${where}:\n\n${fence}${selection.languageId ?? ""}\n${selection.text}\n${fence}`;
    return this.ask(text);
  }

  /** Cancels the reply in flight (`$/cancelRequest`); it ends with -32800. */
  stop(): void {
    this.reply?.cancel.cancel();
  }

  newChat(): void {
    this.stop();
    this.sessionId = undefined;
    this.failedQuestion = undefined;
    this.title = "New chat";
    this.reset([]);
    this.setContext(null);
  }

  async listSessions(): Promise<wire.SessionInfo[]> {
    const result = await this.require().sendRequest<wire.SessionsResult>(wire.SESSIONS, {});
    return result.sessions;
  }

  /** Shows a stored session (tool exchanges as collapsed step rows) and continues it. */
  async openSession(sessionId: string): Promise<void> {
    const connection = this.require();
    const result = await connection.sendRequest<wire.SessionResult>(wire.SESSION, { sessionId });
    this.stop();
    this.sessionId = sessionId;
    this.failedQuestion = undefined;
    await this.showStored(connection, result);
  }

  /** The panel shows `result` (the session it continues) as stored, with its meter. */
  private async showStored(connection: ChatConnection, result: wire.SessionResult): Promise<void> {
    this.title = result.session.title || "Chat";
    this.reset(transcriptOf(result));
    this.setContext(null);
    await this.refreshContext(connection, result.session.sessionId);
  }

  /** What the next question of `sessionId` would get, for the meter (a daemon without `imprint/context` shows none). */
  private async refreshContext(connection: ChatConnection, sessionId: string): Promise<void> {
    try {
      const usage = await connection.sendRequest<wire.ContextUsage>(wire.CONTEXT, { sessionId });
      if (sessionId === this.sessionId && !this.reply) this.setContext(usage);
    } catch {
      // Older daemons answer -32601; the meter stays hidden.
    }
  }

  /** A message source was clicked whose message the panel shows without its seq: show the stored session, then it. */
  private async revealMessage(seq: number): Promise<void> {
    if (!this.sessionId || this.reply || !this.connection) return;
    await this.openSession(this.sessionId);
    this.post({ type: "reveal", seq }, false);
  }

  /** Every stored conversation's messages matching `query`, best first (`imprint/searchConversations`). */
  async searchConversations(query: string, limit = 50): Promise<wire.SearchResult> {
    return this.require().sendRequest<wire.SearchResult>(wire.SEARCH_CONVERSATIONS, { query, limit });
  }

  /** Shows a stored session scrolled to message `seq`, highlighted (a search result chosen). */
  async openSessionAt(sessionId: string, seq: number): Promise<void> {
    await this.openSession(sessionId);
    this.post({ type: "reveal", seq }, false);
  }

  /** The open session as Markdown or JSON (`imprint/export`); undefined when none is open. */
  async exportSession(format: "markdown" | "json" = "markdown"): Promise<wire.ExportResult | undefined> {
    if (!this.sessionId) return undefined;
    return this.require().sendRequest<wire.ExportResult>(wire.EXPORT, { sessionId: this.sessionId, format });
  }

  /**
   * Writes the open session's running summary now (`imprint/compact`); undefined when none is open.
   * A summary written shows at once: the panel shows the session again as stored, the summary
   * before the first message it does not cover, the meter counted again (not while a reply runs:
   * then it shows when the session is next opened).
   */
  async compact(): Promise<wire.CompactResult | undefined> {
    const sessionId = this.sessionId;
    if (!sessionId) return undefined;
    const connection = this.require();
    const transcript = this.transcriptNumber;
    this.compacting.add(sessionId);
    let result: wire.CompactResult;
    try {
      result = await connection.sendRequest<wire.CompactResult>(wire.COMPACT, { sessionId });
    } finally {
      this.compacting.delete(sessionId);
    }
    if (result.compacted && transcript === this.transcriptNumber && !this.reply) {
      try {
        const stored = await connection.sendRequest<wire.SessionResult>(wire.SESSION, { sessionId });
        if (transcript === this.transcriptNumber && !this.reply) await this.showStored(connection, stored);
      } catch {
        // Deleted meanwhile, or the daemon stopped: the summary is written all the same.
      }
    }
    return result;
  }

  /** Renames the open session; its new info, or undefined when none is open. */
  async renameSession(title: string): Promise<wire.SessionInfo | undefined> {
    if (!this.sessionId) return undefined;
    const result = await this.require().sendRequest<wire.RenameSessionResult>(wire.RENAME_SESSION, {
      sessionId: this.sessionId,
      title,
    });
    this.title = result.session.title;
    return result.session;
  }

  /** The GGUF models found on this machine and the model in use (`imprint/models`). */
  async listModels(): Promise<wire.ModelsResult> {
    return this.require().sendRequest<wire.ModelsResult>(wire.MODELS, {});
  }

  async deleteSession(sessionId: string): Promise<void> {
    await this.require().sendRequest<wire.DeleteSessionResult>(wire.DELETE_SESSION, { sessionId });
    if (sessionId === this.sessionId) this.newChat();
  }

  dispose(): void {
    this.stop();
    this.disposeHandlers();
  }

  // -- notifications ------------------------------------------------------------------------

  /** True while the panel still shows the transcript `reply` was asked in. */
  private current(reply: Reply): boolean {
    return reply.transcript === this.transcriptNumber;
  }

  /** True when a notification belongs to the reply in flight (and adopts its ids). */
  private ours(params: { sessionId: string; replyId: string }): boolean {
    const reply = this.reply;
    if (!reply || !this.current(reply)) return false;
    if (reply.sessionId && params.sessionId !== reply.sessionId) return false;
    if (reply.replyId && params.replyId !== reply.replyId) return false;
    reply.sessionId = params.sessionId;
    reply.replyId = params.replyId;
    return true;
  }

  private onDelta(params: wire.ReplyDelta): void {
    if (this.ours(params)) this.post({ type: "delta", part: params.part, text: params.text });
  }

  private onPreamble(params: wire.ReplyPreamble): void {
    if (this.ours(params)) this.post({ type: "preamble", part: params.part });
  }

  private onReasoning(params: wire.ReplyReasoning): void {
    if (this.ours(params)) this.post({ type: "reasoning", part: params.part, text: params.text });
  }

  private onToolStep(params: wire.ToolStep): void {
    if (!this.ours(params)) return;
    this.post({ type: "toolStep", callId: params.callId, title: stepTitleOf(params.tool, params.title), state: params.state, detail: params.detail });
  }

  /** The daemon asks whether an MCP tool may run: only for the reply the panel shows, and only the user says yes. */
  private onPermission(params: wire.PermissionRequest): Promise<wire.PermissionResult> {
    // The reply's id is known by then: its first round's context usage comes before any tool call.
    const reply = this.reply;
    if (!reply || !this.current(reply) || params?.replyId !== reply.replyId) return Promise.resolve({ outcome: "reject" });
    return askPermission(this.options.askPermission, params);
  }

  private onSummary(params: wire.SummaryUpdated): void {
    // A compaction's summary belongs to no reply (a question asked meanwhile must not take its id): `compact` shows it.
    if (this.compacting.has(params.sessionId)) return;
    if (this.ours(params)) this.post({ type: "summary", summary: params.summary });
  }

  private onContextUsage(params: wire.ContextUsage): void {
    if (params.replyId !== null && this.ours({ sessionId: params.sessionId, replyId: params.replyId })) this.setContext(params);
  }

  private setContext(usage: wire.ContextUsage | null): void {
    this.context = usage;
    this.post({ type: "context", usage }, false);
  }

  private onProgress(value: WorkDoneProgressValue): void {
    if (value.kind === "end") {
      this.post({ type: "progress", message: "", done: true }, false);
    } else {
      this.post({ type: "progress", message: value.message ?? "", percentage: value.percentage, done: false }, false);
    }
  }

  // -- plumbing -----------------------------------------------------------------------------

  private fail(question: string, message: string, code?: number): void {
    this.failedQuestion = question;
    this.post({ type: "replyError", message, code });
  }

  private reset(items: TranscriptItem[]): void {
    this.transcriptNumber++;
    this.transcript = [];
    this.post({ type: "reset", title: this.title, items });
  }

  /** Posts to the panel; `keep` messages are replayed when the webview reloads. */
  private post(message: ToView, keep = true): void {
    if (keep) this.transcript.push(message);
    this.options.post(message);
  }

  private replay(): void {
    const kept = this.transcript[0]?.type === "reset" ? this.transcript : [{ type: "reset", title: this.title, items: [] } as ToView, ...this.transcript];
    for (const message of kept) this.options.post(message);
    this.options.post({ type: "busy", busy: this.busy });
    this.options.post({ type: "status", ...this.status });
    this.options.post({ type: "research", state: this.research() });
    this.options.post({ type: "context", usage: this.context });
  }

  private require(): ChatConnection {
    if (!this.connection) throw new Error("The Imprint daemon is not running.");
    return this.connection;
  }

  private disposeHandlers(): void {
    for (const handler of this.handlers) handler.dispose();
    this.handlers = [];
  }
}

/** A stored session as panel items: tool exchanges fold into their assistant turn's step rows. */
export function transcriptOf(result: wire.SessionResult): TranscriptItem[] {
  const items: TranscriptItem[] = [];
  const steps = new Map<string, StepRow>();
  /** The tool each row called (an MCP tool's failures are worded by its server and name). */
  const names = new Map<StepRow, string>();
  let pending: StepRow[] = [];
  /** What the model thought on the way to the next answer: its tool rounds' thoughts, then the answer's. */
  let thoughts: string[] = [];
  // A question followed by another question (or ending the session) was stopped or failed:
  // such replies store nothing but the question.
  let unanswered: number | undefined;
  /** The question a reply answered: its first look's step is titled with it, as live. */
  let question = "";
  for (const message of result.messages) {
    if (message.role === "user") {
      if (unanswered !== undefined) items.push({ kind: "unanswered", seq: unanswered });
      unanswered = message.seq;
      question = message.content;
      pending = [];
      thoughts = [];
      items.push({ kind: "user", seq: message.seq, text: message.content });
    } else if (message.role === "tool") {
      const step = message.toolCallId ? steps.get(message.toolCallId) : undefined;
      if (step && message.content.startsWith(REPEATED_CALL)) {
        // A repeat of an earlier identical call was answered from it: the live reply showed no step for it.
        pending = pending.filter((row) => row !== step);
      } else if (step && (message.content.startsWith("Error") || mcpCallFailed(names.get(step) ?? "", message.content))) {
        step.state = "failed";
        step.detail = firstLine(message.content);
      }
    } else if (message.toolCalls.length > 0) {
      if (message.reasoning) thoughts.push(message.reasoning);
      for (const call of message.toolCalls) {
        const row: StepRow = { callId: call.id, title: stepTitle(call, question), state: "finished", detail: "" };
        names.set(row, call.name);
        steps.set(call.id, row);
        pending.push(row);
      }
    } else {
      unanswered = undefined;
      if (message.reasoning) thoughts.push(message.reasoning);
      const answer: TranscriptItem = { kind: "assistant", seq: message.seq, text: message.content, steps: pending, sources: message.sources ?? [] };
      if (thoughts.length) answer.reasoning = thoughts.join("\n\n");
      items.push(answer);
      pending = [];
      thoughts = [];
    }
  }
  if (unanswered !== undefined) items.push({ kind: "unanswered", seq: unanswered });
  if (result.summary) {
    const at = items.findIndex((item) => item.kind !== "summary" && item.kind !== "unanswered" && item.seq > result.summary!.lastSeq);
    const divider: TranscriptItem = { kind: "summary", summary: result.summary };
    if (at < 0) items.push(divider); else items.splice(at, 0, divider);
  }
  return items;
}

/** A stored tool call's row title, worded as the daemon words the live step (imprintd/tools). */
/** How the daemon stores a repeated call's result (imprintd/research/loop.py, REPEATED). */
const REPEATED_CALL = "(Same call as before; its result again.)";
/** The call id prefix of the daemon's own first look (imprintd/messages.py, FIRST_LOOK_CALL_PREFIX). */
const FIRST_LOOK_ID = "call_look";

/** A step title shows at most this many characters of the question (first_look.py, TITLE_CHARS). */
const LOOK_TITLE_CHARS = 80;

/** The first look's step title: the question as asked, on one line, cut as the daemon cuts it (first_look.step_title). */
function lookTitle(question: string): string {
  let asked = question.split(/\s+/).filter(Boolean).join(" ");
  const chars = Array.from(asked);
  if (chars.length > LOOK_TITLE_CHARS) asked = chars.slice(0, LOOK_TITLE_CHARS - 1).join("").trimEnd() + "…";
  return `Looking in the workspace for “${asked}”`;
}

function stepTitle(call: wire.ToolCall, question: string): string {
  const args = call.arguments ?? {};
  const text = (key: string) => (typeof args[key] === "string" ? (args[key] as string).trim() : "");
  // Worded as the live step was: the first look is Imprint's own search, titled with the question
  // (its query also carries words of the exchange before).
  if (call.id.startsWith(FIRST_LOOK_ID) && call.name === "search") return lookTitle(question);
  if (call.name === "search" && text("query")) return `Searching the workspace for “${text("query")}”`;
  if (call.name === "conversation_history" && text("query")) return `Searching earlier in this conversation for “${text("query")}”`;
  if (call.name === "read_file" && text("path")) {
    const { start_line: start, end_line: end } = args as { start_line?: number; end_line?: number };
    if (start !== undefined && end !== undefined) return `Reading ${text("path")} lines ${start}–${end}`;
    if (start !== undefined) return `Reading ${text("path")} from line ${start}`;
    if (end !== undefined) return `Reading ${text("path")} up to line ${end}`;
    return `Reading ${text("path")}`;
  }
  const server = mcpServerOf(call.name);
  if (server !== undefined) return `${server} · ${call.name.slice(server.length + wire.MCP_SEPARATOR.length)}`;
  return call.name;
}

function firstLine(text: string): string {
  const line = text.split("\n", 1)[0];
  return line.length > 80 ? `${line.slice(0, 79)}…` : line;
}

function describeError(error: unknown): string {
  if (error instanceof ResponseError) {
    if (error.code === -32097 /* PendingResponseRejected */ || /disposed|closed/i.test(error.message)) {
      return "The Imprint daemon stopped while answering. It is being restarted; your question is kept in the session.";
    }
    return error.message;
  }
  if (error instanceof Error) {
    if (/disposed|closed|EPIPE|not running/i.test(error.message)) {
      return "The Imprint daemon stopped while answering. It is being restarted; your question is kept in the session.";
    }
    return error.message;
  }
  return String(error);
}
