"""The slash commands Imprint publishes to ACP clients (``available_commands_update``).

A prompt that starts with one of them runs it instead of asking the model, and stores nothing but
what the command itself writes (``/compact``'s summary):

- ``/compact``: write the running summary now (``imprint/compact``'s rules);
- ``/context``: what fills the context window for the next question (``imprint/context``'s
  breakdown), as a message;
- ``/sources``: the last answer's sources, as links;
- ``/export``: the conversation as Markdown (``imprint/export``), as a message.

This module says which commands exist, recognizes one in a prompt and words the results; the
agent (``agent.py``) runs them.
"""

from __future__ import annotations

from imprintd.acp import wire
from imprintd.context.usage import ContextUsage

COMMANDS: tuple[wire.AvailableCommand, ...] = (
    wire.AvailableCommand(
        name="compact",
        description="Summarize the conversation so far now (all but the last exchange), to free the context",
    ),
    wire.AvailableCommand(name="context", description="Show what fills the context window for the next question"),
    wire.AvailableCommand(name="sources", description="List the last answer's sources as links"),
    wire.AvailableCommand(name="export", description="Show the whole conversation as Markdown"),
)
NAMES = frozenset(command.name for command in COMMANDS)


def command_of(text: str) -> str | None:
    """The command a prompt runs (``/context`` alone or before other words), else None."""
    stripped = text.lstrip()
    if not stripped.startswith("/"):
        return None
    name = stripped[1:].split(maxsplit=1)[0] if len(stripped) > 1 else ""
    return name if name in NAMES else None


def _ranges(ranges: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> str:
    return ", ".join(f"#{a}" if a == b else f"#{a}–#{b}" for a, b in ranges) or "none"


def context_text(usage: ContextUsage) -> str:
    """``imprint/context``'s breakdown in words: tokens by part, and which messages are where."""
    parts = usage.parts
    room = usage.n_ctx - usage.output_allowance
    share = f"{usage.used / usage.n_ctx:.0%}" if usage.n_ctx else "?"
    counted = "counted by the model's tokenizer" if usage.exact else "estimated"
    window = "" if usage.n_ctx_source == "chat.n_ctx" else f", the server's window ({usage.n_ctx_source})"
    lines = [
        f"Context for the next question: {usage.used:,} of {usage.n_ctx:,} tokens{window} ({share}; {counted}), "
        f"{usage.output_allowance:,} kept for the answer, {max(room - usage.used, 0):,} free.",
        "",
        f"- system prompt: {parts.system:,}",
        f"- tool schemas: {parts.tools:,}",
        f"- running summary: {parts.summary:,}",
        f"- earlier messages: {parts.earlier:,}",
        f"- question: {parts.question:,}",
        "",
        f"Messages in view: {_ranges(list(usage.in_view))}; summarized: {_ranges(list(usage.summarized))}; "
        f"dropped (readable through conversation_history): {_ranges(list(usage.dropped))}.",
    ]
    return "\n".join(lines)
