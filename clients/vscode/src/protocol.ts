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
export const TOOL_STEP = "imprint/toolStep";
export const SUMMARY_UPDATED = "imprint/summaryUpdated";

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

export interface Source {
  number: number;
  label: string;
  path: string;
  startLine: number;
  endLine: number;
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
}

export interface SessionResult {
  session: SessionInfo;
  messages: StoredMessage[];
  summary: Summary | null;
}

export interface DeleteSessionResult {
  sessionId: string;
  deleted: boolean;
}
