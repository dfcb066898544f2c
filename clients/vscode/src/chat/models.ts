/**
 * How the model is shown: what the model picker offers (`imprint.pickModel`), the models
 * `imprint/models` reports, as quick pick items; and the name and context window of the model in
 * use. Kept out of extension.ts so that what is offered, what choosing it sets and what is shown are tested.
 */

import type * as wire from "../protocol";

/** A quick pick item; choosing it sets `chat.provider` to `provider` and `chat.model` to `path`. */
export interface ModelChoice {
  label: string;
  description: string;
  detail: string | undefined;
  path: string;
  provider: "openai" | "local";
}

/**
 * The models to offer: with provider openai, the ids the server lists first (choosing one keeps the
 * provider); then every GGUF that is a chat model (a file that is not is listed by the daemon with its
 * reason, never offered).
 */
export function modelChoices({ models, served }: wire.ModelsResult): ModelChoice[] {
  return [
    ...(served ?? []).map((id): ModelChoice => ({
      label: id, description: "served by chat.baseUrl", detail: undefined, path: id, provider: "openai",
    })),
    ...models.filter((model) => model.chat).map((model): ModelChoice => ({
      label: model.name,
      description: [model.quantization, `${Math.round(model.size / 1048576)} MiB`,
        model.contextLength ? `${model.contextLength} ctx` : undefined, model.source].filter(Boolean).join(" · "),
      detail: model.path,
      path: model.path,
      provider: "local",
    })),
  ];
}

/**
 * The name the model in use is shown by (the status bar, the picker's "Model in use"): the `name`
 * the daemon reports, the same string the picker offers it by (`imprint/models`); an older daemon
 * sends none, and its `model` is shown.
 */
export function modelName(report: { model: string; name?: string }): string {
  return typeof report.name === "string" ? report.name : report.model;
}

/**
 * "context 8,192 tokens", or "context 1,024 tokens (llama-server /props n_ctx)": the window prompts
 * are fitted to, and where it comes from when that is not chat.n_ctx (a served model's smaller one).
 */
export function contextWindow(nCtx: number, source?: string): string {
  const from = source && source !== "chat.n_ctx" ? ` (${source})` : "";
  return `context ${nCtx.toLocaleString("en-US")} tokens${from}`;
}
