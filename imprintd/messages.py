"""The conversation as every record sees it: messages, tool calls and tool schemas.

These are core types, not wire types (those live in ``protocol.py``). A message that came
from the store carries its per-session number in ``seq``; messages built only for a prompt
(the system prompt, section-analysis requests) have ``seq=None``.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Role = Literal["system", "user", "assistant", "tool"]
#: How an answer is written: "spoken" answers are two or three plain sentences.
Style = Literal["written", "spoken"]


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """One call an assistant message asked for."""

    id: str
    name: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)


class Message(msgspec.Struct, frozen=True, kw_only=True):
    """One chat message. ``role == "tool"`` messages answer the call named by ``tool_call_id``."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    seq: int | None = None

    @property
    def is_tool_exchange(self) -> bool:
        """True for an assistant message that calls tools and for a tool result."""
        return self.role == "tool" or bool(self.tool_calls)


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A tool offered to the model: its name, what it does, and a JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]

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


def assistant(text: str, seq: int | None = None, tool_calls: tuple[ToolCall, ...] = ()) -> Message:
    return Message(role="assistant", content=text, seq=seq, tool_calls=tool_calls)


def tool_result(call: ToolCall, text: str, seq: int | None = None) -> Message:
    return Message(role="tool", content=text, tool_call_id=call.id, name=call.name, seq=seq)
