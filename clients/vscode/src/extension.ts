/**
 * The VS Code side of Imprint: starts `imprintd serve --stdio` with vscode-languageclient, hosts
 * the chat webview, and registers commands, settings and the status bar item.
 *
 * The only file that imports `vscode`; all behaviour worth testing lives in `chat/`.
 */

import { existsSync } from "node:fs";
import { homedir } from "node:os";
import * as path from "node:path";
import { createInterface } from "node:readline";
import * as vscode from "vscode";
import {
  CloseAction, ErrorAction, LanguageClient, LanguageClientOptions, RevealOutputChannelOn, ServerOptions, State, StaticFeature,
  TransportKind,
} from "vscode-languageclient/node";
import { ChatController } from "./chat/controller";
import { DaemonLog } from "./chat/daemonLog";
import { missingDaemonMessage, resolveExecutable } from "./chat/executable";
import { exportPath } from "./chat/exportFile";
import { chatHtml } from "./chat/html";
import { modelChoices, modelName } from "./chat/models";
import {
  EditorKey, SETTINGS, STATUS_BAR_COMMAND, SentSettings, SettingsChanges, explicitOf, statusBar,
} from "./chat/settings";
import { ConnectionStatus, FromView, ResearchState, ToView } from "./chat/view";
import * as wire from "./protocol";
import type { ModelReport } from "./protocol";


/** workspaceState key of the session the panel showed, opened again after a window reload. */
const OPEN_SESSION = "imprint.openSession";

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const log = vscode.window.createOutputChannel("Imprint", { log: true });
  const status = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  status.command = STATUS_BAR_COMMAND; // the model it names: click to pick another (Show Log is a command)
  status.name = "Imprint";
  status.show();

  const chatView = new ChatViewProvider(context.extensionUri);
  const shown = { state: "starting" as ConnectionStatus, detail: "", model: undefined as ModelReport | undefined };
  const controller = new ChatController({
    post: (message) => chatView.post(message),
    workspace: currentWorkspace,
    research: researchState,
    openSource: (file, startLine, endLine) => void openSource(file, startLine, endLine),
    openUri: (uri) => void vscode.env.openExternal(vscode.Uri.parse(uri, true)),
    onStatus: (state, detail) => showStatus(status, Object.assign(shown, { state, detail })),
    onModel: (model) => showStatus(status, Object.assign(shown, { model })),
    rememberSession: (sessionId) => void context.workspaceState.update(OPEN_SESSION, sessionId),
    restoreSession: context.workspaceState.get<string>(OPEN_SESSION),
    manageTrust: () => void vscode.commands.executeCommand("workbench.trust.manage"),
    openFolder: () => void vscode.commands.executeCommand("vscode.openFolder"),
    // Modal: an MCP tool that may act waits for an answer; closing the dialog answers undefined (a reject).
    askPermission: (question, labels) =>
      Promise.resolve(vscode.window.showWarningMessage(question.message, { modal: true, detail: question.detail }, ...labels)),
  });
  chatView.onMessage = (message) => void controller.handle(message);
  const daemon = new Daemon(log, controller);
  running = daemon;
  const settingsChanges = new SettingsChanges(() => daemon.sendSettings());

  context.subscriptions.push(
    log, status, controller,
    vscode.window.registerWebviewViewProvider("imprint.chat", chatView, { webviewOptions: { retainContextWhenHidden: true } }),
    vscode.commands.registerCommand("imprint.newChat", () => controller.newChat()),
    vscode.commands.registerCommand("imprint.openSession", () => pickSession(controller, "open")),
    vscode.commands.registerCommand("imprint.deleteSession", () => pickSession(controller, "delete")),
    vscode.commands.registerCommand("imprint.askAboutSelection", () => askAboutSelection(controller, chatView)),
    vscode.commands.registerCommand("imprint.cancelReply", () => controller.stop()),
    vscode.commands.registerCommand("imprint.restartDaemon", () => daemon.restart()),
    vscode.commands.registerCommand("imprint.showLog", () => log.show()),
    vscode.commands.registerCommand("imprint.searchConversations", () => searchConversations(controller)),
    vscode.commands.registerCommand("imprint.exportConversation", () => exportConversation(controller)),
    vscode.commands.registerCommand("imprint.compactConversation", () => compactConversation(controller)),
    vscode.commands.registerCommand("imprint.renameConversation", () => renameConversation(controller)),
    vscode.commands.registerCommand("imprint.pickModel", () => pickModel(controller, settingsChanges)),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration("imprint.serverPath")) void daemon.restart();
      else if (event.affectsConfiguration("imprint.chat") || event.affectsConfiguration("imprint.mcpServers")) settingsChanges.changed();
    }),
    // Trust sends the folder, which only `initialize` carries: a new daemon gets it.
    vscode.workspace.onDidGrantWorkspaceTrust(() => {
      controller.setResearch();
      void daemon.restart();
    }),
    vscode.workspace.onDidChangeWorkspaceFolders(() => controller.setResearch()),
  );
  void daemon.start();
  warnRenamedSettings();
}

