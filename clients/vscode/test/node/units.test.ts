/** The controller's pure helpers: settings sent to the daemon, the model label, finding the daemon, stored transcripts. */

import assert from "node:assert/strict";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { transcriptOf } from "../../src/chat/controller";
import { resolveExecutable } from "../../src/chat/executable";
import { daemonSettings, describeModel } from "../../src/chat/settings";

test("only explicitly set values are sent, nested by section", () => {
  assert.deepEqual(daemonSettings(() => undefined), {});
  const set: Record<string, unknown> = { "chat.provider": "openai", "chat.research_time_budget": 12.5 };
  assert.deepEqual(daemonSettings((key) => set[key]), { chat: { provider: "openai", research_time_budget: 12.5 } });
});

test("the model label names the provider and the model", () => {
  assert.equal(describeModel(undefined, ""), "local · embedded model");
  assert.equal(describeModel("openai", "gpt-4o-mini"), "openai · gpt-4o-mini");
  assert.equal(describeModel("openai", ""), "openai · default model");
});

test("the daemon executable is found on PATH or by path, and a missing one is reported as missing", () => {
  const root = mkdtempSync(path.join(tmpdir(), "imprint-exe-"));
  try {
    const bin = path.join(root, "bin");
    mkdirSync(bin);
    const daemon = path.join(bin, "imprintd");
    writeFileSync(daemon, "#!/bin/sh\n");
    chmodSync(daemon, 0o755);
    const notExecutable = path.join(bin, "plain");
    writeFileSync(notExecutable, "");
    chmodSync(notExecutable, 0o644);
    assert.equal(resolveExecutable("imprintd", `/nonexistent${path.delimiter}${bin}`), daemon);
    assert.equal(resolveExecutable(daemon, ""), daemon);
    assert.equal(resolveExecutable("~/bin/imprintd", "", root), daemon);
    assert.equal(resolveExecutable("imprintd", "/nonexistent"), undefined);
    assert.equal(resolveExecutable("plain", bin), undefined, "a file without the executable bit");
    assert.equal(resolveExecutable(bin, ""), undefined, "a folder");
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test("a stored session folds tool exchanges into step rows and places the summary divider after what it covers", () => {
  const info = { sessionId: "s", title: "t", workspace: null, createdAt: 0, updatedAt: 0, messageCount: 6, persist: true };
  const items = transcriptOf({
    session: info,
    summary: { text: "earlier", firstSeq: 1, lastSeq: 2 },
    messages: [
      { seq: 1, role: "user", content: "q1", toolCalls: [], toolCallId: null, name: null },
      { seq: 2, role: "assistant", content: "a1", toolCalls: [], toolCallId: null, name: null },
      { seq: 3, role: "user", content: "q2", toolCalls: [], toolCallId: null, name: null },
      { seq: 4, role: "assistant", content: "", toolCalls: [
        { id: "c1", name: "search", arguments: { query: "billing port" } },
        { id: "c2", name: "read_file", arguments: { path: "../x" } }], toolCallId: null, name: null },
      { seq: 5, role: "tool", content: "[hit 1] a.py:1-2", toolCalls: [], toolCallId: "c1", name: "search" },
      { seq: 6, role: "tool", content: "Error: refused path '../x'\nmore", toolCalls: [], toolCallId: "c2", name: "read_file" },
      { seq: 7, role: "assistant", content: "a2", toolCalls: [], toolCallId: null, name: null },
    ],
  });
  assert.deepEqual(items, [
    { kind: "user", seq: 1, text: "q1" },
    { kind: "assistant", seq: 2, text: "a1", steps: [] },
    { kind: "summary", summary: { text: "earlier", firstSeq: 1, lastSeq: 2 } },
    { kind: "user", seq: 3, text: "q2" },
    { kind: "assistant", seq: 7, text: "a2", steps: [
      { callId: "c1", title: "Searching the workspace for “billing port”", state: "finished", detail: "" },
      { callId: "c2", title: "Reading ../x", state: "failed", detail: "Error: refused path '../x'" }] },
  ]);
});
