/** The controller's pure helpers: settings sent to the daemon, the model label, finding the daemon, stored transcripts. */

import assert from "node:assert/strict";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { DaemonLog } from "../../src/chat/daemonLog";
import { missingDaemonMessage, resolveExecutable } from "../../src/chat/executable";
import { ChatController, transcriptOf } from "../../src/chat/controller";
import { exportPath } from "../../src/chat/exportFile";
import { contextWindow, modelName } from "../../src/chat/models";
import { PERMISSION_CHOICES, askPermission, linkedUri, mcpCallFailed, mcpServerOf, permissionQuestion, stepTitleOf } from "../../src/chat/permissions";
import {
  SETTINGS, STATUS_BAR_COMMAND, SentSettings, SettingsChanges, daemonSettings, describeFormat, describeModel, explicitOf, statusBar,
} from "../../src/chat/settings";
import { withoutSourcesBlock } from "../../src/chat/sources";

test("only explicitly set values are sent, by the daemon's names, nested by section", () => {
  assert.deepEqual(daemonSettings(() => undefined), {});
  const set: Record<string, unknown> = { "chat.provider": "openai", "chat.researchTimeBudget": 12.5, "chat.contextWindow": 4096 };
  assert.deepEqual(daemonSettings((key) => set[key]), { chat: { provider: "openai", n_ctx: 4096, research_time_budget: 12.5 } });
});

test("VS Code's setting names are camelCase words, so the Settings editor titles them in words", () => {
  for (const { editor } of SETTINGS) assert.match(editor, /^(?:chat\.)?[a-z]+(?:[A-Z][a-z]+)*$/, editor);
});

test("MCP servers from a workspace's settings are sent only when the workspace is trusted; the user's always", () => {
  const servers = { git: { command: "python", args: ["-m", "mcp_server_git"] } };
  const mine = { command: "uvx", args: ["mcp-server-git"] };
  assert.equal(explicitOf("mcpServers", { workspaceValue: servers }, false), undefined);
  assert.deepEqual(explicitOf("mcpServers", { workspaceValue: servers, globalValue: { mine } }, false), { mine });
  assert.deepEqual(explicitOf("mcpServers", { workspaceFolderValue: servers, globalValue: { mine } }, true), servers);
  // Other settings keep the workspace's value either way (VS Code itself restricts what must be).
  assert.equal(explicitOf("chat.maxTokens", { workspaceValue: 256, globalValue: 512 }, false), 256);
  assert.deepEqual(daemonSettings((key) => (key === "mcpServers" ? servers : undefined)), { chat: { mcp_servers: servers } });
});

test("a permission question names the server, the tool and its arguments; only Allow once and Always allow say yes", async () => {
  const request = {
    replyId: "r1", callId: "step-1", server: "git", tool: "git_create_branch", title: "git: Creates a new branch",
    arguments: { repo_path: "/repo", branch_name: "topic" }, readOnly: false, destructive: false,
  };
  const question = permissionQuestion(request);
  assert.match(question.message, /“git”.*git_create_branch/);
  assert.match(question.detail, /"branch_name": "topic"/);
  assert.deepEqual(PERMISSION_CHOICES.map((choice) => choice.label), ["Allow once", "Always allow", "Reject"]);
  let asked: string[] = [];
  const answers = async (label: string | undefined) =>
    (await askPermission(async (_question, labels) => { asked = labels; return label; }, request)).outcome;
  assert.equal(await answers("Allow once"), "allow_once");
  assert.deepEqual(asked, ["Allow once", "Always allow", "Reject"]);
  assert.equal(await answers("Always allow"), "allow_always");
  assert.equal(await answers("Reject"), "reject");
  assert.equal(await answers(undefined), "reject", "a closed dialog");
  assert.equal((await askPermission(async () => { throw new Error("no window"); }, request)).outcome, "reject");
  assert.equal((await askPermission(undefined, request)).outcome, "reject", "nobody to ask");
});

