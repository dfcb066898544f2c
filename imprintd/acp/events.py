"""ReplyEvents as ACP ``session/update`` notifications, for one prompt.

Reply text streams: each piece the model writes goes out as an ``agent_message_chunk`` as it
comes. Text a research round writes before it calls tools is part of the transcript, a message
shown before that round's ``tool_call``s (ACP has no way to take a chunk back, and other ACP
agents show such text the same way); the text after it starts a new paragraph. After a research
stop the final answer from notes streams the same way, the daemon's ``Sources:`` list included;
when the reply returns, ``finish`` sends whatever of the result's text did not stream, then
one ``resource_link`` per source in the workspace (its ``description`` says when it was read,
not cited, or why it does not support what cites it). A cancelled prompt is ``close``d: nothing is sent after it.
Tool steps become ``tool_call`` / ``tool_call_update``; progress and summaries become thought
chunks, one line each (never the answer). A reasoning model's thoughts stream as
thought chunks too, as they come (never an ``agent_message_chunk``); a progress line
after them starts a line of its own. Each coordinator round's context usage is
a ``usage_update``: its tokens of the window (ACP has no place for the parts).

A finished step's ``tool_call_update`` carries what a client shows of its result: a text block
of its preview (the start of the result, redacted and bounded: ``research/preview.py``) and a
``resource_link`` per URI an MCP result names that a client may open; a failed one carries why.
An MCP tool's call (``server__tool``) shows as a ``tool_call`` with its arguments as
``rawInput`` and its kind from the tool's annotations, known from its start (``read`` for a
read-only one, ``fetch`` for a read-only one that reaches outside, ``execute`` for one that may
act; ``other`` for a ``call_tool`` naming no tool). One that needs the user's
yes goes ``pending`` and is asked for with ``session/request_permission`` (allow once, allow
always, reject); allowed, it goes on ``in_progress`` in the same tool call. A client that
answers an error, does not answer within ``PERMISSION_TIMEOUT_S``, or whose prompt is cancelled
meanwhile, has said no.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET

from imprintd.acp import wire
from imprintd.acp.jsonrpc import ClientGone, RpcError
from imprintd.context.usage import ContextUsage
from imprintd.events import PermissionAnswer, PermissionRequest, ToolStep
from imprintd.messages import SourceRef
from imprintd.research.preview import linkable
from imprintd.tools.base import ToolHints

logger = logging.getLogger(__name__)

SESSION_UPDATE = "session/update"
#: What starts the text that follows a preamble: its own paragraph.
PARAGRAPH = "\n\n"

#: How each tool shows in an ACP client (its icon and grouping).
TOOL_KINDS: dict[str, wire.ToolKind] = {
    "search": "search",
    "conversation_history": "search",
    "read_file": "read",
    "read_chat_section": "read",
    "find_tools": "search",
}

#: The separator of an MCP tool's name: ``git__git_log`` is ``git_log`` of the server ``git``.
MCP_SEPARATOR = "__"

#: The compact pair's tool that runs an MCP tool by name (when all their schemas would not fit).
CALL_TOOL = "call_tool"

#: How long a permission request waits for the user's choice before it counts as a no.
PERMISSION_TIMEOUT_S = 120.0

REQUEST_PERMISSION = "session/request_permission"

#: What the user is offered, each with ACP's kind; the option id is the core's answer.
PERMISSION_OPTIONS = [
    wire.PermissionOption(option_id="allow_once", name="Allow once", kind="allow_once"),
    wire.PermissionOption(option_id="allow_always", name="Always allow", kind="allow_always"),
    wire.PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
]

#: ACP's stop reasons for the core's: an answer and every research stop end the turn.
STOP_REASONS: dict[str, wire.StopReason] = {"length": "max_tokens"}


def stop_reason(core_stop: str) -> wire.StopReason:
    return STOP_REASONS.get(core_stop, "end_turn")


def tool_kind(tool: str) -> wire.ToolKind:
    return TOOL_KINDS.get(tool, "other")


def mcp_tool_name(step: ToolStep) -> str:
    """The MCP tool a step runs, as offered (``git__git_log``), the compact pair's ``call_tool``
    included (the tool it names); "" for a workspace tool."""
    if step.tool == CALL_TOOL:
        name = step.arguments.get("name")
        return name if isinstance(name, str) else step.tool
    return step.tool if MCP_SEPARATOR in step.tool else ""


def mcp_kind(hints: ToolHints | None) -> wire.ToolKind:
    """How an MCP tool shows, from its annotations: one that only reads is ``read`` (``fetch`` when
    it reaches outside, ``openWorldHint``), one that may act is ``execute``; none known, ``other``."""
    if hints is None:
        return "other"
    if hints.read_only:
        return "fetch" if hints.open_world else "read"
    return "execute"


def step_kind(step: ToolStep) -> wire.ToolKind:
    """How a step shows: an MCP tool's from its annotations, a workspace tool's by its name."""
    return mcp_kind(step.hints) if mcp_tool_name(step) else tool_kind(step.tool)


def step_content(step: ToolStep) -> list[wire.ToolCallContent] | msgspec.UnsetType:
    """What a client shows of an ended step: why it failed, or its result's preview and the
    resources it names (none: unset)."""
    if step.state == "failed":
        blocks: list[wire.OutBlock] = [text_block(step.detail)] if step.detail else []
    else:
        blocks = [text_block(step.preview)] if step.preview else []
        blocks += [wire.ResourceLinkBlock(uri=uri, name=uri) for uri in step.resources]
    return [wire.ToolCallContent(content=block) for block in blocks] or UNSET


def permission_answer(raw: msgspec.Raw) -> PermissionAnswer:
    """The core's answer for the client's ``session/request_permission`` result: the option it
    selected; ``cancelled``, an option we did not offer, or a result that does not fit, a no."""
    try:
        result = wire.permission_result_decoder.decode(raw)
    except msgspec.DecodeError as error:
        logger.warning("session/request_permission: the answer does not fit ACP's schema (%s); taken as reject", error)
        return "reject"
    if result.outcome.outcome == "selected" and result.outcome.option_id in ("allow_once", "allow_always"):
        return result.outcome.option_id  # type: ignore[return-value]  # checked just above
    return "reject"


def location(root: Path | None, path: str, line: int | None = None) -> list[wire.ToolCallLocation]:
    """A workspace path as an ACP location (absolute; the line 0-based, as Zed reads it).

    No location for a path outside the workspace: the tools refuse those reads, and a client
    should not be pointed at them.
    """
    if root is None:
        return []
    absolute = Path(os.path.normpath(root / path))
    if not absolute.is_relative_to(root):
        return []
    return [wire.ToolCallLocation(path=str(absolute), line=(line - 1) if line else UNSET)]


def arguments_location(root: Path | None, tool: str, arguments: Mapping[str, Any]) -> list[wire.ToolCallLocation]:
    """Where a call with these arguments reads, when it reads a workspace file."""
    path = arguments.get("path")
    if tool != "read_file" or not isinstance(path, str) or not path:
        return []
    start = arguments.get("start_line")
    return location(root, path, start if isinstance(start, int) and not isinstance(start, bool) else None)


def file_uri(root: Path | None, path: str, start_line: int, end_line: int) -> str:
    """A file URI with the line range as Zed writes it: ``file:///abs/path#L10:12`` (1-based)."""
    absolute = (root / path) if root is not None else Path(path)
    return f"{absolute.as_uri()}#L{start_line}:{end_line}"


