"""``session/load``: a stored session replayed as the ``session/update`` notifications a client shows.

Exactly what was stored, in order: a user message is a ``user_message_chunk``; an assistant
message's reasoning, when a reasoning model wrote it, is an ``agent_thought_chunk`` before it
(as it streamed live); an assistant message that called tools is its text as a message (as it streamed live, before its calls)
and a finished ``tool_call`` for each call, ``failed`` when its stored result is an error (an MCP
tool's too: declined, unavailable, an error result), with the start of that result as its content
(bounded and redacted, as the live step's preview: ``research/preview.py``); the
answer is an ``agent_message_chunk`` followed by a ``resource_link`` per stored source in the
workspace, as the live answer sent them (answers stored before sources were kept have only
their text).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from msgspec import UNSET

from imprintd.acp import wire
from imprintd.acp.events import MCP_SEPARATOR, arguments_location, linked_sources, text_block, tool_kind
from imprintd.context.history import describe_call
from imprintd.messages import Message
from imprintd.research.preview import preview

#: How a stored tool result that reported a failure begins (``research/loop.py``).
_FAILED = ("Error:", "There is no tool named")
#: How an MCP tool's stored result that reported a failure begins (``mcp/tools.py``), by its
#: server and tool: declined by the user, the server unavailable, timed out, refused, an error result.
_MCP_FAILED = (
    "The user declined to let {server} run {tool}",
    "The MCP server {server} is unavailable",
    "{server} did not answer {tool} within",
    "{server} refused {tool}:",
    "{server} answered {tool} with an error:",
)


def failed(name: str, result: str) -> bool:
    """Whether the stored ``result`` of a call of tool ``name`` reported a failure."""
    if result.startswith(_FAILED):
        return True
    server, separator, tool = name.partition(MCP_SEPARATOR)
    if not separator:
        return False
    return result.startswith(tuple(start.format(server=server, tool=tool) for start in _MCP_FAILED))


def replay(messages: Sequence[Message], root: Path | None) -> Iterator[wire.SessionUpdate]:
    for index, message in enumerate(messages):
        if message.role == "user":
            yield wire.UserMessageChunk(content=text_block(message.content))
            continue
        if message.role == "assistant" and message.reasoning:
            yield wire.AgentThoughtChunk(content=text_block(message.reasoning))
        if message.role == "assistant" and message.tool_calls:
            if message.content:
                yield wire.AgentMessageChunk(content=text_block(message.content))
            results = _results_after(messages, index)
            for call in message.tool_calls:
                result = results.get(call.id)
                shown = preview(result.content) if result is not None else ""
                yield wire.ToolCallStart(
                    tool_call_id=f"{message.seq}-{call.id}",
                    title=describe_call(call),
                    kind=tool_kind(call.name),
                    status="failed" if result is not None and failed(call.name, result.content) else "completed",
                    locations=arguments_location(root, call.name, call.arguments) or UNSET,
                    content=[wire.ToolCallContent(content=text_block(shown))] if shown else UNSET,
                    raw_input=call.arguments,
                )
        elif message.role == "assistant" and message.content:
            yield wire.AgentMessageChunk(content=text_block(message.content))
            yield from linked_sources(root, message.sources)


def _results_after(messages: Sequence[Message], index: int) -> dict[str, Message]:
    """The tool results answering the calls of ``messages[index]``: the tool messages right after it.

    Matched there, not session-wide, because models reuse call ids between rounds ("call_0").
    """
    results: dict[str, Message] = {}
    for message in messages[index + 1 :]:
        if message.role != "tool":
            break
        results.setdefault(message.tool_call_id or "", message)
    return results
