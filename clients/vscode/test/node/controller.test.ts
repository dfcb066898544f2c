/**
 * The chat controller against the real `imprintd serve --stdio` and the scripted model server:
 * what the panel is told, what went over the wire, what reached the model and what was stored.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterEach, beforeEach, test } from "node:test";
import { CancellationToken, ProgressType } from "vscode-jsonrpc";
import { ChatConnection, WorkDoneProgressValue } from "../../src/chat/connection";
import { modelChoices } from "../../src/chat/models";
import { EditorKey, SentSettings, SettingsChanges, daemonSettings, statusBar } from "../../src/chat/settings";
import { withoutSourcesBlock } from "../../src/chat/sources";
import * as wire from "../../src/protocol";
import { python, pythonEnv } from "../python";
import { Daemon, Home, RecordedPanel, Stub } from "./harness";

let stub: Stub;
let home: Home;
let daemon: Daemon;
let panel: RecordedPanel;

beforeEach(async () => {
  stub = await Stub.start();
  home = new Home();
  daemon = await Daemon.start(home, stub);
  panel = new RecordedPanel(home.workspace);
  panel.controller.attach(daemon.connection);
});

afterEach(async () => {
  panel.controller.dispose();
  await daemon.stop();
  stub.stop();
  home.remove();
});

function lastUserContent(request: { messages: { role: string; content: string | null }[] }): string {
  return [...request.messages].reverse().find((message) => message.role === "user")?.content ?? "";
}

function session(sessionId: string): Promise<wire.SessionResult> {
  return daemon.connection.sendRequest<wire.SessionResult>(wire.SESSION, { sessionId });
}

test("a question streams deltas, the result's text replaces them, and the exchange is stored", async () => {
  await stub.queue("Billing listens on port 8101 behind the gateway.");
  await panel.controller.ask("Which port does billing use?");

  const types = panel.messages.map((message) => message.type).filter((type) => type !== "status");
  assert.deepEqual(types.slice(0, 2), ["user", "replyStart"]);
  const deltas = panel.ofType("delta");
  assert.ok(deltas.length >= 2, `expected streamed deltas, got ${deltas.length}`);
  assert.equal(deltas.map((delta) => delta.text).join(""), "Billing listens on port 8101 behind the gateway.");
  assert.ok(deltas.every((delta) => delta.part === 0));
  const [end] = panel.ofType("replyEnd");
  assert.equal(end.text, "Billing listens on port 8101 behind the gateway.");
  assert.equal(end.stopReason, "answer");
  assert.ok(types.indexOf("replyEnd") > types.lastIndexOf("delta"));
  assert.deepEqual(panel.ofType("busy").map((message) => message.busy), [true, false]);
  assert.equal(panel.controller.busy, false);

  const [request] = await stub.requests();
  assert.equal(lastUserContent(request), "Which port does billing use?");
  assert.ok(panel.controller.sessionId);
  const stored = await session(panel.controller.sessionId!);
  assert.deepEqual(stored.messages.map((m) => [m.role, m.content]), [
    ["user", "Which port does billing use?"], ["assistant", "Billing listens on port 8101 behind the gateway."]]);
  assert.equal(stored.session.workspace, home.workspace);

  // A follow-up continues the same session.
  await stub.queue("Yes, only that port.");
  await panel.controller.ask("Only that one?");
  const followUp = await session(panel.controller.sessionId!);
  assert.equal(followUp.messages.length, 4);
  assert.equal((await stub.requests()).length, 2);
});

test("tool steps show as rows, progress runs on the client's token, and tool output reaches the model", async () => {
  writeFileSync(path.join(home.workspace, "notes.txt"), "The billing service listens on 8101.\n");
  await stub.queue(
    { text: "Let me read the notes.", toolCalls: [{ id: "call_read", name: "read_file", arguments: { path: "notes.txt" } }] },
    { toolCalls: [{ id: "call_bad", name: "read_file", arguments: { path: "../outside.txt" } }] },
    "The notes say 8101.",
  );
  const progress: { token: string | number; value: WorkDoneProgressValue }[] = [];
  const connection = daemon.connection;
  const spying: ChatConnection = {
    sendRequest: <R>(method: string, params: object, token?: CancellationToken): Promise<R> =>
      token === undefined ? connection.sendRequest<R>(method, params) : connection.sendRequest<R>(method, params, token),
    sendNotification: (method, params) => connection.sendNotification(method, params),
    onNotification: (method, handler) => connection.onNotification(method, handler),
    onRequest: (method, handler) => connection.onRequest(method, handler),
    onProgress: <P>(type: ProgressType<P>, token: string | number, handler: (value: P) => void) =>
      connection.onProgress(type, token, (value: P) => {
        progress.push({ token, value: value as WorkDoneProgressValue });
        handler(value);
      }),
  };
  panel.controller.attach(spying);
  await panel.controller.ask("What do the notes say about billing?");

  const steps = panel.ofType("toolStep");
  assert.deepEqual(steps.map((step) => step.state), ["started", "finished", "started", "failed"]);
  // Each step's start and end share an id, unique within the reply (the daemon may number them).
  assert.equal(steps[0].callId, steps[1].callId);
  assert.equal(steps[2].callId, steps[3].callId);
  assert.notEqual(steps[0].callId, steps[2].callId);
  assert.equal(steps[0].title, "Reading notes.txt");
  assert.match(steps[3].detail, /\.\./);
  // A daemon that writes sources ends the text with a "Sources:" block for the read file.
  assert.equal(withoutSourcesBlock(panel.ofType("replyEnd")[0].text), "The notes say 8101.");

  // Begin, reports, end, all on the one token the controller created for this request.
  assert.ok(progress.length >= 2);
  assert.equal(new Set(progress.map((entry) => entry.token)).size, 1);
  assert.equal(progress[0].value.kind, "begin");
  assert.equal(progress.at(-1)!.value.kind, "end");
  assert.ok(panel.ofType("progress").some((p) => !p.done && p.message === "Reading notes.txt"));
  assert.equal(panel.ofType("progress").at(-1)!.done, true);

  const requests = await stub.requests();
  assert.equal(requests.length, 3);
  const toolMessages = requests[1].messages.filter((message) => message.role === "tool");
  assert.ok(toolMessages.some((message) => (message.content ?? "").includes("listens on 8101")), "the file's text reached the model");
});

test("the streamed-text contract: preamble parts are marked and the answer comes in a later part", async () => {
  writeFileSync(path.join(home.workspace, "notes.txt"), "billing: 8101\n");
  await stub.queue(
    { text: "I will look at the notes first.", toolCalls: [{ id: "call_read", name: "read_file", arguments: { path: "notes.txt" } }] },
    "Billing uses 8101.",
  );
  await panel.controller.ask("Which port?");
  const preambles = panel.ofType("preamble");
  const deltas = panel.ofType("delta");
  const textOf = (part: number) => deltas.filter((delta) => delta.part === part).map((delta) => delta.text).join("");
  assert.equal(textOf(0), "I will look at the notes first.");
  assert.deepEqual(preambles.map((p) => p.part), [0]);
  assert.equal(withoutSourcesBlock(textOf(1)), "Billing uses 8101.", "a daemon that writes sources streams their block too");
  // The preamble notice comes after part 0's text and before part 1's.
  const order = panel.messages.filter((m) => m.type === "delta" || m.type === "preamble")
    .map((m) => (m.type === "preamble" ? "preamble" : `part ${m.part}`));
  assert.deepEqual([...new Set(order)], ["part 0", "preamble", "part 1"]);
  assert.equal(withoutSourcesBlock(panel.ofType("replyEnd")[0].text), "Billing uses 8101.");
});

test("a reasoning model's thoughts reach the panel as reasoning, never as answer text, and come back with the session", async () => {
  writeFileSync(path.join(home.workspace, "notes.txt"), "billing: 8101\n");
  await stub.queue(
    { reasoning: "I should read the notes.", toolCalls: [{ id: "call_read", name: "read_file", arguments: { path: "notes.txt" } }] },
    { reasoning: "They say 8101.", text: "Billing uses 8101." },
  );
  await panel.controller.ask("Which port?");
  const thoughts = panel.ofType("reasoning");
  const thoughtOf = (part: number) => thoughts.filter((t) => t.part === part).map((t) => t.text).join("");
  assert.equal(thoughtOf(0), "I should read the notes.");
  assert.equal(thoughtOf(1), "They say 8101.");
  assert.ok(!panel.ofType("delta").some((delta) => /read the notes|They say/.test(delta.text)), "no thought streams as answer text");
  assert.equal(withoutSourcesBlock(panel.ofType("replyEnd")[0].text), "Billing uses 8101.");

  const sessionId = panel.controller.sessionId!;
  await panel.controller.openSession(sessionId);
  const [reset] = panel.ofType("reset").slice(-1);
  const answer = reset.items.find((item) => item.kind === "assistant");
  assert.ok(answer && answer.kind === "assistant");
  assert.equal(answer.reasoning, "I should read the notes.\n\nThey say 8101.");
});

test("Stop cancels the request: it answers -32800, the panel goes idle and the question stays stored", async () => {
  await stub.queue({ text: "This answer will never finish", hold: true });
  const asked = panel.controller.ask("Tell me a long story");
  await panel.next("delta");
  assert.equal(panel.controller.busy, true);
  await panel.controller.handle({ type: "stop" });
  await asked;
  await stub.release();

  assert.equal(panel.ofType("replyCancelled").length, 1);
  assert.equal(panel.ofType("replyError").length, 0);
  assert.equal(panel.ofType("replyEnd").length, 0);
  assert.equal(panel.controller.busy, false);
  assert.deepEqual(panel.ofType("busy").map((message) => message.busy), [true, false]);
  const stored = await session(panel.controller.sessionId!);
  assert.deepEqual(stored.messages.map((m) => [m.role, m.content]), [["user", "Tell me a long story"]]);

  // The daemon keeps serving: the next question in the same session is answered.
  await stub.queue("Short one.");
  await panel.controller.ask("A short one then");
  assert.equal(panel.ofType("replyEnd")[0].text, "Short one.");
});

test("New Chat during a reply cancels it; nothing of it reaches the new chat", async () => {
  await stub.queue({ text: "An answer for the old chat", hold: true });
  const asked = panel.controller.ask("Old question");
  await panel.next("delta");
  panel.controller.newChat();
  const resetAt = panel.messages.length;
  await asked;
  await stub.release();
  assert.equal(panel.controller.busy, false);
  assert.equal(panel.controller.sessionId, undefined, "the new chat is not the old session");
  assert.deepEqual(panel.messages.slice(resetAt).map((m) => m.type).filter((t) => t !== "status"), ["progress", "busy"]);
  await stub.queue("New answer.");
  await panel.controller.ask("New question");
  const sessions = await panel.controller.listSessions();
  assert.equal(sessions.length, 2);
  assert.equal(sessions[0].sessionId, panel.controller.sessionId);
  assert.equal(sessions[0].title, "New question");
});

test("sessions are listed, opened with tool steps collapsed, and deleted", async () => {
  writeFileSync(path.join(home.workspace, "notes.txt"), "billing: 8101\n");
  await stub.queue(
    { toolCalls: [{ id: "call_read", name: "read_file", arguments: { path: "notes.txt" } }] },
    "It is 8101.",
    "Second chat answer.",
  );
  await panel.controller.ask("Which port does billing use?");
  const first = panel.controller.sessionId!;
  panel.controller.newChat();
  assert.equal(panel.controller.sessionId, undefined);
  assert.deepEqual(panel.messages.slice(-2), [{ type: "reset", title: "New chat", items: [] }, { type: "context", usage: null }]);
  await panel.controller.ask("Another question");
  const second = panel.controller.sessionId!;
  assert.notEqual(first, second);

  const sessions = await panel.controller.listSessions();
  assert.deepEqual(sessions.map((s) => s.sessionId), [second, first]);
  assert.equal(sessions[1].title, "Which port does billing use?");
  assert.equal(sessions[1].messageCount, 4);

  panel.clear();
  await panel.controller.openSession(first);
  const [reset] = panel.ofType("reset");
  assert.equal(reset.title, "Which port does billing use?");
  const [question, answer] = reset.items;
  assert.deepEqual(question, { kind: "user", seq: 1, text: "Which port does billing use?" });
  assert.ok(answer.kind === "assistant");
  assert.deepEqual([answer.seq, withoutSourcesBlock(answer.text), answer.steps],
    [4, "It is 8101.", [{ callId: "call_read", title: "Reading notes.txt", state: "finished", detail: "" }]]);
  assert.equal(reset.items.length, 2);
  assert.equal(panel.controller.sessionId, first);

  // A reloaded webview gets the transcript again.
  panel.clear();
  await panel.controller.handle({ type: "ready" });
  assert.equal(panel.ofType("reset")[0].items.length, 2);
  assert.deepEqual(panel.messages.slice(-4, -1), [
    { type: "busy", busy: false }, { type: "status", status: "ready", detail: "" }, { type: "research", state: "on" }]);
  assert.equal(panel.messages.at(-1)!.type, "context");

  await panel.controller.deleteSession(first);
  assert.equal(panel.controller.sessionId, undefined, "deleting the open session starts a new chat");
  assert.deepEqual((await panel.controller.listSessions()).map((s) => s.sessionId), [second]);
  await assert.rejects(session(first), (error: { code: number }) => error.code === wire.INVALID_PARAMS);
});

test("a setting change reaches the daemon (the model request shows it) and a refused one is reported by key", async () => {
  const shown: { type: number; message: string }[] = [];
  daemon.connection.onNotification("window/showMessage", (params: { type: number; message: string }) => {
    shown.push(params);
  });
  const settings = daemonSettings((key) => ({ "chat.maxTokens": 77, "chat.analysisWorkers": 99 } as Record<string, unknown>)[key]);
  assert.deepEqual(settings, { chat: { max_tokens: 77, analysis_workers: 99 } });
  await daemon.connection.sendNotification("workspace/didChangeConfiguration", { settings });
  await stub.queue("ok");
  await panel.controller.ask("hi");
  const [request] = await stub.requests();
  assert.equal(request.max_tokens, 77);
  const refusal = shown.find((message) => message.message.includes("chat.analysis_workers"));
  assert.ok(refusal, `no refusal among ${JSON.stringify(shown)}`);
  assert.equal(refusal.type, 1 /* Error */);
  assert.match(refusal.message, /99/);
});