test("an MCP step's row names its server; a workspace step's stays as the daemon words it", () => {
  assert.equal(mcpServerOf("git__git_log"), "git");
  assert.equal(mcpServerOf("read_file"), undefined);
  assert.equal(stepTitleOf("git__git_log", "Shows the commit logs"), "git · Shows the commit logs");
  assert.equal(stepTitleOf("git__git_log", "Asking git: git_log"), "Asking git: git_log");
  assert.equal(stepTitleOf("search", "Searching the workspace for “port”"), "Searching the workspace for “port”");
});

test("a key removed from the settings is sent as null, once; a restarted daemon starts from what is set", () => {
  const sent = new SentSettings();
  let set: Record<string, unknown> = { "chat.provider": "openai", "chat.maxTokens": 512 };
  assert.deepEqual(sent.initial((key) => set[key]), { chat: { provider: "openai", max_tokens: 512 } });
  set = { "chat.maxTokens": 256 };
  assert.deepEqual(sent.change((key) => set[key]), { chat: { max_tokens: 256, provider: null } });
  set = {};
  assert.deepEqual(sent.change((key) => set[key]), { chat: { max_tokens: null } });
  assert.deepEqual(sent.change((key) => set[key]), {}, "nothing left to unset");
  set = { "chat.model": "m" };
  assert.deepEqual(sent.initial((key) => set[key]), { chat: { model: "m" } });
  set = {};
  assert.deepEqual(sent.change((key) => set[key]), { chat: { model: null } });
});

test("the model label is what the daemon reports, not a guess", () => {
  assert.equal(describeModel(undefined), "model not reported");
  assert.equal(describeModel({ provider: "openai", model: "gpt-4o-mini", nCtx: 8192 }), "openai · gpt-4o-mini");
  assert.equal(describeModel({ provider: "local", model: "SmolLM2-135M-Instruct-Q8_0.gguf", nCtx: 8192 }), "local · SmolLM2-135M-Instruct-Q8_0.gguf");
  // The detected chat format, and whether the model thinks, for the status bar's tooltip.
  assert.equal(describeFormat({ provider: "local", model: "m.gguf", nCtx: 8192 }), "");
  assert.equal(describeFormat({ provider: "local", model: "m.gguf", nCtx: 8192, chatFormat: "hermes", reasons: false }), "hermes");
  assert.equal(describeFormat({ provider: "local", model: "q.gguf", nCtx: 8192, chatFormat: "qwen-xml", reasons: true }), "qwen-xml, thinks before answering");
  assert.equal(describeFormat({ provider: "local", model: "gone.gguf", nCtx: 8192, chatFormat: null, reasons: false }), "not known yet");
});

test("daemon log lines keep their level and lose the daemon's timestamp; a traceback keeps its record's level", () => {
  const log = new DaemonLog();
  assert.deepEqual(log.line("2026-12-01 19:35:05,123 INFO imprintd.chat: reply 5f0c answered in 1.2 s"),
    { level: "info", text: "imprintd.chat: reply 5f0c answered in 1.2 s" });
  assert.deepEqual(log.line("2026-12-01 19:35:06,001 WARNING imprintd.rpc: exiting with 1 worker thread(s) still busy"),
    { level: "warn", text: "imprintd.rpc: exiting with 1 worker thread(s) still busy" });
  assert.deepEqual(log.line("2026-12-01 19:35:07,500 ERROR imprintd.server: incident 1a2b"), { level: "error", text: "imprintd.server: incident 1a2b" });
  assert.deepEqual(log.line("Traceback (most recent call last):"), { level: "error", text: "Traceback (most recent call last):" });
  assert.deepEqual(log.line("2026-12-01 19:35:08,000 DEBUG pygls: sent"), { level: "debug", text: "pygls: sent" });
  assert.deepEqual(new DaemonLog().line("usage: imprintd [-h]"), { level: "info", text: "usage: imprintd [-h]" });
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
    { kind: "assistant", seq: 2, text: "a1", steps: [], sources: [] },
    { kind: "summary", summary: { text: "earlier", firstSeq: 1, lastSeq: 2 } },
    { kind: "user", seq: 3, text: "q2" },
    { kind: "assistant", seq: 7, text: "a2", sources: [], steps: [
      { callId: "c1", title: "Searching the workspace for “billing port”", state: "finished", detail: "" },
      { callId: "c2", title: "Reading ../x", state: "failed", detail: "Error: refused path '../x'" }] },
  ]);
});

