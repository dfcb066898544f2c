/**
 * The small JSON-RPC surface the chat controller needs.
 *
 * Both `vscode-languageclient`'s `LanguageClient` (in the editor) and a plain
 * `vscode-jsonrpc` `MessageConnection` (in tests, against the real daemon) satisfy it.
 */

import { CancellationToken, ProgressType } from "vscode-jsonrpc";

export interface Disposable {
  dispose(): void;
}

export interface WorkDoneProgressBegin {
  kind: "begin";
  title: string;
  message?: string;
  percentage?: number;
}
export interface WorkDoneProgressReport {
  kind: "report";
  message?: string;
  percentage?: number;
}
export interface WorkDoneProgressEnd {
  kind: "end";
  message?: string;
}
export type WorkDoneProgressValue = WorkDoneProgressBegin | WorkDoneProgressReport | WorkDoneProgressEnd;

/** The `$/progress` payload type for work-done progress (a marker for `onProgress`). */
export const workDoneProgress = new ProgressType<WorkDoneProgressValue>();

export interface ChatConnection {
  // Overloads rather than one optional token: vscode-jsonrpc sends `(params, undefined)` as an
  // array of params, which the daemon refuses (-32602), so a token is passed only when there is one.
  sendRequest<R>(method: string, params: object): Promise<R>;
  sendRequest<R>(method: string, params: object, token: CancellationToken): Promise<R>;
  sendNotification(method: string, params: object): Promise<void> | void;
  onNotification(method: string, handler: (params: any) => void): Disposable;
  /** The daemon's own requests (`imprint/requestPermission`): the handler's result is the answer. */
  onRequest(method: string, handler: (params: any) => Promise<unknown> | unknown): Disposable;
  onProgress<P>(type: ProgressType<P>, token: string | number, handler: (value: P) => void): Disposable;
}