test("a failed reply shows the daemon's message with its code, and Retry asks again", async () => {
  await daemon.connection.sendNotification("workspace/didChangeConfiguration", { settings: { chat: { base_url: "http://127.0.0.1:9/v1" } } });
  await panel.controller.ask("Is anyone there?");
  const [error] = panel.ofType("replyError");
  assert.equal(error.code, wire.REQUEST_FAILED);
  assert.match(error.message, /127\.0\.0\.1:9|refused|connect/i);
  assert.equal(panel.controller.busy, false);

  await daemon.connection.sendNotification("workspace/didChangeConfiguration", { settings: { chat: { base_url: stub.baseUrl } } });
  await stub.queue("Yes, here.");
  await panel.controller.handle({ type: "retry" });
  assert.equal(panel.ofType("replyEnd")[0].text, "Yes, here.");
  assert.equal(lastUserContent((await stub.requests())[0]), "Is anyone there?");
});

test("Ask About Selection sends the selection with its file name and lines", async () => {
  await stub.queue("It adds one.");
  await panel.controller.askAboutSelection("What does this do?", {
    path: "src/math.py", startLine: 3, endLine: 4, text: "def inc(x):\n    return x + 1", languageId: "python",
  });
  const content = lastUserContent((await stub.requests())[0]);
  assert.match(content, /^What does this do\?/);
  assert.ok(content.includes("From src/math.py, lines 3–4:"));
  assert.ok(content.includes("```python\ndef inc(x):\n    return x + 1\n```"));
});

