/**
 * The VS Code side of Imprint: starts `imprintd serve --stdio` with vscode-languageclient, hosts
 * the chat webview, and registers commands, settings and the status bar item.
 *
 * The only file that imports `vscode`; all behaviour worth testing lives in `chat/`.
 */

import * as path from "node:path";
import * as vscode from "vscode";
import {
  CloseAction, ErrorAction, LanguageClient, LanguageClientOptions, RevealOutputChannelOn, ServerOptions, State, StaticFeature,
  TransportKind,
} from "vscode-languageclient/node";
import { ChatController } from "./chat/controller";
import { resolveExecutable } from "./chat/executable";
import { chatHtml } from "./chat/html";
import { SettingKey, daemonSettings, describeModel } from "./chat/settings";
import { ConnectionStatus, FromView, ToView } from "./chat/view";

const INSTALL_HINT = "Install it with pip (Python 3.11+: `pip install \".[embedded]\"` in an imprintd checkout) so `imprintd` is on PATH, or set its full path.";

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const log = vscode.window.createOutputChannel("Imprint", { log: true });
  const status = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  status.command = "imprint.showLog";
  status.name = "Imprint";
  status.show();

  const chatView = new ChatViewProvider(context.extensionUri);
  const controller = new ChatController({
    post: (message) => chatView.post(message),
    workspace: currentWorkspace,
    openSource: (file, startLine, endLine) => void openSource(file, startLine, endLine),
    onStatus: (state, detail) => showStatus(status, state, detail),
  });
  chatView.onMessage = (message) => void controller.handle(message);
  const daemon = new Daemon(log, controller);
  running = daemon;

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
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration("imprint.serverPath")) void daemon.restart();
      else if (event.affectsConfiguration("imprint.chat")) daemon.sendSettings();
    }),
    vscode.workspace.onDidGrantWorkspaceTrust(() => void daemon.restart()),
  );
  void daemon.start();
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

  constructor(private readonly log: vscode.LogOutputChannel, private readonly controller: ChatController) {}

  async start(): Promise<void> {
    this.controller.setStatus("starting", "");
    const configured = vscode.workspace.getConfiguration("imprint").get<string>("serverPath") || "imprintd";
    const command = resolveExecutable(configured);
    if (!command) {
      this.controller.detach(`“${configured}” was not found`);
      this.log.error(`imprintd not found: “${configured}” is not an executable file or on PATH (${process.env.PATH ?? ""})`);
      void this.offerInstall(`Imprint could not find its daemon “${configured}”. ${INSTALL_HINT}`);
      return;
    }
    const client = this.createClient(command);
    this.client = client;
    client.onDidChangeState((change) => {
      if (change.newState === State.Running) this.controller.attach(client);
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
    await this.stop();
    await this.start();
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    await client?.dispose(2000).catch(() => undefined);
  }

  sendSettings(): void {
    if (!this.client?.isRunning()) return;
    void this.client.sendNotification("workspace/didChangeConfiguration", { settings: explicitSettings() });
  }

  private createClient(command: string): LanguageClient {
    // TransportKind.stdio appends --stdio: the daemon runs as `imprintd serve --stdio`.
    const serverOptions: ServerOptions = { command, args: ["serve"], transport: TransportKind.stdio };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [],
      initializationOptions: explicitSettings(),
      outputChannel: this.log,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
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
          this.controller.detach("The Imprint daemon stopped; restarting it.");
          return { action: CloseAction.Restart, handled: true };
        },
      },
    };
    const client = new LanguageClient("imprint", "Imprint", serverOptions, clientOptions);
    client.registerFeature(new UntrustedWorkspaceFeature());
    return client;
  }

  private async offerInstall(message: string): Promise<void> {
    const choice = await vscode.window.showErrorMessage(message, "Set path", "Show Log");
    if (choice === "Show Log") this.log.show();
    if (choice !== "Set path") return;
    const picked = await vscode.window.showOpenDialog({ title: "The imprintd executable", canSelectMany: false, openLabel: "Use this imprintd" });
    // Changing the setting restarts the daemon (onDidChangeConfiguration).
    if (picked?.[0]) await vscode.workspace.getConfiguration("imprint").update("serverPath", picked[0].fsPath, vscode.ConfigurationTarget.Global);
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

/** The values the user set explicitly (a contributed default must not override config.toml). */
function explicitSettings(): Record<string, Record<string, unknown>> {
  const config = vscode.workspace.getConfiguration("imprint");
  return daemonSettings((key: SettingKey) => {
    const inspected = config.inspect(key);
    return inspected?.workspaceFolderValue ?? inspected?.workspaceValue ?? inspected?.globalValue;
  });
}

function currentWorkspace(): string | undefined {
  if (!vscode.workspace.isTrusted) return undefined;
  const folder = vscode.workspace.workspaceFolders?.[0];
  if (folder?.uri.scheme === "file") return folder.uri.fsPath;
  const active = vscode.window.activeTextEditor?.document.uri;
  return active?.scheme === "file" ? path.dirname(active.fsPath) : undefined;
}

function showStatus(item: vscode.StatusBarItem, state: ConnectionStatus, detail: string): void {
  const config = vscode.workspace.getConfiguration("imprint");
  const model = describeModel(config.get("chat.provider"), config.get("chat.model"));
  const icons: Record<ConnectionStatus, string> = {
    starting: "$(loading~spin)", ready: "$(comment-discussion)", answering: "$(sync~spin)", error: "$(error)",
  };
  item.text = `${icons[state]} Imprint · ${state === "ready" ? model : state}`;
  item.tooltip = `Imprint: ${state}${detail ? ` (${detail})` : ""}\nModel: ${model}\nClick to show the log.`;
  item.backgroundColor = state === "error" ? new vscode.ThemeColor("statusBarItem.errorBackground") : undefined;
  void vscode.commands.executeCommand("setContext", "imprint.answering", state === "answering");
}

async function openSource(file: string, startLine: number, endLine: number): Promise<void> {
  const root = currentWorkspace();
  const absolute = path.isAbsolute(file) || !root ? file : path.join(root, file);
  const document = await vscode.workspace.openTextDocument(vscode.Uri.file(absolute));
  const last = Math.max(startLine, endLine) - 1;
  const range = new vscode.Range(startLine - 1, 0, last, document.lineAt(Math.min(last, document.lineCount - 1)).text.length);
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
