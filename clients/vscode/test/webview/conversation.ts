/** A scripted conversation as the controller would post it: every kind of panel update. */

import type { ToView } from "../../src/chat/view";

export const ANSWER = [
  "Billing listens on **port 8101** ([1]); its client gives up after `7.5` seconds ([2]).",
  "",
  "```python",
  "class BillingClient:",
  "    TIMEOUT_SECONDS = 7.5",
  "```",
].join("\n");

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
  { type: "progress", message: "Searching the workspace for “billing port”", percentage: 40, done: false },
  { type: "toolStep", callId: "call_0", title: "Searching the workspace for “billing port”", state: "finished", detail: "" },
  { type: "toolStep", callId: "call_1", title: "Reading ../etc/passwd", state: "started", detail: "" },
  { type: "toolStep", callId: "call_1", title: "Reading ../etc/passwd", state: "failed", detail: "Error: refused path '../etc/passwd': '..' segments are not allowed" },
  { type: "toolStep", callId: "call_2", title: "Reading src/billing/client.py", state: "started", detail: "" },
  { type: "toolStep", callId: "call_2", title: "Reading src/billing/client.py", state: "finished", detail: "" },
  { type: "summary", summary: { text: "- (#1–#2) The user pasted the compose file; billing runs on 8101.", firstSeq: 1, lastSeq: 12 } },
  { type: "delta", part: 1, text: "Billing listens on **port 8101** ([1]); " },
  { type: "delta", part: 1, text: "its client gives up after `7.5` seconds ([2])." },
  { type: "progress", message: "", done: true },
  {
    type: "replyEnd", text: ANSWER, stopReason: "answer", sources: [
      { number: 1, label: "billing port", path: "deploy/billing.yaml", startLine: 3, endLine: 5 },
      { number: 2, label: "client timeout", path: "src/billing/client.py", startLine: 41, endLine: 42 },
    ],
  },
  { type: "busy", busy: false },
  { type: "user", text: "And in staging?" },
  { type: "replyStart" },
  { type: "busy", busy: true },
  { type: "replyError", code: -32803, message: "The model could not be reached: connection refused (http://127.0.0.1:8080/v1)" },
  { type: "busy", busy: false },
];