test("the daemon killed mid-reply: the error shows, a restarted daemon serves, the question is kept", async () => {
  await stub.queue({ text: "Halfway through the answer", hold: true });
  const asked = panel.controller.ask("What happens if the daemon dies?");
  await panel.next("delta");
  assert.equal(panel.controller.sessionId, undefined, "a new session's id comes with its notifications");
  daemon.connection.onClose(() => panel.controller.detach("The Imprint daemon stopped; restarting it."));
  await daemon.kill();
  await asked;
  await stub.release();

  const [error] = panel.ofType("replyError");
  assert.match(error.message, /stopped while answering/);
  assert.equal(panel.controller.busy, false);
  assert.equal(panel.ofType("status").at(-1)!.status, "error");
  const kept = panel.controller.sessionId;
  assert.ok(kept, "the session id came with the streamed delta");

  daemon = await Daemon.start(home, stub);
  panel.controller.attach(daemon.connection);
  assert.equal(panel.ofType("status").at(-1)!.status, "ready");
  const stored = await session(kept);
  assert.deepEqual(stored.messages.map((m) => [m.role, m.content]), [["user", "What happens if the daemon dies?"]]);

  await stub.queue("It restarts and answers.");
  await panel.controller.handle({ type: "retry" });
  assert.equal(panel.ofType("replyEnd")[0].text, "It restarts and answers.");
  assert.equal(panel.controller.sessionId, kept);
});

