/**
 * MCP tools in the panel: asking the user before a tool that may act runs
 * (`imprint/requestPermission`), naming the server a step comes from, and which addresses a
 * result names are links.
 *
 * The question's wording and the answers live here; the extension shows them as a modal
 * warning (`Prompt` is its signature), tests answer them in code.
 */

import * as wire from "../protocol";

/** The buttons of the question, in order, and what each answers; closing the dialog is a reject. */
export const PERMISSION_CHOICES: readonly { label: string; outcome: wire.PermissionOutcome }[] = [
  { label: "Allow once", outcome: "allow_once" },
  { label: "Always allow", outcome: "allow_always" },
  { label: "Reject", outcome: "reject" },
];

/** What the user is asked: a short message and the detail under it. */
export interface PermissionQuestion {
  message: string;
  detail: string;
}

/** Shows the question with the choices' labels; resolves with the label picked, undefined when dismissed. */
export type Prompt = (question: PermissionQuestion, labels: string[]) => Promise<string | undefined>;

/** The question for `request`: which server's tool, what it would do, with which arguments. */
export function permissionQuestion(request: wire.PermissionRequest): PermissionQuestion {
  const effect = request.destructive ? "It may change or delete things." : "It may change things.";
  const args = JSON.stringify(request.arguments ?? {}, null, 2);
  return {
    message: `Allow the MCP server “${request.server}” to run ${request.tool}?`,
    detail: `${request.title}\n\n${effect} Arguments:\n${args.length > 1200 ? `${args.slice(0, 1199)}…` : args}\n\n“Always allow” lasts for this conversation.`,
  };
}

/** The answer for the label picked; anything else (dismissed, unknown) is a reject. */
export function outcomeOf(label: string | undefined): wire.PermissionOutcome {
  return PERMISSION_CHOICES.find((choice) => choice.label === label)?.outcome ?? "reject";
}

/** Asks with `prompt`; a prompt that fails, or a request that does not fit, is a reject. */
export async function askPermission(prompt: Prompt | undefined, request: wire.PermissionRequest): Promise<wire.PermissionResult> {
  if (!prompt || !isPermissionRequest(request)) return { outcome: "reject" };
  try {
    return { outcome: outcomeOf(await prompt(permissionQuestion(request), PERMISSION_CHOICES.map((choice) => choice.label))) };
  } catch {
    return { outcome: "reject" };
  }
}

function isPermissionRequest(value: unknown): value is wire.PermissionRequest {
  const request = value as Partial<wire.PermissionRequest> | undefined;
  return typeof request?.server === "string" && typeof request.tool === "string" && typeof request.title === "string";
}

/** The MCP server of a tool named `server__tool`; undefined for a workspace tool. */
export function mcpServerOf(tool: string): string | undefined {
  const at = tool.indexOf(wire.MCP_SEPARATOR);
  return at > 0 ? tool.slice(0, at) : undefined;
}

/** A step's row title: an MCP tool's names its server ("git · git_log"), unless the daemon's title does ("Asking git: git_log"). */
export function stepTitleOf(tool: string, title: string): string {
  const server = mcpServerOf(tool);
  if (server === undefined || title.includes(server)) return title;
  return `${server} · ${title}`;
}

/** The address an MCP result names, when it is a web page to open (http, https); a server names what it likes. */
export function linkedUri(origin: wire.ToolOrigin | null | undefined): string | undefined {
  const uri = origin?.uri;
  return typeof uri === "string" && /^https?:\/\//i.test(uri) ? uri : undefined;
}

/** How the daemon words an MCP call that did not give a result (imprintd/mcp/tools.py): declined
 *  by the user, the server unavailable, timed out, refused, an error result. */
const MCP_FAILED = [
  (server: string, tool: string) => `The user declined to let ${server} run ${tool}`,
  (server: string) => `The MCP server ${server} is unavailable`,
  (server: string, tool: string) => `${server} did not answer ${tool} within`,
  (server: string, tool: string) => `${server} refused ${tool}:`,
  (server: string, tool: string) => `${server} answered ${tool} with an error:`,
];

/** Whether the stored result of a call of the MCP tool `name` (`server__tool`) says it failed. */
export function mcpCallFailed(name: string, result: string): boolean {
  const server = mcpServerOf(name);
  if (server === undefined) return false;
  const tool = name.slice(server.length + wire.MCP_SEPARATOR.length);
  return MCP_FAILED.some((start) => result.startsWith(start(server, tool)));
}
