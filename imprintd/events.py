"""How the core tells a client what a reply is doing, without knowing about the wire.

See docs/architecture.md, "One reply" (the text and progress channels).

The server implements ``ReplyEvents`` with ``imprint/replyDelta`` notifications and LSP
work-done progress; the CLI prints; tests record. Reply text and progress are separate
channels on purpose: notes and progress are never shown or spoken as the answer.

Reply text streams in parts: a research round may write text and then call tools, so its
text turns out to be preamble, not the answer. ``text_was_preamble`` says so once it is
known, and the next text starts a new part; what was never called preamble is the answer.

A reasoning model's thoughts stream on a channel of their own (``reasoning``), in the part
of the text they come before: a client shows them folded, never as the answer.

A tool that may act (an MCP tool not marked read-only) runs only after ``ask_permission``
says so; a front door that cannot ask the user answers "reject".
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

import msgspec

from imprintd.context.usage import ContextUsage
from imprintd.tools.base import ToolHints

StepState = Literal["started", "finished", "failed"]
#: The user's answer to a permission request: once, for the rest of the session, or no.
PermissionAnswer = Literal["allow_once", "allow_always", "reject"]


class ToolStep(msgspec.Struct, frozen=True, kw_only=True):
    """One tool step as the client shows it, e.g. "Searching the workspace for …"."""

    #: Unique within the reply (``step-1``, ``step-2``, …): the model's own call ids can repeat.
    call_id: str
    tool: str
    title: str
    state: StepState
    detail: str = ""
    #: The call's arguments as the model sent them (a client can point at the file a read touches).
    arguments: dict[str, Any] = {}
    #: What the tool's annotations say (an MCP tool's, from its start); None for a tool without them.
    hints: ToolHints | None = None
    #: A finished step's result as the client may show it: its start, redacted and bounded
    #: (``research/preview.py``); never what is stored or what the model read.
    preview: str = ""
    #: The URIs a finished MCP step's result names that a client may open (``http``, ``https``, ``file``).
    resources: tuple[str, ...] = ()


class PermissionRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call that needs the user's yes before it runs (its annotations do not say it only reads)."""

    #: The step id of the call (``ToolStep.call_id``), so a client can show the question beside it.
    call_id: str
    #: The MCP server's configured name and the tool's own name on that server.
    server: str
    tool: str
    title: str
    arguments: dict[str, Any] = {}
    #: What the tool's annotations say (``readOnlyHint``, ``destructiveHint``; unset: False and True).
    read_only: bool = False
    destructive: bool = True


class ReplyEvents(Protocol):
    def begin(self, session_id: str, reply_id: str) -> None:
        """The reply has its ids; the question is stored. Comes before every other event."""

    def text(self, delta: str) -> None:
        """A piece of the reply's text, in order; it belongs to the current part."""

    def reasoning(self, delta: str) -> None:
        """A piece of what a reasoning model thought before it wrote, in order; never answer text.

        It belongs to the current part, ahead of that part's text (a round thinks, then writes).
        """

    def text_was_preamble(self) -> None:
        """The text streamed since the last call was not the answer.

        The research round that wrote it went on to call tools, or was cut off by a stop
        and the final answer from notes follows. Text (and reasoning) after this call starts
        a new part.
        """

    def progress(self, message: str, percentage: int | None = None) -> None:
        """Long work under way ("Analyzing section 3 of 12")."""

    def tool_step(self, step: ToolStep) -> None:
        """A tool step started, finished or failed."""

    def summary(self, text: str, first_seq: int, last_seq: int) -> None:
        """The running summary was (re)written and now covers messages first_seq..last_seq."""

    def context_usage(self, usage: ContextUsage) -> None:
        """What fills the context of the coordinator round about to be sent to the model."""

    def notice(self, message: str) -> None:
        """Something the user should know once, beyond this reply (the model server's window is
        smaller than ``chat.n_ctx``, and how to raise it); never answer text."""

    async def ask_permission(self, request: PermissionRequest) -> PermissionAnswer:
        """Ask the user whether the call may run; a front door that cannot ask answers "reject"."""
        ...