test("settings removed in the editor are sent as null and the daemon goes back to its environment and defaults", async () => {
  await daemon.stop();
  const sent = new SentSettings();
  let set: Record<string, unknown> = { "chat.maxTokens": 77, "chat.model": "editor-model" };
  daemon = await Daemon.start(home, stub, sent.initial((key) => set[key]));
  panel.controller.attach(daemon.connection);
  await stub.queue("one", "two", "three");
  await panel.controller.ask("first");
  set = { "chat.model": "editor-model" };
  const change = sent.change((key) => set[key]);
  assert.deepEqual(change, { chat: { model: "editor-model", max_tokens: null } });
  await daemon.connection.sendNotification("workspace/didChangeConfiguration", { settings: change });
  await panel.controller.ask("second");
  set = {};
  await daemon.connection.sendNotification("workspace/didChangeConfiguration", { settings: sent.change((key) => set[key]) });
  await panel.controller.ask("third");

  const requests = await stub.requests();
  assert.deepEqual(requests.map((request) => [request.model, request.max_tokens]), [
    ["editor-model", 77], ["editor-model", 1024 /* the default */], ["stub" /* IMPRINT_CHAT_MODEL */, 1024]]);
  assert.ok(!daemon.stderr.join("").includes("not accepted"), daemon.stderr.join(""));
});

test("a question asked while the daemon restarts waits for it and is answered by the new one", async () => {
  await stub.queue("Answered by the new daemon.");
  panel.controller.detach("Restarting the Imprint daemon…", true);
  await daemon.stop();
  const asked = panel.controller.ask("Asked during the restart");
  await panel.next("progress", (p) => p.message === "Waiting for the Imprint daemon to start…");
  assert.equal(panel.controller.busy, true);
  assert.equal(panel.ofType("status").at(-1)!.status, "starting");
  assert.equal(panel.ofType("replyError").length, 0);

  daemon = await Daemon.start(home, stub);
  panel.controller.attach(daemon.connection);
  await asked;
  assert.equal(panel.ofType("replyError").length, 0);
  assert.equal(panel.ofType("replyEnd")[0].text, "Answered by the new daemon.");
  assert.equal(lastUserContent((await stub.requests())[0]), "Asked during the restart");
  assert.deepEqual(panel.ofType("busy").map((message) => message.busy), [true, false]);
});

test("a daemon that does not come back within the wait, or cannot start, fails the question with what to do; Stop ends the wait", async () => {
  const waiting = new RecordedPanel(home.workspace, { startWaitMs: 300 });
  waiting.controller.detach("Restarting the Imprint daemon…", true);
  await waiting.controller.ask("Anyone?");
  assert.match(waiting.ofType("replyError")[0].message, /did not start within 0 s.*Show Log/);
  assert.equal(waiting.controller.busy, false);

  const missing = new RecordedPanel(home.workspace);
  missing.controller.detach("Restarting the Imprint daemon…", true);
  const waited = missing.controller.ask("Still there?");
  await missing.next("progress", (p) => p.message.startsWith("Waiting"));
  missing.controller.detach("“imprintd” was not found");
  await waited;
  assert.match(missing.ofType("replyError")[0].message, /not running \(“imprintd” was not found\)/);

  const stopped = new RecordedPanel(home.workspace);
  stopped.controller.detach("Restarting the Imprint daemon…", true);
  const asked = stopped.controller.ask("Never mind");
  await stopped.next("progress", (p) => p.message.startsWith("Waiting"));
  stopped.controller.stop();
  await asked;
  assert.equal(stopped.ofType("replyCancelled").length, 1);
  assert.equal(stopped.ofType("replyError").length, 0);
  assert.deepEqual(await stub.requests(), [], "nothing reached the model");
});

test("a reloaded window opens the session its panel showed", async () => {
  await stub.queue("It is 8101.");
  await panel.controller.ask("Which port does billing use?");
  const shown = panel.controller.sessionId!;
  assert.equal(panel.remembered.at(-1), shown, "the open session is kept for a reload");

  // The extension host restarts with the window: a new controller, told what was kept.
  const reloaded = new RecordedPanel(home.workspace, { restoreSession: panel.remembered.at(-1) });
  await reloaded.controller.attach(daemon.connection);
  const [reset] = reloaded.ofType("reset");
  assert.equal(reset.title, "Which port does billing use?");
  assert.deepEqual(reset.items.map((item) => item.kind === "user" || item.kind === "assistant" ? [item.kind, item.text] : [item.kind]),
    [["user", "Which port does billing use?"], ["assistant", "It is 8101."]]);
  assert.equal(reloaded.controller.sessionId, shown);
  await stub.queue("Still 8101.");
  await reloaded.controller.ask("Still?");
  assert.equal((await session(shown)).messages.length, 4, "the reloaded panel continues the same session");

  // A kept session that is gone (deleted elsewhere) leaves a new chat.
  await panel.controller.deleteSession(shown);
  const orphan = new RecordedPanel(home.workspace, { restoreSession: shown });
  await orphan.controller.attach(daemon.connection);
  assert.equal(orphan.ofType("reset").length, 0);
  assert.equal(orphan.controller.sessionId, undefined);
  assert.deepEqual(orphan.remembered, [undefined], "the stale id is forgotten");
});