test("a stored answer keeps what the model thought on the way to it, its tool rounds' thoughts first", () => {
  const info = { sessionId: "s", title: "t", workspace: null, createdAt: 0, updatedAt: 0, messageCount: 6, persist: true };
  const items = transcriptOf({
    session: info, summary: null,
    messages: [
      { seq: 1, role: "user", content: "q", toolCalls: [], toolCallId: null, name: null, reasoning: "" },
      { seq: 2, role: "assistant", content: "", toolCalls: [{ id: "c1", name: "search", arguments: { query: "port" } }],
        toolCallId: null, name: null, reasoning: "I should search." },
      { seq: 3, role: "tool", content: "[1] a.yaml:1", toolCalls: [], toolCallId: "c1", name: "search", reasoning: "" },
      { seq: 4, role: "assistant", content: "Port 8101.", toolCalls: [], toolCallId: null, name: null, reasoning: "It says 8101." },
      { seq: 5, role: "user", content: "q2", toolCalls: [], toolCallId: null, name: null, reasoning: "" },
      { seq: 6, role: "assistant", content: "Yes.", toolCalls: [], toolCallId: null, name: null, reasoning: "" },
    ],
  });
  const answers = items.filter((item) => item.kind === "assistant");
  assert.deepEqual(answers.map((item) => item.kind === "assistant" && item.reasoning), ["I should search.\n\nIt says 8101.", undefined]);
});

test("a stored session keeps each answer's sources and marks questions left without an answer", () => {
  const info = { sessionId: "s", title: "t", workspace: null, createdAt: 0, updatedAt: 0, messageCount: 5, persist: true };
  const source = {
    number: 1, kind: "file" as const, label: "deploy/billing.yaml:3–5", path: "deploy/billing.yaml", startLine: 3, endLine: 5,
    message: null, cited: true, supported: true, reason: "",
  };
  const items = transcriptOf({
    session: info, summary: null,
    messages: [
      { seq: 1, role: "user", content: "stopped one", toolCalls: [], toolCallId: null, name: null, sources: [] },
      { seq: 2, role: "user", content: "q", toolCalls: [], toolCallId: null, name: null, sources: [] },
      { seq: 3, role: "assistant", content: "a [1]\n\nSources:\n[1] deploy/billing.yaml:3-5", toolCalls: [], toolCallId: null, name: null, sources: [source] },
      { seq: 4, role: "user", content: "failed one", toolCalls: [], toolCallId: null, name: null, sources: [] },
    ],
  });
  assert.deepEqual(items.map((item) => item.kind), ["user", "unanswered", "user", "assistant", "user", "unanswered"]);
  assert.deepEqual(items[1], { kind: "unanswered", seq: 1 });
  assert.deepEqual(items[3].kind === "assistant" && items[3].sources, [source]);
  assert.deepEqual(items[5], { kind: "unanswered", seq: 4 });
});

test("the missing-daemon notification is plain text (no markdown backticks) and says where a remote window reads the path", () => {
  const local = missingDaemonMessage("imprintd", undefined);
  assert.ok(!local.includes("`"), local);
  assert.match(local, /could not find its daemon “imprintd”.*pip install "\.\[embedded\]"/);
  const remote = missingDaemonMessage("~/bin/imprintd", "ssh-remote");
  assert.ok(!remote.includes("`"), remote);
  assert.match(remote, /remote window \(ssh-remote\).*Remote settings/);
});

test("the daemon's trailing Sources block comes off the answer's text, and only a trailing one", () => {
  assert.equal(withoutSourcesBlock("It is 8101 [1].\n\nSources:\n[1] notes.txt:1\n[2] src/a.py:3-4 (read, not cited)"), "It is 8101 [1].");
  assert.equal(withoutSourcesBlock("Sources:\n[1] notes.txt:1\n"), "");
  const inside = "Sources:\n[1] a list the model wrote\n\nand text after it";
  assert.equal(withoutSourcesBlock(inside), inside);
  assert.equal(withoutSourcesBlock("No sources here."), "No sources here.");
});

