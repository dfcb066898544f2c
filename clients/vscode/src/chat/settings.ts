/**
 * The daemon's settings as VS Code settings (`imprint.chat.*`, `imprint.mcpServers`), and what goes to the daemon.
 *
 * Only values the user set explicitly are sent: a contributed default must not override the
 * user's `config.toml` or `IMPRINT_*` environment, which rank below the editor in the daemon.
 * A key the user removed (resetting a setting to its default removes it) is sent as `null`,
 * which the daemon reads as "unset": the key goes back to its command line, environment,
 * config file or default (protocol.md, "Settings").
 */

import type { ModelReport } from "../protocol";
import { contextWindow, modelName } from "./models";
import type { ConnectionStatus } from "./view";

/**
 * Each daemon key (imprintd/settings.py `KEYS`; a test keeps the two in step) and its VS Code
 * name under `imprint.`: camelCase, because VS Code titles a setting from its key's words
 * ("Chat: Max Tokens"), and `chat.n_ctx` would read "Chat: N Ctx".
 */
export const SETTINGS = [
  { daemon: "chat.provider", editor: "chat.provider" },
  { daemon: "chat.model", editor: "chat.model" },
  { daemon: "chat.base_url", editor: "chat.baseUrl" },
  { daemon: "chat.n_ctx", editor: "chat.contextWindow" },
  { daemon: "chat.max_tokens", editor: "chat.maxTokens" },
  { daemon: "chat.analysis_workers", editor: "chat.analysisWorkers" },
  { daemon: "chat.analysis_context", editor: "chat.analysisContext" },
  { daemon: "chat.research_token_budget", editor: "chat.researchTokenBudget" },
  { daemon: "chat.index_max_files", editor: "chat.indexMaxFiles" },
  { daemon: "chat.index_max_bytes", editor: "chat.indexMaxBytes" },
  { daemon: "chat.research_time_budget", editor: "chat.researchTimeBudget" },
  { daemon: "chat.state_cache_memory", editor: "chat.stateCacheMemory" },
  { daemon: "chat.state_cache_disk", editor: "chat.stateCacheDisk" },
  { daemon: "chat.first_look", editor: "chat.firstLook" },
  { daemon: "chat.reasoning", editor: "chat.reasoning" },
  { daemon: "chat.remote_parallel", editor: "chat.remoteParallel" },
  { daemon: "chat.models_dir", editor: "chat.modelsDir" },
  // Named as VS Code's own `mcp.servers` are, outside `chat.`; an object in the editor shape.
  { daemon: "chat.mcp_servers", editor: "mcpServers" },
] as const;

/**
 * Settings that start programs or reach servers: a workspace's own value is used only in a
 * trusted workspace (package.json lists them under `restrictedConfigurations` too, but VS Code's
 * `inspect` still reports an untrusted workspace's value).
 */
export const TRUSTED_ONLY: readonly EditorKey[] = ["mcpServers"];

/** Where a setting's value may come from, as `WorkspaceConfiguration.inspect` reports them. */
export interface InspectedValue {
  globalValue?: unknown;
  workspaceValue?: unknown;
  workspaceFolderValue?: unknown;
}

/**
 * The value the user set explicitly: the folder's, the workspace's or the user's, the first set
 * (a contributed default is not sent: it must not override config.toml). For `TRUSTED_ONLY`
 * keys in an untrusted workspace, the user's alone.
 */
export function explicitOf(key: EditorKey, inspected: InspectedValue | undefined, trusted: boolean): unknown {
  if (!trusted && TRUSTED_ONLY.includes(key)) return inspected?.globalValue;
  return inspected?.workspaceFolderValue ?? inspected?.workspaceValue ?? inspected?.globalValue;
}

export type SettingKey = (typeof SETTINGS)[number]["daemon"];
export type EditorKey = (typeof SETTINGS)[number]["editor"];

export const SETTING_KEYS: readonly SettingKey[] = SETTINGS.map((setting) => setting.daemon);

export type DaemonSettings = Record<string, Record<string, unknown>>;

/**
 * `{"chat": {"n_ctx": 4096}}` from the explicitly set values; `explicitValue` answers
 * undefined for a key the user left at its default, and is asked by the editor's name.
 */
export function daemonSettings(explicitValue: (key: EditorKey) => unknown): DaemonSettings {
  const settings: DaemonSettings = {};
  for (const { daemon, editor } of SETTINGS) {
    const value = explicitValue(editor);
    if (value === undefined) continue;
    nest(settings, daemon, value);
  }
  return settings;
}