test("an untrusted window: the panel says research is off, no folder reaches the daemon, no workspace tools reach the model", async () => {
  await daemon.stop();
  daemon = await Daemon.start(home, stub, {}, { folder: false });
  writeFileSync(path.join(home.workspace, "notes.txt"), "billing: 8101\n");
  const untrusted = new RecordedPanel(undefined, { research: () => "untrusted" });
  untrusted.controller.attach(daemon.connection);
  await untrusted.controller.handle({ type: "ready" });
  assert.deepEqual(untrusted.ofType("research"), [{ type: "research", state: "untrusted" }]);

  await stub.queue("I cannot read the folder.");
  await untrusted.controller.ask("What is in notes.txt?");
  const [request] = await stub.requests();
  const offered = ((request.tools ?? []) as { function: { name: string } }[]).map((tool) => tool.function.name);
  assert.ok(!offered.includes("search") && !offered.includes("read_file"), `offered: ${offered.join(", ")}`);
  assert.ok(!JSON.stringify(request.messages).includes("billing: 8101"));
  const stored = await session(untrusted.controller.sessionId!);
  assert.equal(stored.session.workspace, null);
  untrusted.controller.dispose();
});

test("sources come with the answer and come back with the reopened session", async () => {
  writeFileSync(path.join(home.workspace, "notes.txt"), "The billing service listens on 8101.\n");
  await stub.queue({ toolCalls: [{ id: "call_read", name: "read_file", arguments: { path: "notes.txt" } }] }, "Billing listens on 8101 [1].");
  await panel.controller.ask("Which port does billing use?");
  const [end] = panel.ofType("replyEnd");
  assert.equal(end.sources.length, 1);
  const [source] = end.sources;
  assert.deepEqual([source.number, source.kind, source.path, source.cited, source.supported, source.reason], [1, "file", "notes.txt", true, true, ""]);
  assert.ok(!/read_file/.test(source.label) && source.label.startsWith("notes.txt"), source.label);
  assert.match(end.text, /\n\nSources:\n\[1\] notes\.txt/);

  panel.clear();
  await panel.controller.openSession(panel.controller.sessionId!);
  const [reset] = panel.ofType("reset");
  const answer = reset.items.find((item) => item.kind === "assistant");
  assert.ok(answer && answer.kind === "assistant");
  assert.deepEqual(answer.sources, end.sources);
});

test("the status bar's model is the one the daemon reports: at initialize, then on a settings change", async () => {
  const watching = new RecordedPanel(home.workspace);
  await watching.controller.attach(daemon.connection, daemon.initializeResult);
  // The daemon's environment names the model (IMPRINT_CHAT_MODEL); no editor setting does.
  const named = { name: "stub", nCtxSource: "chat.n_ctx", serverNCtx: null };
  assert.deepEqual(watching.models, [{ provider: "openai", model: "stub", ...named, nCtx: 8192, chatFormat: "openai", reasons: false }]);
  await daemon.connection.sendNotification("workspace/didChangeConfiguration", { settings: { chat: { model: "other", n_ctx: 4096 } } });
  assert.deepEqual(await watching.nextModel((model) => model?.model === "other"),
    { provider: "openai", model: "other", ...named, name: "other", nCtx: 4096, chatFormat: "openai", reasons: false });
  // Unsetting them goes back to the environment's, and the status bar follows.
  await daemon.connection.sendNotification("workspace/didChangeConfiguration", { settings: { chat: { model: null, n_ctx: null } } });
  assert.deepEqual(await watching.nextModel((model) => watching.models.indexOf(model) > 1 && model?.model === "stub"),
    { provider: "openai", model: "stub", ...named, nCtx: 8192, chatFormat: "openai", reasons: false });
  watching.controller.dispose();
});

test("the context meter gets each round's usage during a reply and the next question's when a session opens", async () => {
  writeFileSync(path.join(home.workspace, "notes.txt"), "The billing service listens on 8101.\n");
  await stub.queue({ toolCalls: [{ id: "call_read", name: "read_file", arguments: { path: "notes.txt" } }] }, "The notes say 8101 [1].");
  await panel.controller.ask("What do the notes say?");
  const rounds = panel.ofType("context").map((message) => message.usage).filter((usage) => usage !== null);
  const requests = await stub.requests();
  assert.equal(rounds.length, requests.length, "one usage per round");
  for (const usage of rounds) {
    assert.equal(usage!.sessionId, panel.controller.sessionId);
    assert.equal(usage!.nCtx, 8192);
    assert.equal(usage!.outputAllowance, requests[0].max_tokens);
    assert.equal(Object.values(usage!.parts).reduce((sum, part) => sum + part, 0), usage!.used);
    assert.equal(usage!.exact, false, "a remote model's count is an estimate");
  }
  assert.ok(rounds[1]!.parts.research > 0, "the second round carries the read");

  panel.clear();
  await panel.controller.openSession(panel.controller.sessionId!);
  const [next] = panel.ofType("context").filter((message) => message.usage !== null);
  assert.equal(next.usage!.replyId, null);
  assert.equal(next.usage!.parts.question, 0);
  assert.deepEqual(next.usage!.inView.at(-1)?.at(-1), 4, "the stored answer is in view");
});

