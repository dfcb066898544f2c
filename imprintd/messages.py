"""The conversation as every record sees it: messages, tool calls and tool schemas.

These are core types, not wire types (those live in ``protocol.py``). A message that came
from the store carries its per-session number in ``seq``; messages built only for a prompt
(the system prompt, section-analysis requests) have ``seq=None``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import msgspec

Role = Literal["system", "user", "assistant", "tool"]
#: How an answer is written: "spoken" answers are two or three plain sentences.
Style = Literal["written", "spoken"]
#: What a source is: a workspace file's lines, an earlier message, section-analysis notes, or
#: the result of an MCP server's tool.
SourceKind = Literal["file", "message", "section", "tool"]
#: How the daemon's first look's call ids begin (``research/first_look.py`` makes them): the shape of
#: the ids Imprint gives parsed calls (``call_`` and hex digits), with a letter no hex id has, so it
#: never takes a model's id. A stored first look is recognised by it (``is_first_look``), in sessions
#: stored before this rule too.
FIRST_LOOK_CALL_PREFIX = "call_look"


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """One call an assistant message asked for."""

    id: str
    name: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)


class ToolOrigin(msgspec.Struct, frozen=True, kw_only=True):
    """Where a result from outside the workspace came from: an MCP server's tool, the arguments
    it was called with, and the URI the result names, if any (a client links it)."""

    server: str
    tool: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    uri: str | None = None


class SourceRef(msgspec.Struct, frozen=True, kw_only=True):
    """One source of an answer, numbered as the answer cites it (docs/decisions.md, "Numbered
    results and sources"): a file's lines (``path``, 1-based inclusive ``start_line``..``end_line``),
    an earlier message (``message``, its seq), section notes (of the user's message
    ``message``, or of a tool result at ``path``) or an MCP tool's result (``origin``). ``cited`` is False for a place the answer
    read but did not cite; ``supported`` is None then, False when the citing sentence shares
    nothing with the source's text, with ``reason`` saying so."""

    number: int
    kind: SourceKind
    label: str
    path: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    message: int | None = None
    cited: bool = True
    supported: bool | None = True
    reason: str = ""
    origin: ToolOrigin | None = None


class Message(msgspec.Struct, frozen=True, kw_only=True):
    """One chat message. ``role == "tool"`` messages answer the call named by ``tool_call_id``.

    An assistant answer keeps its ``sources``, stored with it.

    ``content`` is what the user is shown. ``model_text``, when set, is the message as the model
    read or wrote it (a tool result as numbered for the model, an answer without the daemon's
    ``Sources:`` block): later prompts render it in place of ``content``, so a prompt repeats what
    the model saw token for token (``prompt_content``). ``reasoning`` is what a reasoning model
    thought before it answered: stored and shown folded, never answer text and never rendered back."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    seq: int | None = None
    sources: tuple[SourceRef, ...] = ()
    model_text: str | None = None
    reasoning: str = ""

    @property
    def prompt_content(self) -> str:
        """The text a prompt renders for this message: what the model saw, else what was shown."""
        return self.content if self.model_text is None else self.model_text

    @property
    def is_tool_exchange(self) -> bool:
        """True for an assistant message that calls tools and for a tool result."""
        return self.role == "tool" or bool(self.tool_calls)


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A tool offered to the model: its name, what it does, and a JSON schema of its arguments.

    ``grammar``, when set, is the schema a local model's call grammar holds the arguments to in
    place of ``parameters`` (``call_tool``: its arguments follow the schema of the tool it names).
    It is never rendered into a prompt, so it costs no tokens.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    grammar: dict[str, Any] | None = None

    def as_openai(self) -> dict[str, Any]:
        """The OpenAI / chat-template form ``{"type": "function", "function": {...}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


def system(text: str) -> Message:
    return Message(role="system", content=text)


def user(text: str, seq: int | None = None) -> Message:
    return Message(role="user", content=text, seq=seq)


def assistant(
    text: str, seq: int | None = None, tool_calls: tuple[ToolCall, ...] = (), sources: tuple[SourceRef, ...] = ()
) -> Message:
    return Message(role="assistant", content=text, seq=seq, tool_calls=tool_calls, sources=sources)


def tool_result(call: ToolCall, text: str, seq: int | None = None) -> Message:
    return Message(role="tool", content=text, tool_call_id=call.id, name=call.name, seq=seq)


def calls_by_id(messages: Iterable[Message]) -> dict[str, ToolCall]:
    """Every tool call the assistant messages made, by id (to name the results that answer them)."""
    return {call.id: call for message in messages for call in message.tool_calls}


def is_first_look(item: Message | ToolCall) -> bool:
    """Whether ``item`` is the daemon's first look, not the model's own search: its call, the
    assistant message making only such calls, or its result."""
    if isinstance(item, ToolCall):
        return item.id.startswith(FIRST_LOOK_CALL_PREFIX)
    if item.role == "tool":
        return (item.tool_call_id or "").startswith(FIRST_LOOK_CALL_PREFIX)
    return bool(item.tool_calls) and all(map(is_first_look, item.tool_calls))
