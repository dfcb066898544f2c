/** A scripted conversation as the controller would post it: every kind of panel update. */

import type { ToView } from "../../src/chat/view";
import type { ContextUsage, Source } from "../../src/protocol";

export const ANSWER = [
  "Billing listens on **port 8101** [1]; its client gives up after `7.5` seconds [2], as you said earlier [3].",
  "",
  "```python",
  "class BillingClient:",
  "    TIMEOUT_SECONDS = 7.5",
  "```",
].join("\n");

/** The daemon ends a written answer with this block; the panel shows the list instead. */
export const SOURCES_BLOCK = "\n\nSources:\n[1] deploy/billing.yaml:3-5 (file)\n[2] src/billing/client_configuration_defaults.py:41-42 (file)\n[3] message #1";

export const SOURCES: Source[] = [
  { number: 1, kind: "file", label: "deploy/billing.yaml:3–5", path: "deploy/billing.yaml", startLine: 3, endLine: 5, message: null, cited: true, supported: true, reason: "" },
  {
    number: 2, kind: "file", label: "src/billing/client_configuration_defaults.py:41–42", path: "src/billing/client_configuration_defaults.py",
    startLine: 41, endLine: 42, message: null, cited: true, supported: false,
    reason: "The citing sentence shares no number, identifier or quoted string with lines 41–42.",
  },
  { number: 3, kind: "message", label: "Your message #1", path: null, startLine: null, endLine: null, message: 1, cited: true, supported: true, reason: "" },
];

/** imprint/contextUsage of the reply's second round (C2's example numbers). */
export const USAGE: ContextUsage = {
  sessionId: "5f0c", replyId: "a91e", nCtx: 8192, outputAllowance: 1024, exact: true, used: 5310,
  parts: { system: 410, tools: 1210, summary: 300, earlier: 2890, question: 150, research: 350 },
  inView: [[12, 40]], summarized: [[1, 11]], dropped: [],
};

export const CONVERSATION: ToView[] = [
  { type: "reset", title: "Billing", items: [] },
  { type: "status", status: "ready", detail: "" },
  { type: "user", text: "Which port does billing use, and how long does its client wait?" },
  { type: "replyStart" },
  { type: "busy", busy: true },
  { type: "delta", part: 0, text: "I'll search the deploy files " },
  { type: "delta", part: 0, text: "and the billing client first." },
  { type: "preamble", part: 0 },
  { type: "toolStep", callId: "call_0", title: "Searching the workspace for “billing port”", state: "started", detail: "" },
  { type: "context", usage: USAGE },
  { type: "progress", message: "Searching the workspace for “billing port”", percentage: 40, done: false },
  { type: "toolStep", callId: "call_0", title: "Searching the workspace for “billing port”", state: "finished", detail: "" },
  { type: "toolStep", callId: "call_1", title: "Reading ../etc/passwd", state: "started", detail: "" },
  { type: "toolStep", callId: "call_1", title: "Reading ../etc/passwd", state: "failed", detail: "Error: refused path '../etc/passwd': '..' segments are not allowed" },
  { type: "toolStep", callId: "call_2", title: "Reading src/billing/client.py", state: "started", detail: "" },
  { type: "toolStep", callId: "call_2", title: "Reading src/billing/client.py", state: "finished", detail: "" },
  { type: "summary", summary: { text: "- (#1–#2) The user pasted the compose file; billing runs on 8101.", firstSeq: 1, lastSeq: 12 } },
  { type: "delta", part: 1, text: "Billing listens on **port 8101** ([1]); " },
  { type: "delta", part: 1, text: "its client gives up after `7.5` seconds ([2])." },
  { type: "delta", part: 1, text: SOURCES_BLOCK },
  { type: "progress", message: "", done: true },
  {
    type: "replyEnd", text: ANSWER + SOURCES_BLOCK, stopReason: "answer", sources: SOURCES,
  },
  { type: "busy", busy: false },
  { type: "user", text: "And in staging?" },
  { type: "replyStart" },
  { type: "busy", busy: true },
  { type: "replyError", code: -32803, message: "The model could not be reached: connection refused (http://127.0.0.1:8080/v1)" },
  { type: "busy", busy: false },
];
