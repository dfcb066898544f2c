/**
 * What the model picker offers (`imprint.pickModel`): the models `imprint/models` reports, as quick
 * pick items. Kept out of extension.ts so that what is offered, and what choosing it sets, is tested.
 */

import * as path from "node:path";
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
 * The name the model in use is shown by (the status bar, the picker's "Model in use"), the one the
 * picker offers it by: a local GGUF by the `name` of its `imprint/models` entry, found by the file
 * name the daemon reports for it (`model`); a remote model, or a GGUF no listing holds, by what the
 * daemon reports.
 */
export function shownModelName(report: { provider: string; model: string }, listed: readonly wire.ModelOnDisk[]): string {
  if (report.provider !== "local" || !report.model) return report.model;
  return listed.find((model) => path.basename(model.path) === report.model)?.name ?? report.model;
}