test("search finds stored messages and opening one shows its session scrolled to the message", async () => {
  await stub.queue("Paris.", "Billing listens on port 8101.");
  await panel.controller.ask("Capital of France?");
  panel.controller.newChat();
  await panel.controller.ask("Which port does billing use?");

  const found = await panel.controller.searchConversations("capital france");
  assert.equal(found.query, "capital france");
  const [hit] = found.hits;
  assert.equal(hit.seq, 1);
  assert.equal(hit.title, "Capital of France?");
  assert.deepEqual(hit.snippet.filter((part) => part.match).map((part) => part.text), ["Capital", "France"]);

  panel.messages.length = 0;
  await panel.controller.openSessionAt(hit.sessionId, hit.seq);
  const [reset] = panel.ofType("reset");
  assert.equal(reset.title, "Capital of France?");
  assert.deepEqual(panel.ofType("reveal").map((message) => message.seq), [1]);
  assert.ok(panel.messages.indexOf(reset) < panel.messages.findIndex((message) => message.type === "reveal"));

  await assert.rejects(panel.controller.searchConversations("  "), /query: .* has no word to search for/);
});

test("rename, export and compact act on the open conversation", async () => {
  await stub.queue("Noted.", "About topic three.", "- (#1–#2) The user pasted the staging compose file.");
  assert.equal(await panel.controller.compact(), undefined); // nothing open yet
  await panel.controller.ask("Here is the staging compose file.");
  await panel.controller.ask("What about topic three?");

  const renamed = await panel.controller.renameSession("Staging notes");
  assert.equal(renamed?.title, "Staging notes");
  const exported = await panel.controller.exportSession();
  assert.ok(exported?.text.startsWith("# Staging notes\n"));
  assert.ok(exported?.text.includes("## You (#3)\n\nWhat about topic three?"));
  assert.equal(exported?.fileName, "imprint-staging-notes.md");

  panel.clear();
  const compacted = await panel.controller.compact();
  assert.equal(compacted?.compacted, true);
  assert.equal(compacted?.note, "The summary now covers messages #1–#2.");
  assert.equal(compacted?.summary?.text, "- (#1–#2) The user pasted the staging compose file.");
  // The panel shows the summary at once, as the reopened session shows it: before the first
  // message it does not cover; the meter counts it in.
  const [shown] = panel.ofType("reset");
  assert.ok(shown, "the panel shows the conversation again, with its summary");
  assert.equal(shown.title, "Staging notes");
  assert.deepEqual(shown.items.map((item) => (item.kind === "summary" ? `summary #${item.summary.firstSeq}–#${item.summary.lastSeq}` : `${item.kind} #${item.seq}`)),
    ["user #1", "assistant #2", "summary #1–#2", "user #3", "assistant #4"]);
  const summaryItem = shown.items.find((item) => item.kind === "summary");
  assert.equal(summaryItem?.kind === "summary" && summaryItem.summary.text, compacted?.summary?.text);
  const meter = await panel.next("context", (message) => message.usage !== null);
  assert.ok(meter.usage!.parts.summary > 0, "the meter counts the summary");
  const again = await panel.controller.compact();
  assert.equal(again?.compacted, false);
  assert.match(again?.note ?? "", /^Nothing to summarize/);
});

test("the model picker offers the server's models and the chat GGUFs found, never a file that is not one", async () => {
  const embedded = spawnSync(python(), ["-c", "from imprintd.models.embedded import find_embedded_model as f; print(f() or '')"],
    { env: pythonEnv(), encoding: "utf8" }).stdout.trim();
  assert.ok(embedded, "the embedded model comes with the test dependencies");
  const folder = path.join(home.root, "models");
  mkdirSync(folder);
  symlinkSync(embedded, path.join(folder, "smol.gguf"));
  writeFileSync(path.join(folder, "notes.gguf"), "not a model");
  await daemon.connection.sendNotification("workspace/didChangeConfiguration", { settings: { chat: { models_dir: folder } } });

  const found = await panel.controller.listModels();
  assert.equal(found.current.model, "stub");
  const mine = found.models.filter((model) => model.source === "models_dir");
  assert.deepEqual(mine.map((model) => [path.basename(model.path), model.chat]), [["smol.gguf", true], ["notes.gguf", false]]);
  const offered = modelChoices(found).filter((choice) => choice.provider === "openai" || choice.path.startsWith(folder));
  assert.deepEqual(offered.map((choice) => [choice.label, choice.provider, choice.path]), [
    ["stub", "openai", "stub"], // the scripted server's /v1/models: choosing it keeps provider openai
    ["smol.gguf", "local", path.join(folder, "smol.gguf")], // named as the status bar names it in use
  ]);
  assert.equal(offered[1].description, "Q4_1 · 94 MiB · 8192 ctx · models_dir");
});

/** The embedded GGUF as `models/smol.gguf` under the test's home, and that folder. */
function smolModel(): { folder: string; file: string } {
  const embedded = spawnSync(python(), ["-c", "from imprintd.models.embedded import find_embedded_model as f; print(f() or '')"],
    { env: pythonEnv(), encoding: "utf8" }).stdout.trim();
  assert.ok(embedded, "the embedded model comes with the test dependencies");
  const folder = path.join(home.root, "models");
  mkdirSync(folder, { recursive: true });
  symlinkSync(embedded, path.join(folder, "smol.gguf"));
  return { folder, file: path.join(folder, "smol.gguf") };
}

