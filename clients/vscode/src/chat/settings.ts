/**
 * The daemon's settings as VS Code settings (`imprint.chat.*`), and what goes to the daemon.
 *
 * Only values the user set explicitly are sent: a contributed default must not override the
 * user's `config.toml` or `IMPRINT_*` environment, which rank below the editor in the daemon.
 */

/** The daemon's settings keys (imprintd/settings.py `KEYS`); a test keeps the two in step. */
export const SETTING_KEYS = [
  "chat.provider",
  "chat.model",
  "chat.base_url",
  "chat.n_ctx",
  "chat.max_tokens",
  "chat.analysis_workers",
  "chat.analysis_context",
  "chat.research_token_budget",
  "chat.research_time_budget",
] as const;

export type SettingKey = (typeof SETTING_KEYS)[number];

/**
 * `{"chat": {"n_ctx": 4096}}` from the explicitly set values; `explicitValue` answers
 * undefined for a key the user left at its default.
 */
export function daemonSettings(explicitValue: (key: SettingKey) => unknown): Record<string, Record<string, unknown>> {
  const settings: Record<string, Record<string, unknown>> = {};
  for (const key of SETTING_KEYS) {
    const value = explicitValue(key);
    if (value === undefined) continue;
    const [section, name] = key.split(".", 2);
    (settings[section] ??= {})[name] = value;
  }
  return settings;
}

/** "openai · gpt-4o-mini", "local · embedded model": the model in use, for the status bar. */
export function describeModel(provider: unknown, model: unknown): string {
  const where = typeof provider === "string" && provider ? provider : "local";
  const name = typeof model === "string" && model ? model : where === "local" ? "embedded model" : "default model";
  return `${where} · ${name}`;
}