test("a reopened session lists the steps the live reply showed: the first look as Looking, no repeated call", () => {
  const call = (id: string, name: string, args: Record<string, unknown>) => ({ id, name, arguments: args });
  const look = call("call_look1a2b", "search", { query: "billing port" });
  const read = call("call_0", "read_file", { path: "billing.yaml" });
  const again = call("call_1", "read_file", { path: "billing.yaml" });
  const message = (seq: number, role: "user" | "assistant" | "tool", content: string, extra: object = {}) =>
    ({ seq, role, content, toolCalls: [], toolCallId: null, name: null, sources: [], ...extra });
  const items = transcriptOf({
    session: { sessionId: "s", title: "t", workspace: null, createdAt: 0, updatedAt: 0, messageCount: 8, persist: true },
    summary: null,
    messages: [
      message(1, "user", "Which port?"),
      message(2, "assistant", "", { toolCalls: [look] }),
      message(3, "tool", "billing.yaml:3 port: 8101", { toolCallId: look.id }),
      message(4, "assistant", "", { toolCalls: [read] }),
      message(5, "tool", "port: 8101", { toolCallId: read.id }),
      message(6, "assistant", "", { toolCalls: [again] }),
      message(7, "tool", "(Same call as before; its result again.)\nport: 8101", { toolCallId: again.id }),
      message(8, "assistant", "8101."),
    ],
  });
  const answer = items.find((item) => item.kind === "assistant");
  assert.ok(answer && answer.kind === "assistant");
  // The look is titled with the question asked, as live, not with its query.
  assert.deepEqual(answer.steps.map((step) => step.title), ["Looking in the workspace for “Which port?”", "Reading billing.yaml"]);
});

test("updates made together are one settings change; the same values again are none", async () => {
  let set: Record<string, unknown> = { "chat.provider": "openai", "chat.model": "fake" };
  const sent = new SentSettings();
  sent.initial((key) => set[key]);
  const told: object[] = [];
  const changes = new SettingsChanges(() => {
    const settings = sent.news((key) => set[key]);
    if (settings) told.push(settings);
  });
  await changes.together(async () => {
    set = { ...set, "chat.provider": "local" };
    changes.changed();
    await new Promise((resolve) => setImmediate(resolve));
    set = { ...set, "chat.model": "/models/smol.gguf" };
    changes.changed();
  });
  assert.deepEqual(told, [{ chat: { provider: "local", model: "/models/smol.gguf" } }]);
  changes.changed(); // a late event for the same values
  assert.deepEqual(told.length, 1);
  set = { "chat.provider": "local" };
  changes.changed(); // an ordinary change goes at once, the key removed as null
  assert.deepEqual(told.at(-1), { chat: { provider: "local", model: null } });
});

test("the status bar's tooltip says what its click does: pick a model, the command it runs", () => {
  const report = { provider: "local", model: "smol.gguf", name: "SmolLM2 135M", nCtx: 8192, nCtxSource: "chat.n_ctx", chatFormat: "json-fallback", reasons: false };
  const { text, tooltip } = statusBar("ready", "", report);
  assert.equal(text, "$(comment-discussion) Imprint · local · SmolLM2 135M");
  assert.equal(tooltip, "Imprint: ready\nModel: local · SmolLM2 135M, context 8,192 tokens\nChat format: json-fallback\n" +
    "Click to pick another model (“Imprint: Show Log” shows the log).");
  assert.equal(STATUS_BAR_COMMAND, "imprint.pickModel");
  const extension = readFileSync(path.join(__dirname, "..", "..", "src", "extension.ts"), "utf8");
  assert.match(extension, /status\.command = STATUS_BAR_COMMAND;/);
  assert.doesNotMatch(extension, /Click to show the log/);
});