def text_block(text: str) -> wire.TextBlock:
    return wire.TextBlock(text=text)


class AcpEvents:
    """One prompt's ReplyEvents, sent as ``session/update`` on ``connection``."""

    def __init__(self, connection, session_id: str, root: Path | None) -> None:
        self._connection = connection
        self.session_id = session_id
        self.root = root
        self.reply_id = ""
        #: The text streamed since the last preamble: the answer so far, if nothing follows it.
        self._part: list[str] = []
        #: Text went out and turned out to be preamble: the next text starts a paragraph.
        self._after_preamble = False
        self._closed = False
        self._calls = 0
        self._open: dict[str, str] = {}  # the model's call id -> our toolCallId for a started step
        self._kinds: dict[str, wire.ToolKind] = {}  # the kind each started step showed with
        #: The last thought chunk was reasoning that did not end its line.
        self._mid_line = False
        #: A round ended since the last reasoning: the next round's thoughts start a paragraph.
        self._next_round = False

    def close(self) -> None:
        """The prompt was cancelled: nothing more is sent for it, whatever the reply still reports."""
        self._closed = True

    def update(self, update: wire.SessionUpdate) -> None:
        if self._closed:
            return
        self._connection.notify(SESSION_UPDATE, wire.SessionNotification(session_id=self.session_id, update=update))

    def thought(self, text: str) -> None:
        if text:
            if self._mid_line:
                text = "\n" + text
            self._mid_line = False
            self.update(wire.AgentThoughtChunk(content=text_block(text)))

    # -- ReplyEvents ----------------------------------------------------------------
    def begin(self, session_id: str, reply_id: str) -> None:
        self.reply_id = reply_id

    def text(self, delta: str) -> None:
        if not delta:
            return
        self._part.append(delta)
        shown = PARAGRAPH + delta if self._after_preamble else delta
        self._after_preamble = False
        self.update(wire.AgentMessageChunk(content=text_block(shown)))

    def reasoning(self, delta: str) -> None:
        if delta:
            shown = PARAGRAPH + delta if self._next_round and self._mid_line else delta
            self._next_round = False
            self.update(wire.AgentThoughtChunk(content=text_block(shown)))
            self._mid_line = not delta.endswith("\n")

    def text_was_preamble(self) -> None:
        """The text since the last call was not the answer; it was shown, and stays, as written."""
        self._next_round = True
        if self._part:
            self._part.clear()
            self._after_preamble = True

    def progress(self, message: str, percentage: int | None = None) -> None:
        self.thought(message + "\n")

    def notice(self, message: str) -> None:
        """ACP has no warning to show: a line of the reply's thoughts, and the log."""
        logger.warning("%s", message)
        self.thought(message + "\n")

    def summary(self, text: str, first_seq: int, last_seq: int) -> None:
        self.thought(f"Summarized the earlier conversation (messages #{first_seq}–#{last_seq}).\n")

    def context_usage(self, usage: ContextUsage) -> None:
        """ACP's ``usage_update`` holds the total and the window; the parts have no place in it."""
        self.update(wire.UsageUpdate(used=usage.used, size=usage.n_ctx))

    async def ask_permission(self, request: PermissionRequest) -> PermissionAnswer:
        """``session/request_permission`` for the call, its tool call ``pending`` meanwhile (a new
        one when its step has not started yet); allowed, it goes on ``in_progress``."""
        if self._closed:  # the prompt was cancelled: nothing is asked for it any more
            return "reject"
        # The kind its step started with (the same annotations); a call asked about before its
        # step started shows as what the request says.
        kind = self._kinds.get(request.call_id) or mcp_kind(
            ToolHints(read_only=request.read_only, destructive=request.destructive)
        )
        call_id = self._open.get(request.call_id)
        if call_id is None:
            call_id = self._new_call_id(request.call_id)
            self.update(
                wire.ToolCallStart(
                    tool_call_id=call_id, title=request.title, kind=kind, status="pending", raw_input=request.arguments
                )
            )
        else:
            self.update(wire.ToolCallUpdate(tool_call_id=call_id, status="pending", kind=kind))
        params = wire.RequestPermissionParams(
            session_id=self.session_id,
            tool_call=wire.PermissionToolCall(
                tool_call_id=call_id, title=request.title, kind=kind, status="pending", raw_input=request.arguments
            ),
            options=PERMISSION_OPTIONS,
        )
        try:
            raw = await asyncio.wait_for(self._connection.request(REQUEST_PERMISSION, params), PERMISSION_TIMEOUT_S)
        except (RpcError, ClientGone, TimeoutError) as error:
            why = str(error) or f"no answer within {PERMISSION_TIMEOUT_S:.0f} s"
            logger.info("%s for %s: %s; taken as reject", REQUEST_PERMISSION, request.title, why)
            return "reject"
        answer = "reject" if self._closed else permission_answer(raw)
        if answer != "reject":
            self.update(wire.ToolCallUpdate(tool_call_id=call_id, status="in_progress"))
        return answer

    def tool_step(self, step: ToolStep) -> None:
        mcp = bool(mcp_tool_name(step))
        if step.state == "started":
            if step.call_id in self._open:  # shown already, pending its permission
                return
            kind = self._kinds[step.call_id] = step_kind(step)
            self.update(
                wire.ToolCallStart(
                    tool_call_id=self._new_call_id(step.call_id),
                    title=step.title,
                    kind=kind,
                    status="in_progress",
                    locations=arguments_location(self.root, step.tool, step.arguments) or UNSET,
                    raw_input=step.arguments if mcp else UNSET,
                )
            )
            return
        status: wire.ToolCallStatus = "completed" if step.state == "finished" else "failed"
        self._kinds.pop(step.call_id, None)
        call_id = self._open.pop(step.call_id, None)
        if call_id is None:  # failed before it started (an unknown tool, a server that did not start)
            self.update(
                wire.ToolCallStart(
                    tool_call_id=self._new_call_id(step.call_id, opened=False),
                    title=step.title,
                    kind=step_kind(step),
                    status=status,
                    content=step_content(step),
                    raw_input=step.arguments if mcp else UNSET,
                )
            )
            return
        self.update(wire.ToolCallUpdate(tool_call_id=call_id, status=status, content=step_content(step)))

    def _new_call_id(self, step_id: str, *, opened: bool = True) -> str:
        # The model's call ids repeat between rounds and replies ("call_0"); ACP's must not
        # within a session, so each step is numbered within its reply.
        self._calls += 1
        call_id = f"{self.reply_id}-{self._calls}-{step_id}"
        if opened:
            self._open[step_id] = call_id
        return call_id

    # -- the end of the reply -------------------------------------------------------
    def finish(self, outcome) -> None:
        """Send what of the result's text did not stream (normally nothing), then a link to each source's lines."""
        streamed = "".join(self._part)
        if outcome.text.startswith(streamed):
            self.text(outcome.text[len(streamed) :])
        else:  # the core streams exactly its answer; a chunk sent cannot be taken back
            logger.warning(
                "reply %s: the answer differs from the text streamed; the streamed text stands", self.reply_id
            )
        self._part.clear()
        for chunk in linked_sources(self.root, outcome.sources):
            self.update(chunk)