/** Settings still set under their former snake_case names (`imprint.chat.max_tokens`) are no longer read: say so. */
function warnRenamedSettings(): void {
  const config = vscode.workspace.getConfiguration("imprint");
  const renamed = SETTINGS.filter(({ daemon, editor }) => {
    if (daemon === editor) return false;
    const old = config.inspect(daemon);
    return old?.globalValue !== undefined || old?.workspaceValue !== undefined || old?.workspaceFolderValue !== undefined;
  });
  if (!renamed.length) return;
  const names = renamed.map(({ daemon, editor }) => `imprint.${daemon} → imprint.${editor}`).join(", ");
  void vscode.window.showWarningMessage(`Imprint's settings were renamed and the old names are no longer read: ${names}.`);
}

/** VS Code waits for the daemon's `shutdown`/`exit` before the extension host goes. */
export function deactivate(): Promise<void> | undefined {
  return running?.stop();
}

let running: Daemon | undefined;

const MAX_RESTARTS = 4;
const RESTART_WINDOW_MS = 3 * 60 * 1000;

/** The daemon process and its language client, restarted when it dies. */
class Daemon {
  private client: LanguageClient | undefined;
  private restarts: number[] = [];
  private readonly settings = new SentSettings();

  constructor(private readonly log: vscode.LogOutputChannel, private readonly controller: ChatController) {}

  async start(): Promise<void> {
    this.controller.setStatus("starting", "");
    const configured = vscode.workspace.getConfiguration("imprint").get<string>("serverPath") || "imprintd";
    const command = resolveExecutable(configured);
    if (!command) {
      this.controller.detach(`“${configured}” was not found`);
      this.log.error(`imprintd not found: “${configured}” is not an executable file or on PATH (${process.env.PATH ?? ""})`);
      void this.offerInstall(missingDaemonMessage(configured, vscode.env.remoteName));
      return;
    }
    const client = this.createClient(command);
    this.client = client;
    client.onDidChangeState((change) => {
      if (change.newState === State.Running && this.client === client) void this.controller.attach(client, client.initializeResult);
    });
    try {
      await client.start();
    } catch (error) {
      this.controller.detach(String(error));
      this.log.error(`imprintd did not start: ${String(error)}`);
      void this.offerInstall(`Imprint could not start its daemon (${command}): ${String(error)}`);
    }
  }

  async restart(): Promise<void> {
    this.restarts = [];
    // Questions asked from here on wait for the new daemon instead of failing.
    this.controller.detach("Restarting the Imprint daemon…", true);
    await this.stop();
    await this.start();
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    await client?.dispose(2000).catch(() => undefined);
  }

  /** The settings set now, and `null` for each one this daemon was sent that is no longer set; nothing when they are those sent. */
  sendSettings(): void {
    if (!this.client?.isRunning()) return;
    const settings = this.settings.news(explicitValue);
    if (settings) void this.client.sendNotification("workspace/didChangeConfiguration", { settings });
  }

