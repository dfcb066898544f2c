"""One streamed reply as it arrives (``_Stream``, for ``remote.py``): its text shown as it
comes, a reasoning model's thoughts kept apart (sent apart by the server, or opened by ``<think>``
in the content: ``_ThinkSplitter``), tool calls assembled from their deltas, the output allowance
that cuts a server ignoring ``max_tokens``, the API key masked wherever the server echoes it
(``_SecretMask``), the repetition guard; and at the end the visible text and calls parsed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from imprintd.messages import ToolSpec
from imprintd.models.base import TextCallback
from imprintd.models.chat_formats.calls import ParsedOutput, VisibleTextFilter, call_from_object, new_call_id
from imprintd.models.remote_events import _CallDelta, _Chunk, _Delta, _FunctionDelta
from imprintd.models.repetition import RepetitionGuard
from imprintd.redact import mask, mask_json


class _ThinkSplitter:
    """Content that opens with ``<think>`` is reasoning up to ``</think>``; the rest is text.

    Pieces pass on at once, except what could still be the opening marker at the very start
    (whitespace, ``<``, ``<th`` …) and what could be the start of ``</think>`` while thinking.
    Only an opening marker counts: ``<think>`` later in an answer is the answer's text.
    """

    OPEN, CLOSE = "<think>", "</think>"

    def __init__(self) -> None:
        self.state = "start"  # then "thinking", "after" (whitespace after </think> dropped), "text"
        self.pending = ""

    def feed(self, piece: str) -> tuple[str, str]:
        """(reasoning, text) of ``piece``, as far as they can be told now."""
        self.pending += piece
        thought = ""
        if self.state == "start":
            # Leading whitespace goes as it comes (the answer's filter drops it anyway), so a
            # reply of nothing but spaces is not held and searched again piece after piece.
            opened = self.pending = self.pending.lstrip()
            if opened.startswith(self.OPEN):
                self.state, self.pending = "thinking", opened[len(self.OPEN) :]
            elif self.OPEN.startswith(opened):
                return "", ""  # it may still open: hold it
            else:
                self.state = "text"
        if self.state == "thinking":
            end = self.pending.find(self.CLOSE)
            if end < 0:
                cut = len(self.pending) - _longest_prefix_suffix(self.pending, self.CLOSE)
                thought, self.pending = self.pending[:cut], self.pending[cut:]
                return thought, ""
            thought, self.pending = self.pending[:end], self.pending[end + len(self.CLOSE) :]
            self.state = "after"
        if self.state == "after":
            self.pending = self.pending.lstrip()
            if not self.pending:
                return thought, ""
            self.state = "text"
        text, self.pending = self.pending, ""
        return thought, text

    def finish(self) -> tuple[str, str]:
        """What is still held: reasoning cut off before ``</think>``, or text."""
        held, self.pending = self.pending, ""
        return (held, "") if self.state == "thinking" else ("", held)


@dataclass
class _PartialCall:
    """One tool call being assembled from stream deltas."""

    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class _SecretMask:
    """Masks one secret in streamed text, even split across pieces.

    Text is passed on at once except a tail that could be the start of the secret, held
    until the next piece shows whether it is; so a reply that never begins the secret is
    never held back.
    """

    def __init__(self, secret: str | None) -> None:
        self.secret = secret or ""
        self.pending = ""

    def feed(self, piece: str) -> str:
        if not self.secret:
            return piece
        text = mask(self.pending + piece, self.secret)
        keep = _longest_prefix_suffix(text, self.secret)
        self.pending = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def finish(self) -> str:
        text, self.pending = self.pending, ""
        return text


def _longest_prefix_suffix(text: str, secret: str) -> int:
    """The length of the longest end of ``text`` that is a proper start of ``secret``."""
    for length in range(min(len(text), len(secret) - 1), 0, -1):
        if secret.startswith(text[-length:]):
            return length
    return 0


@dataclass
class _Stream:
    """What has arrived of one streamed reply.

    ``allowance`` is the request's ``max_tokens`` in UTF-8 bytes (``OUTPUT_BYTES_PER_TOKEN``
    a token): a server that ignores ``max_tokens`` is cut there, as a local model is at its
    token count, with finish ``"length"``, and the stream is closed (``cut``).
    """

    filter: VisibleTextFilter
    on_text: TextCallback | None
    #: The API key: a server that writes it into the reply has it masked before anything sees it.
    secret: _SecretMask = field(default_factory=lambda: _SecretMask(None))
    on_reasoning: TextCallback | None = None
    #: The same key masked in the reasoning, which streams apart.
    thought_secret: _SecretMask = field(default_factory=lambda: _SecretMask(None))
    thought: list[str] = field(default_factory=list)
    #: Thoughts a server without a reasoning parser writes into the content, opened by ``<think>``.
    splitter: _ThinkSplitter = field(default_factory=_ThinkSplitter)
    allowance: int = 1 << 62
    raw: list[str] = field(default_factory=list)
    shown: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish: str | None = None
    done: bool = False
    cut: bool = False
    server_usage: dict[str, Any] | None = None
    #: ``chat.completion.chunk`` events taken (none: the server ended the stream without a word).
    chunks: int = 0
    #: The server answered the request with a stream (status 200, headers read).
    opened: bool = False
    #: UTF-8 bytes of output so far: text, tool names and arguments.
    output_bytes: int = 0

    def take(self, piece: str) -> str:
        """``piece``, or as much of it as the output allowance has left (then the stream is cut)."""
        size = len(piece.encode("utf-8"))
        if self.output_bytes + size <= self.allowance:
            self.output_bytes += size
            return piece
        left = max(0, self.allowance - self.output_bytes)
        self.output_bytes = self.allowance
        self.cut, self.finish = True, "length"
        return piece.encode("utf-8")[:left].decode("utf-8", errors="ignore")

    #: Any of the reply has arrived: a failure now is not retried (text may have streamed).
    received: bool = False
    guard: RepetitionGuard = field(default_factory=RepetitionGuard)

    def text(self, piece: str) -> None:
        piece = self.take(piece)
        self.raw.append(piece)
        thought, visible = self.splitter.feed(piece)
        self.show_thought(self.thought_secret.feed(thought))
        self.show(self.filter.feed(self.secret.feed(visible)))

    def reasoning(self, piece: str) -> None:
        self.show_thought(self.thought_secret.feed(self.take(piece)))

    def show_thought(self, piece: str) -> None:
        if piece:
            self.thought.append(piece)
            if self.on_reasoning is not None:
                self.on_reasoning(piece)

    def show(self, visible: str) -> None:
        if visible and not self.guard.looping:
            self.shown.append(visible)
            if self.on_text is not None:
                self.on_text(visible)
            if self.guard.feed(visible):
                self.finish = "repetition"

    def apply(self, chunk: _Chunk) -> None:
        """Take one ``chat.completion.chunk``."""
        self.chunks += 1
        if isinstance(chunk.usage, dict):
            self.server_usage = chunk.usage
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue
            delta = choice.delta or _Delta()
            # A server may send both names with the same text; the older one is read first.
            thought = delta.reasoning_content or delta.reasoning
            if thought and not self.cut:
                self.reasoning(thought)
            if delta.content:
                self.text(delta.content)
            for part in delta.tool_calls or ():
                if not self.cut:
                    self.call_delta(part)
            if choice.finish_reason and not self.cut:
                self.finish = choice.finish_reason

    def call_delta(self, part: _CallDelta) -> None:
        # The id and name come in the first delta of a call; later deltas carry only more
        # argument text under the same index.
        index = part.index if part.index is not None else len(self.calls)
        call = self.calls.setdefault(index, _PartialCall())
        call.id = call.id or part.id or ""
        function = part.function or _FunctionDelta()
        call.name = call.name or self.take(function.name or "")
        if isinstance(function.arguments, dict):  # a server that sends the object, not its text
            call.arguments.append(self.take(json.dumps(function.arguments, ensure_ascii=False)))
        elif function.arguments:
            call.arguments.append(self.take(function.arguments))

    def parsed(self, tools: Sequence[ToolSpec]) -> ParsedOutput:
        """Visible text, the calls (native deltas first, then any written as text), and errors."""
        thought, visible = self.splitter.finish()
        self.show_thought(self.thought_secret.feed(thought) + self.thought_secret.finish())
        self.show(self.filter.feed(self.secret.feed(visible) + self.secret.finish()))
        last, from_text = self.filter.finish()
        self.show(last)
        names = {tool.name for tool in tools}
        calls, errors = [], [from_text.error] if from_text.error else []
        secret = self.secret.secret
        for index in sorted(self.calls):
            partial = self.calls[index]
            # The key may come back in any field of a call: an id holding it is replaced (ids
            # reach the client and the store), the name and arguments have it masked, the
            # arguments however their JSON spells it (``\u``-escaped, it decodes to the key).
            ident = partial.id if partial.id and mask(partial.id, secret) == partial.id else new_call_id()
            arguments = mask_json("".join(partial.arguments), secret)
            result = call_from_object(
                {"name": mask(partial.name, secret), "arguments": arguments},
                names,
                lambda: ident,  # noqa: B023 (used before the loop moves on)
            )
            if isinstance(result, str):
                errors.append(result)
            else:
                calls.append(result)
        calls.extend(from_text.calls)
        return ParsedOutput(
            text="".join(self.shown),
            calls=tuple(calls),
            error="; ".join(errors) if errors else None,
            wrote_call=from_text.wrote_call,
        )