test("the status bar's tooltip says where a window that is not chat.n_ctx comes from", () => {
  const served = { provider: "openai", model: "qwen3", name: "qwen3", nCtx: 1024, nCtxSource: "llama-server /props n_ctx", serverNCtx: 1024 };
  assert.match(statusBar("ready", "", served).tooltip, /^Model: openai · qwen3, context 1,024 tokens \(llama-server \/props n_ctx\)$/m);
  assert.equal(contextWindow(4096, "Ollama num_ctx parameter"), "context 4,096 tokens (Ollama num_ctx parameter)");
  assert.equal(contextWindow(8192, "chat.n_ctx"), "context 8,192 tokens");
  assert.equal(contextWindow(8192), "context 8,192 tokens", "an older daemon says no source");
});

test("the model in use is shown by the name the daemon reports; an older daemon's, which sends none, by its model", () => {
  const ollama = { provider: "local", model: "sha256-c5396e06", name: "qwen2.5:0.5b", nCtx: 8192 };
  assert.equal(modelName(ollama), "qwen2.5:0.5b");
  assert.equal(describeModel(ollama), "local · qwen2.5:0.5b");
  assert.equal(statusBar("ready", "", ollama).text, "$(comment-discussion) Imprint · local · qwen2.5:0.5b");
  assert.equal(describeModel({ provider: "local", model: "smol.gguf", nCtx: 8192 }), "local · smol.gguf");
  assert.equal(describeModel({ provider: "local", model: "", name: "", nCtx: 8192 }), "local · default model");
});

test("an export is proposed under the daemon's file name, in the folder, never over a file that exists", () => {
  const taken = new Set(["/work/imprint-billing.md", "/work/imprint-billing-2.md"]);
  assert.equal(exportPath("imprint-notes.md", "/work", (file) => taken.has(file)), "/work/imprint-notes.md");
  assert.equal(exportPath("imprint-billing.md", "/work", (file) => taken.has(file)), "/work/imprint-billing-3.md");
  assert.equal(exportPath("../../etc/imprint-x.json", "/work", () => false), "/work/imprint-x.json");
});

test("an MCP result's web address opens outside the editor; any other address a server names does not", async () => {
  const origin = (uri: string | null) => ({ server: "docs", tool: "fetch", arguments: {}, uri });
  assert.equal(linkedUri(origin("https://docs.example.com/rollout")), "https://docs.example.com/rollout");
  assert.equal(linkedUri(origin("HTTP://docs.example.com/")), "HTTP://docs.example.com/");
  for (const uri of ["javascript:alert(1)", "command:workbench.action.terminal.new", "file:///etc/passwd", "demo://resource/1", null]) {
    assert.equal(linkedUri(origin(uri)), undefined, String(uri));
  }
  assert.equal(linkedUri(undefined), undefined);
  const opened: string[] = [];
  const controller = new ChatController({ post: () => undefined, workspace: () => undefined, openUri: (uri) => opened.push(uri) });
  await controller.handle({ type: "openUri", uri: "https://docs.example.com/rollout" });
  await controller.handle({ type: "openUri", uri: "command:workbench.action.terminal.new" }); // a panel's message is checked again
  assert.deepEqual(opened, ["https://docs.example.com/rollout"]);
  controller.dispose();
});

test("a stored MCP result that says the call did not run is a failed step; one that merely mentions it is not", () => {
  assert.equal(mcpCallFailed("git__git_commit", "The user declined to let git run git_commit; go on without it."), true);
  assert.equal(mcpCallFailed("git__git_log", "The MCP server git is unavailable: it exited."), true);
  assert.equal(mcpCallFailed("docs__fetch", "docs answered fetch with an error: 404"), true);
  assert.equal(mcpCallFailed("git__git_log", "Commit history:\nThe user declined to let git run git_log"), false);
  assert.equal(mcpCallFailed("git__git_log", "The user declined to let docs run fetch"), false, "another server's wording");
  assert.equal(mcpCallFailed("read_file", "The user declined to let git run git_log"), false, "not an MCP tool");
});