test("a model picked is one settings change, and the status bar names it as the picker offered it", async () => {
  const { folder, file } = smolModel();
  // The editor's settings as the extension sends them: each change, and a pick's updates together.
  let set: Partial<Record<EditorKey, unknown>> = {};
  const sentSettings = new SentSettings();
  sentSettings.initial((key) => set[key]);
  const sent: object[] = [];
  const changes = new SettingsChanges(() => {
    const settings = sentSettings.news((key) => set[key]);
    if (!settings) return;
    sent.push(settings);
    void daemon.connection.sendNotification("workspace/didChangeConfiguration", { settings });
  });
  set = { "chat.modelsDir": folder };
  changes.changed();
  const found = await panel.controller.listModels();
  const choice = modelChoices(found).find((offered) => offered.path === file)!;
  assert.ok(choice, "the picker offers the GGUF");
  sent.length = 0;
  await changes.together(async () => {
    set = { ...set, "chat.provider": choice.provider };
    changes.changed();
    await new Promise((resolve) => setImmediate(resolve)); // as a settings write: the next update comes later
    set = { ...set, "chat.model": choice.path };
    changes.changed();
  });
  changes.changed(); // a change event after the pick's: nothing new to send
  assert.deepEqual(sent, [{ chat: { models_dir: folder, provider: "local", model: file } }]);

  const inUse = await panel.nextModel((model) => model?.model === "smol.gguf");
  // The daemon was never told of the server's model under the local provider.
  assert.ok(!panel.models.some((model) => model?.provider === "local" && model.model === "stub"), JSON.stringify(panel.models));
  // The status bar shows the name the daemon sent, the one the picker offered it by.
  assert.equal(inUse?.name, choice.label);
  assert.equal(statusBar("ready", "", inUse).text, `$(comment-discussion) Imprint · local · ${choice.label}`);
});

test("a local model in use is shown by the daemon's name from the start, with no imprint/models asked for it", async () => {
  const { folder, file } = smolModel();
  const local = await Daemon.start(home, stub, { chat: { provider: "local", model: file, models_dir: folder } });
  const asked: string[] = [];
  const recording: ChatConnection = {
    sendRequest: ((method: string, ...rest: [object, CancellationToken?]) => {
      asked.push(method);
      return (local.connection.sendRequest as (method: string, ...rest: unknown[]) => Promise<unknown>)(method, ...rest);
    }) as ChatConnection["sendRequest"],
    sendNotification: (method, params) => local.connection.sendNotification(method, params),
    onNotification: (method, handler) => local.connection.onNotification(method, handler),
    onRequest: (method, handler) => local.connection.onRequest(method, handler),
    onProgress: (type, token, handler) => local.connection.onProgress(type, token, handler),
  };
  const watching = new RecordedPanel(home.workspace);
  try {
    await watching.controller.attach(recording, local.initializeResult);
    const [reported] = watching.models;
    assert.equal(reported?.model, "smol.gguf");
    // The name it is shown by is the daemon's, the same string its imprint/models entry gives it.
    const listed = await local.connection.sendRequest<wire.ModelsResult>(wire.MODELS, {});
    const entry = listed.models.find((model) => model.path === file)!;
    assert.equal(reported?.name, entry.name);
    assert.equal(statusBar("ready", "", reported).text, `$(comment-discussion) Imprint · local · ${entry.name}`);
    assert.deepEqual(watching.models.length, 1, "reported once, never renamed after a listing");
    assert.ok(!asked.includes(wire.MODELS), `the disk was not scanned for a name: ${asked.join(", ")}`);
  } finally {
    watching.controller.dispose();
    await local.stop();
  }
});

test("a served model's window smaller than chat.n_ctx is shown with where it comes from: status bar and meter", async () => {
  // llama-server's /props, as the scripted server answers it: one slot's window of 4,096 tokens, half of chat.n_ctx.
  await stub.endpoint("GET /props", { default_generation_settings: { n_ctx: 4096, params: { n_predict: -1 } } });
  await stub.queue("Paris.");
  await panel.controller.ask("Capital of France?");
  assert.equal(panel.ofType("replyEnd").at(-1)?.text, "Paris.");
  const report = await panel.nextModel((model) => model?.nCtxSource === "llama-server /props n_ctx");
  assert.deepEqual([report?.nCtx, report?.serverNCtx, report?.name], [4096, 4096, "stub"]);
  const tooltip = statusBar("ready", "", report).tooltip.split("\n");
  assert.equal(tooltip[1], "Model: openai · stub, context 4,096 tokens (llama-server /props n_ctx)");
  // The meter's usage for the reply's round carries the same window and source.
  const usage = panel.ofType("context").map((message) => message.usage).filter((shown) => shown !== null).at(-1)!;
  assert.deepEqual([usage.nCtx, usage.nCtxSource], [4096, "llama-server /props n_ctx"]);
  // What reached the model was fitted to that window: at most a quarter of it for the answer.
  const [request] = await stub.requests();
  assert.ok(request.max_tokens! > 0 && request.max_tokens! <= 4096 / 4, String(request.max_tokens));
  assert.equal(usage.outputAllowance, request.max_tokens);
});

test("the context meter follows a new context window at once, not at the next question", async () => {
  await stub.queue("Paris.");
  await panel.controller.ask("Capital of France?");
  panel.clear();
  await daemon.connection.sendNotification("workspace/didChangeConfiguration", { settings: { chat: { n_ctx: 4096 } } });
  const deadline = Date.now() + 60_000;
  let shown: wire.ContextUsage | null = null;
  while (Date.now() < deadline) {
    shown = panel.ofType("context").map((message) => message.usage).find((usage) => usage?.nCtx === 4096) ?? null;
    if (shown) break;
    await new Promise((resolve) => setImmediate(resolve));
  }
  assert.ok(shown, "the meter got the new window");
  assert.equal(shown!.replyId, null);
  assert.equal(shown!.sessionId, panel.controller.sessionId);
  assert.equal((await stub.requests()).length, 1, "no question was asked for it");
});

