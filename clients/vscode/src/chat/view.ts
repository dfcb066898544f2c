/**
 * Messages between the extension host and the chat webview (both directions).
 *
 * The controller speaks only these to the panel, so the panel can be driven in a plain
 * browser by a script and the controller tested without one.
 */

import type { ContextUsage, Source, StopReason, Summary, ToolStepState } from "../protocol";

/** A message of a transcript restored from `imprint/session`. */
export type TranscriptItem =
  | { kind: "user"; seq: number; text: string }
  /** `reasoning`: what a reasoning model thought on the way to this answer (absent when nothing), shown folded. */
  | { kind: "assistant"; seq: number; text: string; steps: StepRow[]; sources: Source[]; reasoning?: string }
  /** A question the session holds no answer to (stopped, or its reply failed). */
  | { kind: "unanswered"; seq: number }
  | { kind: "summary"; summary: Summary };

/**
 * Whether replies research the workspace: "on", or why not (an untrusted folder sends no folder
 * to the daemon; without a folder there is nothing to search).
 */
export type ResearchState = "on" | "untrusted" | "noFolder";

export interface StepRow {
  callId: string;
  title: string;
  state: ToolStepState;
  detail: string;
}

export type ToView =
  | { type: "reset"; title: string; items: TranscriptItem[] }
  | { type: "user"; text: string }
  | { type: "replyStart" }
  | { type: "delta"; part: number; text: string }
  | { type: "preamble"; part: number }
  /** A reasoning model's thoughts, in `part` before its text: folded, never the answer. */
  | { type: "reasoning"; part: number; text: string }
  | ({ type: "toolStep" } & StepRow)
  | { type: "progress"; message: string; percentage?: number; done: boolean }
  | { type: "summary"; summary: Summary }
  | { type: "replyEnd"; text: string; sources: Source[]; stopReason: StopReason }
  | { type: "replyCancelled" }
  | { type: "replyError"; message: string; code?: number }
  | { type: "busy"; busy: boolean }
  | { type: "status"; status: ConnectionStatus; detail: string }
  | { type: "draft"; text: string }
  | { type: "research"; state: ResearchState }
  /** What fills the context (the meter); null hides it (a new chat). */
  | { type: "context"; usage: ContextUsage | null }
  /** Scroll to the message with this seq (a message source was clicked). */
  | { type: "reveal"; seq: number };

export type ConnectionStatus = "starting" | "ready" | "answering" | "error";

export type FromView =
  | { type: "ready" }
  | { type: "send"; text: string }
  | { type: "stop" }
  | { type: "retry" }
  | { type: "newChat" }
  | { type: "openSource"; path: string; startLine: number | null; endLine: number | null }
  /** An MCP result's web address (http or https), opened outside the editor. */
  | { type: "openUri"; uri: string }
  /** A message source whose message the panel does not show with its seq (a reply of this session). */
  | { type: "revealMessage"; seq: number }
  | { type: "manageTrust" }
  | { type: "openFolder" };
