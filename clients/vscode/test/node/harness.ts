/**
 * Real parts for the controller tests: the scripted OpenAI-compatible server
 * (`python -m tests.openai_stub_cli`) and the real `imprintd serve --stdio`, spoken to with a
 * plain vscode-jsonrpc connection (Python as test/python.ts chooses it).
 */

import { ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import { MessageConnection, StreamMessageReader, StreamMessageWriter, createMessageConnection } from "vscode-jsonrpc/node";
import { ChatController, ControllerOptions } from "../../src/chat/controller";
import { ToView } from "../../src/chat/view";
import { CLIENT_EXPERIMENTAL, type ModelReport } from "../../src/protocol";
import { REPO_ROOT, python, pythonEnv } from "../python";

export interface StubReplySpec {
  text?: string;
  toolCalls?: { id?: string; name: string; arguments?: Record<string, unknown> }[];
  hold?: boolean;
  /** What the model thinks first, sent as `reasoning_content` deltas. */
  reasoning?: string;
}

export interface ModelRequest {
  model: string;
  max_tokens?: number;
  messages: { role: string; content: string | null }[];
  tools?: unknown[];
  [key: string]: unknown;
}

/** The scripted model server, driven over its stdin/stdout command lines. */
export class Stub {
  private waiting: ((line: string) => void)[] = [];

  private constructor(private readonly proc: ChildProcess, readonly baseUrl: string, lines: AsyncIterator<string>) {
    void (async () => {
      for (;;) {
        const next = await lines.next();
        if (next.done) break;
        this.waiting.shift()?.(next.value);
      }
    })();
  }

  static async start(): Promise<Stub> {
    const proc = spawn(python(), ["-m", "tests.openai_stub_cli"], { cwd: REPO_ROOT, env: pythonEnv(), stdio: ["pipe", "pipe", "inherit"] });
    const lines = createInterface({ input: proc.stdout! })[Symbol.asyncIterator]();
    const first = await lines.next();
    if (first.done) throw new Error(`the stub model server did not start (${python()} -m tests.openai_stub_cli)`);
    return new Stub(proc, JSON.parse(first.value).baseUrl, lines);
  }

  private command<R>(command: object): Promise<R> {
    return new Promise((resolve, reject) => {
      this.waiting.push((line) => {
        const answer = JSON.parse(line);
        if (answer.error) reject(new Error(answer.error)); else resolve(answer as R);
      });
      this.proc.stdin!.write(JSON.stringify(command) + "\n");
    });
  }

  queue(...replies: (StubReplySpec | string)[]): Promise<unknown> {
    return this.command({ cmd: "queue", replies: replies.map((reply) => (typeof reply === "string" ? { text: reply } : reply)) });
  }

  async requests(): Promise<ModelRequest[]> {
    return (await this.command<{ requests: ModelRequest[] }>({ cmd: "requests" })).requests;
  }

  release(): Promise<unknown> {
    return this.command({ cmd: "release" });
  }

  /** Answers another server's endpoint ("GET /props": llama-server's, with a served model's window) with `body`. */
  endpoint(key: string, body: unknown, status = 200): Promise<unknown> {
    return this.command({ cmd: "endpoint", key, status, body });
  }

  stop(): void {
    this.proc.stdin!.end();
  }
}

/** A temporary home for one daemon's data, cache, config and workspace. */
export class Home {
  readonly root = mkdtempSync(path.join(tmpdir(), "imprint-vscode-"));
  readonly workspace = path.join(this.root, "workspace");

  constructor() {
    mkdirSync(this.workspace);
  }

  env(stub: Stub): Record<string, string> {
    return {
      IMPRINT_DATA_DIR: path.join(this.root, "data"),
      IMPRINT_CACHE_DIR: path.join(this.root, "cache"),
      IMPRINT_CONFIG: path.join(this.root, "config.toml"),
      IMPRINT_CHAT_PROVIDER: "openai",
      IMPRINT_CHAT_BASE_URL: stub.baseUrl,
      IMPRINT_CHAT_MODEL: "stub",
      IMPRINT_CHAT_N_CTX: "8192",
      IMPRINT_CHAT_FIRST_LOOK: "false", // the scripted model's rounds are the test's own
    };
  }

  remove(): void {
    rmSync(this.root, { recursive: true, force: true });
  }
}

/** The real daemon over real stdio. */
export class Daemon {
  readonly stderr: string[] = [];
  readonly exited: Promise<number | null>;

  /** The `initialize` result (capabilities.experimental.imprint names the model). */
  initializeResult: { capabilities?: { experimental?: unknown }; serverInfo?: { name: string; version?: string } } = {};

  private constructor(readonly proc: ChildProcess, readonly connection: MessageConnection) {
    proc.stderr!.on("data", (chunk) => this.stderr.push(String(chunk)));
    // As LanguageClient does: a closed stream disposes the connection, which rejects pending requests.
    connection.onClose(() => connection.dispose());
    this.exited = new Promise((resolve) => proc.on("exit", (code) => resolve(code)));
  }

  /** `folder: false` starts it as an untrusted window does: no workspace folder, no root. */
  static async start(home: Home, stub: Stub, initializationOptions: object = {}, { folder = true } = {}): Promise<Daemon> {
    const proc = spawn(python(), ["-m", "imprintd", "serve", "--stdio"], {
      cwd: REPO_ROOT, env: pythonEnv(home.env(stub)), stdio: ["pipe", "pipe", "pipe"],
    });
    const connection = createMessageConnection(new StreamMessageReader(proc.stdout!), new StreamMessageWriter(proc.stdin!));
    const daemon = new Daemon(proc, connection);
    connection.listen();
    const initialized = connection.sendRequest("initialize", {
      processId: process.pid,
      clientInfo: { name: "imprint-vscode-test" },
      rootUri: null,
      // As the extension does (PermissionRequestsFeature): it answers imprint/requestPermission.
      capabilities: { window: { workDoneProgress: true, showMessage: {} }, experimental: CLIENT_EXPERIMENTAL },
      workspaceFolders: folder ? [{ uri: pathToFileURL(home.workspace).href, name: "workspace" }] : null,
      initializationOptions,
    });
    try {
      daemon.initializeResult = (await initialized) as Daemon["initializeResult"];
    } catch (error) {
      daemon.proc.kill("SIGKILL");
      await daemon.exited;
      throw new Error(`imprintd did not initialize (${python()} -m imprintd serve --stdio): ${String(error)}\n${daemon.stderr.join("")}`);
    }
    await connection.sendNotification("initialized", {});
    return daemon;
  }

  kill(): Promise<number | null> {
    this.proc.kill("SIGKILL");
    return this.exited;
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) {
      this.connection.dispose();
      return;
    }
    try {
      await this.connection.sendRequest("shutdown");
      await this.connection.sendNotification("exit");
    } catch {
      this.proc.kill("SIGKILL");
    }
    await this.exited;
    this.connection.dispose();
  }
}