/** A git repository with two commits, the last one's message returned (mcp-server-git serves it). */
function gitRepository(root: string): { repo: string; latest: string } {
  const env = {
    ...process.env, GIT_AUTHOR_NAME: "Imprint Tests", GIT_AUTHOR_EMAIL: "tests@imprint.invalid",
    GIT_COMMITTER_NAME: "Imprint Tests", GIT_COMMITTER_EMAIL: "tests@imprint.invalid", GIT_CONFIG_GLOBAL: "/dev/null", GIT_CONFIG_NOSYSTEM: "1",
  };
  const git = (...args: string[]) => {
    const run = spawnSync("git", args, { cwd: root, env, encoding: "utf8" });
    assert.equal(run.status, 0, run.stderr);
    return run.stdout;
  };
  mkdirSync(root, { recursive: true });
  git("init", "-q", "-b", "main");
  for (const [port, message] of [["8080", "Add the billing service on port 8080"], ["8101", "Move billing to port 8101 behind the gateway"]]) {
    writeFileSync(path.join(root, "billing.yaml"), `port: ${port}\n`);
    git("add", "billing.yaml");
    git("commit", "-q", "-m", message);
  }
  return { repo: root, latest: "Move billing to port 8101 behind the gateway" };
}

function branchesOf(repo: string): string[] {
  return spawnSync("git", ["-C", repo, "branch", "--format=%(refname:short)"], { encoding: "utf8" }).stdout.split("\n").filter(Boolean);
}

test("imprint.mcpServers reaches the daemon: git's read-only tool runs unasked, one that may act waits for the modal, steps name the server", async () => {
  const { repo, latest } = gitRepository(path.join(home.root, "repo"));
  const servers = { git: { command: python(), args: ["-m", "mcp_server_git", "--repository", repo] } };
  // As the extension sends them: imprint.mcpServers becomes chat.mcp_servers in initializationOptions
  // (a window wide enough for the git server's tool schemas whole).
  const set: Record<string, unknown> = { mcpServers: servers, "chat.contextWindow": 32768 };
  const settings = new SentSettings().initial((key) => set[key]);
  assert.deepEqual(settings.chat.mcp_servers, servers);
  await daemon.stop();
  daemon = await Daemon.start(home, stub, settings);
  const asked: { message: string; detail: string; labels: string[] }[] = [];
  const choices: (string | undefined)[] = ["Allow once", undefined /* the modal closed */];
  const mcp = new RecordedPanel(home.workspace, {
    askPermission: async (question, labels) => {
      asked.push({ ...question, labels });
      return choices.shift();
    },
  });
  mcp.controller.attach(daemon.connection);
  await stub.queue(
    { toolCalls: [{ id: "call_log", name: "git__git_log", arguments: { repo_path: repo } }] },
    { toolCalls: [{ id: "call_branch", name: "git__git_create_branch", arguments: { repo_path: repo, branch_name: "topic" } }] },
    "Branched topic off the last commit [1].",
    { toolCalls: [{ id: "call_branch", name: "git__git_create_branch", arguments: { repo_path: repo, branch_name: "refused" } }] },
    "I did not make it.",
  );

  await mcp.controller.ask("Branch topic off the last commit");

  assert.equal(asked.length, 1, "only the tool that may act asked");
  assert.match(asked[0].message, /“git”.*git_create_branch/);
  assert.match(asked[0].detail, /"branch_name": "topic"/);
  assert.deepEqual(asked[0].labels, ["Allow once", "Always allow", "Reject"]);
  assert.ok(branchesOf(repo).includes("topic"));
  const steps = mcp.ofType("toolStep");
  assert.deepEqual(steps.map((step) => step.state), ["started", "finished", "started", "finished"]);
  assert.ok(steps.every((step) => step.title.includes("git")), JSON.stringify(steps));
  const requests = await stub.requests();
  const toolText = (request: { messages: { role: string; content: string | null }[] }) =>
    request.messages.filter((message) => message.role === "tool").map((message) => message.content ?? "").join("\n");
  assert.ok(toolText(requests[1]).includes(latest), "git log's output reached the model");
  assert.ok(toolText(requests[2]).includes("topic"), "the branch's result reached the model");
  // The git log it cites is a source of kind "tool", with its server, tool and arguments.
  const cited = mcp.ofType("replyEnd")[0].sources.find((source) => source.number === 1);
  assert.equal(cited?.kind, "tool", JSON.stringify(mcp.ofType("replyEnd")[0].sources));
  assert.deepEqual(cited?.origin, { server: "git", tool: "git_log", arguments: { repo_path: repo }, uri: null });

  await mcp.controller.ask("And one named refused");
  assert.equal(asked.length, 2);
  assert.ok(!branchesOf(repo).includes("refused"), "a closed modal is a reject");
  assert.ok(toolText((await stub.requests())[4]).includes("declined"), "the model is told it did not run");
  assert.equal(mcp.ofType("toolStep").at(-1)!.state, "failed");

  // Reopened, the stored calls show with their server too.
  const sessionId = mcp.controller.sessionId!;
  await mcp.controller.openSession(sessionId);
  const reset = mcp.ofType("reset").at(-1)!;
  const rows = reset.items.flatMap((item) => (item.kind === "assistant" ? item.steps.map((step) => [step.title, step.state]) : []));
  assert.deepEqual(rows, [["git · git_log", "finished"], ["git · git_create_branch", "finished"], ["git · git_create_branch", "failed"]]);
  mcp.controller.dispose();
});