  private createClient(command: string): LanguageClient {
    // TransportKind.stdio appends --stdio: the daemon runs as `imprintd serve --stdio`.
    const serverOptions: ServerOptions = { command, args: ["serve"], transport: TransportKind.stdio };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [],
      // A function: a daemon the client restarts after a crash gets the settings of then, not of the first start.
      initializationOptions: () => this.settings.initial(explicitValue),
      outputChannel: this.log,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      stdioOptions: {
        stdout: () => undefined, // with the stdio transport stdout is the protocol stream, which the client reads itself
        // Each daemon log line at its own level, without the daemon's timestamp (the channel adds one).
        stderr: (input, channel) => {
          const daemonLog = new DaemonLog();
          createInterface({ input, crlfDelay: Infinity, terminal: false }).on("line", (line) => {
            const record = daemonLog.line(line);
            channel[record.level](record.text);
          });
        },
      },
      errorHandler: {
        error: () => ({ action: ErrorAction.Continue }),
        closed: () => {
          // Restart a daemon that died, but not one that dies again and again (as LanguageClient's default).
          const now = Date.now();
          this.restarts = this.restarts.filter((at) => now - at < RESTART_WINDOW_MS);
          if (this.restarts.length >= MAX_RESTARTS) {
            this.controller.detach("The Imprint daemon keeps stopping; see “Imprint: Show Log”.");
            return { action: CloseAction.DoNotRestart, message: "The Imprint daemon stopped 5 times in 3 minutes and will not be restarted. See “Imprint: Show Log”, then “Imprint: Restart Daemon”." };
          }
          this.restarts.push(now);
          this.controller.detach("The Imprint daemon stopped; restarting it.", true);
          return { action: CloseAction.Restart, handled: true };
        },
      },
    };
    const client = new LanguageClient("imprint", "Imprint", serverOptions, clientOptions);
    client.registerFeature(new UntrustedWorkspaceFeature());
    client.registerFeature(new PermissionRequestsFeature());
    return client;
  }

  private async offerInstall(message: string): Promise<void> {
    const choice = await vscode.window.showErrorMessage(message, "Set path", "Show Log");
    if (choice === "Show Log") this.log.show();
    if (choice !== "Set path") return;
    const picked = await vscode.window.showOpenDialog({ title: "The imprintd executable", canSelectMany: false, openLabel: "Use this imprintd" });
    if (!picked?.[0]) return;
    // `imprint.serverPath` is machine-overridable: Global writes the settings of the machine the
    // extension runs on (User settings locally, the Remote settings in a remote window), which is
    // where it is read. Changing it restarts the daemon (onDidChangeConfiguration).
    const config = vscode.workspace.getConfiguration("imprint");
    await config.update("serverPath", picked[0].fsPath, vscode.ConfigurationTarget.Global);
    const inspected = vscode.workspace.getConfiguration("imprint").inspect<string>("serverPath");
    const overridden = inspected?.workspaceFolderValue ?? inspected?.workspaceValue;
    const saved = vscode.env.remoteName ? `Remote settings (${vscode.env.remoteName})` : "User settings";
    if (overridden !== undefined && overridden !== picked[0].fsPath && vscode.workspace.isTrusted) {
      void vscode.window.showWarningMessage(`Saved imprint.serverPath in your ${saved}, but this workspace's settings set it to “${overridden}”, which wins.`);
    } else {
      void vscode.window.showInformationMessage(`Saved imprint.serverPath in your ${saved}: ${picked[0].fsPath}`);
    }
  }
}

/** In an untrusted workspace no folder reaches the daemon, not even in `initialize`. */
class UntrustedWorkspaceFeature implements StaticFeature {
  fillClientCapabilities(): void {}
  fillInitializeParams(params: { workspaceFolders?: unknown; rootUri?: unknown; rootPath?: unknown }): void {
    if (vscode.workspace.isTrusted) return;
    params.workspaceFolders = null;
    params.rootUri = null;
    params.rootPath = null;
  }
  initialize(): void {}
  getState() {
    return { kind: "static" } as const;
  }
  clear(): void {}
}

/** The daemon may ask before an MCP tool runs: `capabilities.experimental.imprint.permissionRequests`. */
class PermissionRequestsFeature implements StaticFeature {
  fillClientCapabilities(capabilities: { experimental?: unknown }): void {
    capabilities.experimental = { ...(capabilities.experimental as object | undefined), ...wire.CLIENT_EXPERIMENTAL };
  }
  initialize(): void {}
  getState() {
    return { kind: "static" } as const;
  }
  clear(): void {}
}

/** The value the user set explicitly (a contributed default must not override config.toml); MCP servers
 *  from a workspace's settings only when it is trusted. */
function explicitValue(key: EditorKey): unknown {
  return explicitOf(key, vscode.workspace.getConfiguration("imprint").inspect(key), vscode.workspace.isTrusted);
}

function researchState(): ResearchState {
  if (!vscode.workspace.isTrusted) return "untrusted";
  return currentWorkspace() ? "on" : "noFolder";
}

function currentWorkspace(): string | undefined {
  if (!vscode.workspace.isTrusted) return undefined;
  const folder = vscode.workspace.workspaceFolders?.[0];
  if (folder?.uri.scheme === "file") return folder.uri.fsPath;
  const active = vscode.window.activeTextEditor?.document.uri;
  return active?.scheme === "file" ? path.dirname(active.fsPath) : undefined;
}