/** A controller whose panel updates are recorded, with waits on what arrives. */
export class RecordedPanel {
  readonly messages: ToView[] = [];
  readonly opened: { path: string; startLine: number | null; endLine: number | null }[] = [];
  /** What the controller asked to keep for a window reload (rememberSession), in order. */
  readonly remembered: (string | undefined)[] = [];
  /** Each model the controller reported for the status bar (onModel), in order. */
  readonly models: (ModelReport | undefined)[] = [];
  private modelWatchers: { test: (model: ModelReport | undefined) => boolean; resolve: (model: ModelReport | undefined) => void }[] = [];
  private watchers: { test: (message: ToView) => boolean; resolve: (message: ToView) => void }[] = [];
  readonly controller: ChatController;

  constructor(workspace: string | undefined, options: Partial<ControllerOptions> = {}) {
    this.controller = new ChatController({
      post: (message) => this.record(message),
      workspace: () => workspace,
      openSource: (file, startLine, endLine) => this.opened.push({ path: file, startLine, endLine }),
      rememberSession: (sessionId) => this.remembered.push(sessionId),
      onModel: (model) => this.recordModel(model),
      ...options,
    });
  }

  private recordModel(model: ModelReport | undefined): void {
    this.models.push(model);
    this.modelWatchers = this.modelWatchers.filter((watcher) => !(watcher.test(model) && (watcher.resolve(model), true)));
  }

  /** The first model report (already made or still to come) that passes `test`. */
  nextModel(test: (model: ModelReport | undefined) => boolean): Promise<ModelReport | undefined> {
    const index = this.models.findIndex((model) => test(model));
    if (index >= 0) return Promise.resolve(this.models[index]);
    return new Promise((resolve) => this.modelWatchers.push({ test, resolve }));
  }

  private record(message: ToView): void {
    this.messages.push(message);
    this.watchers = this.watchers.filter((watcher) => {
      if (!watcher.test(message)) return true;
      watcher.resolve(message);
      return false;
    });
  }

  /** The first message (already posted or still to come) that passes `test`. */
  next<T extends ToView["type"]>(type: T, test: (message: Extract<ToView, { type: T }>) => boolean = () => true, since = 0): Promise<Extract<ToView, { type: T }>> {
    const matches = (message: ToView): boolean => message.type === type && test(message as Extract<ToView, { type: T }>);
    const found = this.messages.slice(since).find(matches);
    if (found) return Promise.resolve(found as Extract<ToView, { type: T }>);
    return new Promise((resolve) => this.watchers.push({ test: matches, resolve: resolve as (message: ToView) => void }));
  }

  ofType<T extends ToView["type"]>(type: T): Extract<ToView, { type: T }>[] {
    return this.messages.filter((message) => message.type === type) as Extract<ToView, { type: T }>[];
  }

  clear(): void {
    this.messages.length = 0;
  }
}