function nest(settings: DaemonSettings, key: string, value: unknown): void {
  const [section, name] = key.split(".", 2);
  (settings[section] ??= {})[name] = value;
}

/**
 * What one daemon has been told: each change sends the values set now, and `null` for every key
 * it was sent before that is no longer set.
 */
export class SentSettings {
  private sent = new Set<string>();
  /** The values last sent, to tell a change from the same values again. */
  private values = "";

  /** The settings a (re)started daemon gets in `initializationOptions`; it starts from them. */
  initial(explicitValue: (key: EditorKey) => unknown): DaemonSettings {
    const settings = daemonSettings(explicitValue);
    this.sent = keysOf(settings);
    this.values = JSON.stringify(settings);
    return settings;
  }

  /** The `workspace/didChangeConfiguration` settings for the values set now. */
  change(explicitValue: (key: EditorKey) => unknown): DaemonSettings {
    const settings = daemonSettings(explicitValue);
    this.values = JSON.stringify(settings);
    const now = keysOf(settings);
    for (const key of this.sent) if (!now.has(key)) nest(settings, key, null);
    this.sent = now;
    return settings;
  }

  /** As `change`, or undefined when the values set now are those last sent (nothing to tell). */
  news(explicitValue: (key: EditorKey) => unknown): DaemonSettings | undefined {
    return JSON.stringify(daemonSettings(explicitValue)) === this.values ? undefined : this.change(explicitValue);
  }
}

/**
 * When the editor's settings go to the daemon: at each change, except that the updates of one
 * choice (`together`) go as one change once they are all made. A model picked sets
 * `chat.provider` and `chat.model`; sent one by one, the daemon would be told in between of the
 * old model under the new provider (a GGUF named by a server's model id, which does not exist).
 */
export class SettingsChanges {
  private holding = 0;
  private pending = false;

  constructor(private readonly send: () => void) {}

  /** The editor's settings changed. */
  changed(): void {
    if (this.holding) this.pending = true;
    else this.send();
  }

  /** Makes `updates` (settings writes, each of which reports `changed`) one change. */
  async together(updates: () => Promise<unknown>): Promise<void> {
    this.holding++;
    try {
      await updates();
    } finally {
      this.holding--;
      if (!this.holding && this.pending) {
        this.pending = false;
        this.send();
      }
    }
  }
}

function keysOf(settings: DaemonSettings): Set<string> {
  return new Set(Object.entries(settings).flatMap(([section, values]) => Object.keys(values).map((name) => `${section}.${name}`)));
}

/**
 * "openai · gpt-4o-mini", "local · SmolLM2-135M-Instruct-Q8_0.gguf": the model the daemon reports, for
 * the status bar, by the name it reports (`modelName`).
 */
export function describeModel(report: ModelReport | undefined): string {
  if (!report) return "model not reported";
  return `${report.provider} · ${modelName(report) || "default model"}`;
}

/** How the model writes tool calls and whether it reasons, as the daemon detected it; "" when not reported. */
export function describeFormat(report: ModelReport | undefined): string {
  if (!report || report.chatFormat === undefined) return "";
  const format = report.chatFormat ?? "not known yet";
  return report.reasons ? `${format}, thinks before answering` : format;
}

/** What a click on the status bar item does: it names the model in use, so it picks another. */
export const STATUS_BAR_COMMAND = "imprint.pickModel";

/**
 * The status bar item: the connection's state and the model the daemon reports, and a tooltip with
 * the detail, the context window (and where it comes from) and what a click does (`STATUS_BAR_COMMAND`).
 */
export function statusBar(state: ConnectionStatus, detail: string, report: ModelReport | undefined): { text: string; tooltip: string } {
  const model = describeModel(report);
  const icons: Record<ConnectionStatus, string> = {
    starting: "$(loading~spin)", ready: "$(comment-discussion)", answering: "$(sync~spin)", error: "$(error)",
  };
  const window = report?.nCtx ? `, ${contextWindow(report.nCtx, report.nCtxSource)}` : "";
  const format = describeFormat(report);
  return {
    text: `${icons[state]} Imprint · ${state === "ready" && report ? model : state}`,
    tooltip: `Imprint: ${state}${detail ? ` (${detail})` : ""}\nModel: ${model}${window}` +
      `${format ? `\nChat format: ${format}` : ""}\nClick to pick another model (“Imprint: Show Log” shows the log).`,
  };
}
