"""The event stream of a streamed reply, read: its lines (each bounded, ended as server-sent
events end them) and each ``data:`` payload checked against the ``chat.completion.chunk`` shape,
as far as ``remote.py`` reads it. A chunk that is not JSON, not of that shape, or that reports an
error is a ``ModelError`` naming it (``_TooLong`` for a refusal for length).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec

from imprintd import wellformed
from imprintd.models import server_window
from imprintd.models.base import ModelError
from imprintd.models.remote_failures import _error_text, _TooLong

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


# -- the chat.completion.chunk shape, as far as it is read ------------------------------------
# Every field optional and unknown fields ignored (servers differ); a field of the wrong type
# makes the chunk malformed, reported by name rather than failing somewhere inside.
class _FunctionDelta(msgspec.Struct, kw_only=True):
    name: str | None = None
    arguments: str | dict | None = None


class _CallDelta(msgspec.Struct, kw_only=True):
    index: int | None = None
    id: str | None = None
    function: _FunctionDelta | None = None


class _Delta(msgspec.Struct, kw_only=True):
    content: str | None = None
    tool_calls: list[_CallDelta] | None = None
    #: A reasoning model's thoughts: llama.cpp's server and vLLM's name, and the newer one.
    reasoning_content: str | None = None
    reasoning: str | None = None


class _Choice(msgspec.Struct, kw_only=True):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Chunk(msgspec.Struct, kw_only=True):
    choices: list[_Choice] | None = None
    usage: Any = None  # read only when it is an object; anything else is ignored


def parse_chunk(data: str) -> _Chunk:
    """One ``data:`` payload of the stream, or ModelError naming what is wrong with it."""
    try:
        raw = json.loads(data)
    except (json.JSONDecodeError, RecursionError):
        raise ModelError(f"the server sent a stream chunk that is not JSON: {data[:120]!r}") from None
    if not isinstance(raw, dict):
        raise ModelError(f"the server sent an unexpected stream chunk: {data[:120]!r}")
    if raw.get("error"):
        message = f"the server reported an error mid-reply: {_error_text(raw)}"
        exceeded = server_window.context_exceeded(message, raw)
        if exceeded is not None:
            raise _TooLong(message, exceeded)
        raise ModelError(message)
    try:
        if wellformed.may_need_check(data):
            wellformed.check(raw, "chunk")
        return msgspec.convert(raw, _Chunk)
    except (wellformed.Malformed, msgspec.ValidationError) as error:
        raise ModelError(
            f"the server sent a malformed stream chunk ({_chunk_problem(error)}): {data[:120]!r}"
        ) from None


def _chunk_problem(error: Exception) -> str:
    """msgspec's "Expected `array`, got `str` - at `$.choices`" as "choices: expected `array`, got `str`"."""
    text = str(error)
    if " - at `$" in text:
        problem, _, where = text.rpartition(" - at `$")
        where = where.rstrip("`").lstrip(".")
        return f"{where or 'chunk'}: {problem[:1].lower()}{problem[1:]}"
    return text


async def stream_lines(response: httpx.Response, *, max_chars: int, base_url: str) -> AsyncIterator[str]:
    """The stream's lines, ended by CR LF, LF or CR as server-sent events are; ModelError
    for one longer than ``max_chars`` (httpx's ``aiter_lines`` has no bound).

    A CR LF split between two reads gives an extra blank line, which the reader skips as
    it skips every line that is not ``data:``.
    """
    parts: list[str] = []  # the line still growing, in pieces: joined once it ends
    size = 0
    async for text in response.aiter_text():
        lines = _LINE_BREAK.split(text)
        if len(lines) > 1:
            yield "".join([*parts, lines[0]])
            for line in lines[1:-1]:
                yield line
            parts, size = [], 0
        parts.append(lines[-1])
        size += len(lines[-1])
        if size > max_chars:
            raise ModelError(
                f"the model server at {base_url} sent a line of more than {max_chars:,} "
                "characters without a line break: not a stream of chat.completion.chunk events"
            )
    if size:
        yield "".join(parts)
