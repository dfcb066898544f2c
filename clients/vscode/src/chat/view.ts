/**
 * Messages between the extension host and the chat webview (both directions).
 *
 * The controller speaks only these to the panel, so the panel can be driven in a plain
 * browser by a script and the controller tested without one.
 */

import type { Source, StopReason, Summary, ToolStepState } from "../protocol";

/** A message of a transcript restored from `imprint/session`. */
export type TranscriptItem =
  | { kind: "user"; seq: number; text: string }
  | { kind: "assistant"; seq: number; text: string; steps: StepRow[] }
  | { kind: "summary"; summary: Summary };

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
  | ({ type: "toolStep" } & StepRow)
  | { type: "progress"; message: string; percentage?: number; done: boolean }
  | { type: "summary"; summary: Summary }
  | { type: "replyEnd"; text: string; sources: Source[]; stopReason: StopReason }
  | { type: "replyCancelled" }
  | { type: "replyError"; message: string; code?: number }
  | { type: "busy"; busy: boolean }
  | { type: "status"; status: ConnectionStatus; detail: string }
  | { type: "draft"; text: string };

export type ConnectionStatus = "starting" | "ready" | "answering" | "error";

export type FromView =
  | { type: "ready" }
  | { type: "send"; text: string }
  | { type: "stop" }
  | { type: "retry" }
  | { type: "newChat" }
  | { type: "openSource"; path: string; startLine: number; endLine: number };
