/**
 * Types of the imprintd wire contract (protocol.md at the repository root).
 *
 * Only what the extension sends or reads is typed here; field names are the wire's camelCase.
 */

export const CHAT = "imprint/chat";
export const SESSIONS = "imprint/sessions";
export const SESSION = "imprint/session";
export const DELETE_SESSION = "imprint/deleteSession";
export const REPLY_DELTA = "imprint/replyDelta";
export const REPLY_PREAMBLE = "imprint/replyPreamble";
export const REPLY_REASONING = "imprint/replyReasoning";
export const TOOL_STEP = "imprint/toolStep";
export const SUMMARY_UPDATED = "imprint/summaryUpdated";
export const CONTEXT = "imprint/context";
export const CONTEXT_USAGE = "imprint/contextUsage";
export const MODEL_CHANGED = "imprint/modelChanged";
export const SEARCH_CONVERSATIONS = "imprint/searchConversations";
export const RENAME_SESSION = "imprint/renameSession";
export const EXPORT = "imprint/export";
export const COMPACT = "imprint/compact";
export const MODELS = "imprint/models";
/** A request the daemon sends the client: may this tool call run? */
export const REQUEST_PERMISSION = "imprint/requestPermission";

/**
 * What the client says it can do, in `initialize`'s `capabilities.experimental`: it answers
 * `imprint/requestPermission` (without it the daemon takes every such call as rejected).
 */
export const CLIENT_EXPERIMENTAL = { imprint: { permissionRequests: true } };

/** The separator of an MCP tool's name: `git__git_log` is the tool `git_log` of the server `git`. */
export const MCP_SEPARATOR = "__";

export interface PermissionRequest {
  replyId: string;
  callId: string;
  server: string;
  tool: string;
  title: string;
  arguments: Record<string, unknown>;
  readOnly: boolean;
  destructive: boolean;
}

export type PermissionOutcome = "allow_once" | "allow_always" | "reject";

export interface PermissionResult {
  outcome: PermissionOutcome;
}

/** JSON-RPC error codes the client treats specially. */
export const REQUEST_CANCELLED = -32800;
export const REQUEST_FAILED = -32803;
export const INVALID_PARAMS = -32602;

export type Style = "written" | "spoken";
export type StopReason = "answer" | "length" | "token_budget" | "time_budget" | "no_new_evidence" | "context_full";

export interface ChatParams {
  text: string;
  sessionId?: string;
  style?: Style;
  persist?: boolean;
  workspace?: string;
  workDoneToken?: string | number;
}

export type SourceKind = "file" | "message" | "section" | "tool";

/** Where a `tool` source's result came from: an MCP server's tool, its arguments, the URI it names. */
export interface ToolOrigin {
  server: string;
  tool: string;
  arguments: Record<string, unknown>;
  uri: string | null;
}

/** A place an answer cites (or, with `cited: false`, read without citing). */
export interface Source {
  /** The `[n]` the answer's text uses. */
  number: number;
  kind: SourceKind;
  /** Human words to show, never a tool name. */
  label: string;
  /** Workspace-relative, or null (a message, a section of the user's message). */
  path: string | null;
  startLine: number | null;
  endLine: number | null;
  /** The seq of the message it is (kind "message") or is a section of. */
  message: number | null;
  cited: boolean;
  /** false: the citing sentence shares nothing checkable with the source; null: not cited. */
  supported: boolean | null;
  /** Why `supported` is false; "" otherwise. */
  reason: string;
  /** For an MCP tool's result (kind "tool", or notes on one); null otherwise (a daemon predating MCP leaves it out). */
  origin?: ToolOrigin | null;
}

export interface ChatResult {
  sessionId: string;
  replyId: string;
  text: string;
  sources: Source[];
  stopReason: StopReason;
}

export interface ReplyDelta {
  sessionId: string;
  replyId: string;
  /** The text part (0, 1, …); a part marked by `imprint/replyPreamble` was not the answer. */
  part: number;
  text: string;
}

/** What a reasoning model thought, in `part` before that part's text: shown folded, never as the answer. */
export interface ReplyReasoning {
  sessionId: string;
  replyId: string;
  part: number;
  text: string;
}

/** The text of `part` was not the answer: show it as muted "thinking" text. */
export interface ReplyPreamble {
  sessionId: string;
  replyId: string;
  part: number;
}

export type ToolStepState = "started" | "finished" | "failed";