/** The status bar item: the connection's state and the model the daemon reports (not the editor's settings). */
function showStatus(item: vscode.StatusBarItem, { state, detail, model }: { state: ConnectionStatus; detail: string; model: ModelReport | undefined }): void {
  Object.assign(item, statusBar(state, detail, model));
  item.backgroundColor = state === "error" ? new vscode.ThemeColor("statusBarItem.errorBackground") : undefined;
  void vscode.commands.executeCommand("setContext", "imprint.answering", state === "answering");
}

async function openSource(file: string, startLine: number | null, endLine: number | null): Promise<void> {
  const root = currentWorkspace();
  const absolute = path.isAbsolute(file) || !root ? file : path.join(root, file);
  const document = await vscode.workspace.openTextDocument(vscode.Uri.file(absolute));
  if (startLine === null) {
    await vscode.window.showTextDocument(document, { preview: true });
    return;
  }
  const first = Math.min(startLine, document.lineCount) - 1;
  const last = Math.min(Math.max(startLine, endLine ?? startLine), document.lineCount) - 1;
  const range = new vscode.Range(first, 0, last, document.lineAt(last).text.length);
  await vscode.window.showTextDocument(document, { selection: range, preview: true });
}

async function pickSession(controller: ChatController, action: "open" | "delete"): Promise<void> {
  let sessions;
  try {
    sessions = await controller.listSessions();
  } catch (error) {
    void vscode.window.showErrorMessage(`Imprint: could not list sessions: ${String(error)}`);
    return;
  }
  const picked = await vscode.window.showQuickPick(
    sessions.map((session) => ({
      label: session.title || "(untitled)",
      description: `${new Date(session.updatedAt * 1000).toLocaleString()} · ${session.messageCount} messages`,
      detail: session.workspace ?? undefined,
      sessionId: session.sessionId,
    })),
    { placeHolder: action === "open" ? "Open a conversation" : "Delete a conversation", matchOnDescription: true },
  );
  if (!picked) return;
  if (action === "open") {
    await controller.openSession(picked.sessionId);
    await vscode.commands.executeCommand("imprint.chat.focus");
    return;
  }
  const confirm = await vscode.window.showWarningMessage(
    `Delete the conversation “${picked.label}” and its messages? This cannot be undone.`, { modal: true }, "Delete");
  if (confirm === "Delete") await controller.deleteSession(picked.sessionId);
}

/** A search hit as a quick pick row: the snippet with its matched words, the session and message below. */
function hitItem(hit: wire.SearchHit): vscode.QuickPickItem & { hit: wire.SearchHit } {
  const snippet = hit.snippet.map((part) => part.text).join("");
  return {
    label: snippet,
    description: `#${hit.seq} ${hit.role}`,
    detail: `${hit.title || "(untitled)"} · ${new Date(hit.createdAt * 1000).toLocaleString()}`,
    alwaysShow: true,
    hit,
  };
}

/** Search every stored conversation as the user types; the chosen message opens in the panel, highlighted. */
async function searchConversations(controller: ChatController): Promise<void> {
  const pick = vscode.window.createQuickPick<vscode.QuickPickItem & { hit: wire.SearchHit }>();
  pick.placeholder = "Search every conversation";
  pick.matchOnDescription = false;
  pick.matchOnDetail = false;
  let asked = 0;
  pick.onDidChangeValue(async (query) => {
    const mine = ++asked;
    if (!query.trim()) {
      pick.items = [];
      return;
    }
    pick.busy = true;
    try {
      const result = await controller.searchConversations(query);
      if (mine !== asked) return; // a later keystroke's search answers instead
      pick.items = result.hits.map(hitItem);
      pick.title = result.hits.length ? undefined : `Nothing stored matches “${query}”`;
    } catch (error) {
      if (mine === asked) pick.title = String(error instanceof Error ? error.message : error);
      pick.items = [];
    } finally {
      if (mine === asked) pick.busy = false;
    }
  });
  pick.onDidAccept(async () => {
    const chosen = pick.selectedItems[0];
    pick.hide();
    if (!chosen) return;
    await controller.openSessionAt(chosen.hit.sessionId, chosen.hit.seq);
    await vscode.commands.executeCommand("imprint.chat.focus");
  });
  pick.onDidHide(() => pick.dispose());
  pick.show();
}