def linked_sources(root: Path | None, sources: Sequence[SourceRef]) -> list[wire.AgentMessageChunk]:
    """The chunks that follow an answer: each source's ``resource_link`` on a line of its own.

    Clients that show a link inline (CodeCompanion) would otherwise glue the first to the
    Sources list's last line (``…billing.yaml:1-12[resource: file:///…]``).
    """
    chunks = []
    for number, link in enumerate(source_links(root, sources)):
        chunks.append(wire.AgentMessageChunk(content=text_block("\n\n" if number == 0 else "\n")))
        chunks.append(wire.AgentMessageChunk(content=link))
    return chunks


def source_links(root: Path | None, sources: Sequence[SourceRef]) -> list[wire.ResourceLinkBlock]:
    """A ``resource_link`` to each source that is a place in the workspace (a file's lines, or
    section notes on one), or an MCP tool's result that names a URI (``linked_uri``); an
    earlier message, notes on the user's message or a result naming no URI have no link, and
    are named in the answer's Sources list instead."""
    links = []
    for source in sources:
        note = "" if source.cited else "read, not cited"
        if source.supported is False:
            note = source.reason
        uri = linked_uri(source)
        if uri is not None:
            links.append(
                wire.ResourceLinkBlock(
                    uri=uri, name=source.label, title=f"[{source.number}] {source.label}", description=note or UNSET
                )
            )
            continue
        if source.path is None or not location(root, source.path):
            continue
        start = source.start_line or 1
        end = source.end_line or start
        where = f"{source.path}:{start}" if start == end else f"{source.path}:{start}-{end}"
        links.append(
            wire.ResourceLinkBlock(
                uri=file_uri(root, source.path, start, end),
                name=where,
                title=f"[{source.number}] {source.label}",
                description=note or UNSET,
            )
        )
    return links


def linked_uri(source: SourceRef) -> str | None:
    """The URI an MCP tool's result names (a resource link or an embedded resource), when it is
    one to link to."""
    uri = source.origin.uri if source.origin is not None else None
    if uri and linkable(uri):
        return uri
    return None