export interface ToolStep {
  sessionId: string;
  replyId: string;
  callId: string;
  tool: string;
  title: string;
  state: ToolStepState;
  detail: string;
}

export interface Summary {
  text: string;
  firstSeq: number;
  lastSeq: number;
}

export interface SummaryUpdated {
  sessionId: string;
  replyId: string;
  summary: Summary;
}

export interface SessionInfo {
  sessionId: string;
  title: string;
  workspace: string | null;
  createdAt: number;
  updatedAt: number;
  messageCount: number;
  persist: boolean;
}

export interface SessionsResult {
  sessions: SessionInfo[];
}

export interface ToolCall {
  id: string;
  name: string;
  arguments: Record<string, unknown>;
}

export interface StoredMessage {
  seq: number;
  role: "user" | "assistant" | "tool";
  content: string;
  toolCalls: ToolCall[];
  toolCallId: string | null;
  name: string | null;
  /** An answer's sources; `[]` on other messages (absent from daemons that predate it). */
  sources?: Source[];
  /** What a reasoning model thought before writing this message; "" (or absent from older daemons) when nothing. */
  reasoning?: string;
}

export interface SessionResult {
  session: SessionInfo;
  messages: StoredMessage[];
  summary: Summary | null;
}

/** `imprint/searchConversations`: a page of messages found, best first. */
export interface SearchResult {
  query: string;
  hits: SearchHit[];
  nextOffset: number | null;
}

export interface SearchHit {
  sessionId: string;
  title: string;
  workspace: string | null;
  seq: number;
  role: "user" | "assistant" | "tool";
  createdAt: number;
  score: number;
  /** The words around the match, in order; `match` on the words the query matched. */
  snippet: { text: string; match: boolean }[];
}

export interface RenameSessionResult {
  session: SessionInfo;
}

export interface ExportResult {
  sessionId: string;
  format: "markdown" | "json";
  fileName: string;
  text: string;
}

export interface CompactResult {
  sessionId: string;
  compacted: boolean;
  summary: Summary | null;
  note: string;
}

/** A GGUF found on this machine (`imprint/models`). */
export interface ModelOnDisk {
  name: string;
  path: string;
  source: string;
  size: number;
  architecture: string | null;
  quantization: string | null;
  contextLength: number | null;
  hasChatTemplate: boolean;
  chatFormat: string | null;
  chat: boolean;
  reason: string;
}

export interface ModelsResult {
  /** The model in use, as `initialize` reports it. */
  current: ModelReport;
  models: ModelOnDisk[];
  /** With provider openai: the ids the server's /v1/models lists, and why it could not be asked. */
  served: string[];
  servedError: string;
}

export interface DeleteSessionResult {
  sessionId: string;
  deleted: boolean;
}

/** Message seq ranges `[first, last]`, ascending and disjoint. */
export type SeqRanges = [number, number][];

/** What fills the context of a round (`imprint/contextUsage`) or of the next question (`imprint/context`). */
export interface ContextUsage {
  sessionId: string;
  /** null for `imprint/context` (no reply asked). */
  replyId: string | null;
  nCtx: number;
  /** Where `nCtx` comes from: "chat.n_ctx", or what a served model's server said (absent from older daemons). */
  nCtxSource?: string;
  outputAllowance: number;
  /** Counted with the model's tokenizer (local), else estimated from UTF-8 bytes (remote). */
  exact: boolean;
  used: number;
  parts: { system: number; tools: number; summary: number; earlier: number; question: number; research: number };
  inView: SeqRanges;
  summarized: SeqRanges;
  dropped: SeqRanges;
}

/** `initialize`'s `capabilities.experimental.imprint`, and `imprint/modelChanged`. */
export interface ModelReport {
  provider: string;
  model: string;
  /** How the model is shown, the same string as its `imprint/models` entry's `name` (absent from older daemons: show `model`). */
  name?: string;
  /** The window prompts are fitted to: the smaller of chat.n_ctx and a served model's own. */
  nCtx: number;
  /** Where `nCtx` comes from: "chat.n_ctx", "llama-server /props n_ctx", "Ollama num_ctx parameter", … (absent from older daemons). */
  nCtxSource?: string;
  /** The window the model's server reported; null for a local model or a server that said nothing yet. */
  serverNCtx?: number | null;
  /** How the model writes tool calls and reasoning ("hermes", "qwen-xml", …, "openai"); null: not known (absent from older daemons). */
  chatFormat?: string | null;
  /** The model thinks before it answers (absent from older daemons). */
  reasons?: boolean;
}