async function exportConversation(controller: ChatController): Promise<void> {
  const exported = await controller.exportSession("markdown");
  if (!exported) {
    void vscode.window.showInformationMessage("Imprint: open a conversation to export it.");
    return;
  }
  // An untitled editor with the daemon's file name as its path: Save As proposes that name.
  const opened = (file: string) => vscode.workspace.textDocuments.some((document) => document.uri.fsPath === file);
  const file = exportPath(exported.fileName, currentWorkspace() ?? homedir(), (file) => existsSync(file) || opened(file));
  const target = vscode.Uri.file(file).with({ scheme: "untitled" });
  const document = await vscode.workspace.openTextDocument(target);
  const edit = new vscode.WorkspaceEdit();
  edit.insert(target, new vscode.Position(0, 0), exported.text);
  await vscode.workspace.applyEdit(edit);
  await vscode.window.showTextDocument(document, { preview: false });
}

async function compactConversation(controller: ChatController): Promise<void> {
  try {
    const result = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: "Imprint: summarizing the conversation…" },
      () => controller.compact(),
    );
    if (!result) void vscode.window.showInformationMessage("Imprint: open a conversation to compact it.");
    else void vscode.window.showInformationMessage(`Imprint: ${result.note}`);
  } catch (error) {
    void vscode.window.showErrorMessage(`Imprint: ${error instanceof Error ? error.message : String(error)}`);
  }
}

async function renameConversation(controller: ChatController): Promise<void> {
  const title = await vscode.window.showInputBox({ prompt: "Rename this conversation", placeHolder: "A short title" });
  if (!title) return;
  try {
    const renamed = await controller.renameSession(title);
    if (!renamed) void vscode.window.showInformationMessage("Imprint: open a conversation to rename it.");
  } catch (error) {
    void vscode.window.showErrorMessage(`Imprint: ${error instanceof Error ? error.message : String(error)}`);
  }
}

/** The GGUF chat models on this machine; the chosen one becomes `imprint.chat.model` (provider local). */
async function pickModel(controller: ChatController, settingsChanges: SettingsChanges): Promise<void> {
  const found = await controller.listModels();
  const choices = modelChoices(found);
  if (!choices.length) {
    void vscode.window.showInformationMessage(
      "Imprint: no GGUF chat models found. Set imprint.chat.modelsDir to a folder of .gguf files.");
    return;
  }
  const inUse = modelName(found.current);
  const picked = await vscode.window.showQuickPick(choices, { placeHolder: `Model in use: ${inUse || "none set"}` });
  if (!picked) return;
  const config = vscode.workspace.getConfiguration("imprint");
  // Provider and model reach the daemon as one change.
  await settingsChanges.together(async () => {
    await config.update("chat.provider", picked.provider, vscode.ConfigurationTarget.Global);
    await config.update("chat.model", picked.path, vscode.ConfigurationTarget.Global);
  });
}

async function askAboutSelection(controller: ChatController, view: ChatViewProvider): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  if (!editor || editor.selection.isEmpty) return;
  const question = await vscode.window.showInputBox({ prompt: "Ask Imprint about the selection", placeHolder: "What does this do?" });
  if (!question) return;
  const { selection, document } = editor;
  await vscode.commands.executeCommand("imprint.chat.focus");
  view.reveal();
  await controller.askAboutSelection(question, {
    path: vscode.workspace.asRelativePath(document.uri),
    startLine: selection.start.line + 1,
    endLine: selection.end.line + 1,
    text: document.getText(selection),
    languageId: document.languageId,
  });
}

/** The chat panel: posts controller updates to the webview and its messages back. */
class ChatViewProvider implements vscode.WebviewViewProvider {
  private view: vscode.WebviewView | undefined;
  onMessage: (message: FromView) => void = () => undefined;

  constructor(private readonly extensionUri: vscode.Uri) {}

  resolveWebviewView(view: vscode.WebviewView): void {
    this.view = view;
    const webview = view.webview;
    webview.options = {
      enableScripts: true,
      localResourceRoots: [vscode.Uri.joinPath(this.extensionUri, "media"), vscode.Uri.joinPath(this.extensionUri, "dist")],
    };
    webview.html = chatHtml({
      cspSource: webview.cspSource,
      scriptUri: webview.asWebviewUri(vscode.Uri.joinPath(this.extensionUri, "dist", "webview.js")).toString(),
      styleUri: webview.asWebviewUri(vscode.Uri.joinPath(this.extensionUri, "media", "chat.css")).toString(),
    });
    webview.onDidReceiveMessage((message: FromView) => this.onMessage(message));
    view.onDidDispose(() => (this.view = undefined));
  }

  reveal(): void {
    this.view?.show?.(true);
  }

  post(message: ToView): void {
    void this.view?.webview.postMessage(message);
  }
}
