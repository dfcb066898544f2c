"""A stand-in model for unit tests: replays scripted replies and records every prompt.

It implements ``imprintd.models.base.Model`` with a deterministic, additive token count
(so tests can compute exactly what fits) and honours timeouts, cancellation and the
process-wide inference lock like the real providers. Like them, a reply to a request that
offers no tools streams through ``VisibleTextFilter``: call markup written anyway stops the
text and is reported as ``Completion.wrote_tool_call``. A scripted Completion's ``reasoning``
streams first, through ``on_reasoning``, and counts against the output allowance and in
``generated_tokens`` as a reasoning model's thinking does. Never used outside tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio
import msgspec

from imprintd.messages import Message, ToolCall, ToolSpec
from imprintd.models.base import Completion, ModelError, RetryCallback, StartHook, TextCallback, Usage, inference_lock
from imprintd.models.chat_formats.calls import VisibleTextFilter
from imprintd.models.chat_formats.hermes import HERMES
from imprintd.models.chat_formats.json_fallback import JSON_FALLBACK

#: Tokens every message costs beyond its text (role header and end marker).
MESSAGE_OVERHEAD = 4
#: Tokens of the generation prompt at the end of every formatted prompt.
PROMPT_OVERHEAD = 3


def count_text(text: str) -> int:
    """One token per started group of four UTF-8 bytes."""
    return math.ceil(len(text.encode("utf-8")) / 4)


@dataclass
class Request:
    """One request the stand-in received, exactly as the core built it."""

    messages: list[Message]
    tools: list[ToolSpec]
    max_tokens: int
    timeout: float | None
    #: The GBNF grammar the request asked the output to follow, if any.
    grammar: str | None = None
    #: How the request ended: the returned completion's finish reason ("deadline" when its
    #: timeout cut it), None while it runs or when it raised.
    ended: str | None = None

    @property
    def text(self) -> str:
        """Every message's content, joined: handy for ``"x" in request.text``."""
        return "\n".join(m.content for m in self.messages)

    @property
    def system(self) -> str:
        return self.messages[0].content if self.messages and self.messages[0].role == "system" else ""


class Hang:
    """A scripted reply that writes ``text`` and then never finishes (for deadlines and cancel)."""

    def __init__(self, text: str = "") -> None:
        self.text = text


class Fail:
    """A scripted reply that raises ModelError(message)."""

    def __init__(self, message: str = "stand-in failure") -> None:
        self.message = message


Scripted = str | Completion | Hang | Fail | Callable[[Request], "str | Completion"]


@dataclass
class StandInModel:
    """Replays ``replies`` in order; each is a string, a Completion, Hang, Fail or a function."""

    replies: list[Scripted] = field(default_factory=list)
    n_ctx: int = 8192
    model_id: str = "standin"
    native_tools: bool = True
    exact_counts: bool = True
    chat_format: str = "hermes"
    reasons: bool = False
    requests: list[Request] = field(default_factory=list)
    #: Set while a request is generating, to check that requests never overlap.
    busy: bool = False
    overlapped: bool = False

    def queue(self, *replies: Scripted) -> None:
        self.replies.extend(replies)

    # -- counting -----------------------------------------------------------
    def count_text(self, text: str) -> int:
        return count_text(text)

    def count_message(self, message: Message) -> int:
        calls = "".join(msgspec.json.encode(call).decode() for call in message.tool_calls)
        return MESSAGE_OVERHEAD + count_text(message.prompt_content) + count_text(calls)

    def count_tools(self, tools: Sequence[ToolSpec]) -> int:
        # What a prompt renders of a tool: a local call grammar's schema is never rendered.
        return sum(
            count_text(msgspec.json.encode(msgspec.structs.replace(tool, grammar=None)).decode()) for tool in tools
        )

    def count_prompt(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        return PROMPT_OVERHEAD + self.count_tools(tools) + sum(self.count_message(m) for m in messages)

    # -- generation ---------------------------------------------------------
    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        max_tokens: int,
        timeout: float | None = None,
        on_text: TextCallback | None = None,
        on_start: StartHook | None = None,
        on_retry: RetryCallback | None = None,
        grammar: str | None = None,
        on_reasoning: TextCallback | None = None,
    ) -> Completion:
        request = Request(list(messages), list(tools), max_tokens, timeout, grammar)
        self.requests.append(request)
        prompt_tokens = self.count_prompt(messages, tools)
        if prompt_tokens + max_tokens > self.n_ctx:
            raise ModelError(
                f"prompt of {prompt_tokens} tokens plus {max_tokens} output tokens "
                f"exceeds the {self.n_ctx}-token context"
            )
        if not self.replies:
            raise AssertionError(f"stand-in model has no scripted reply for request #{len(self.requests)}")
        reply = self.replies.pop(0)
        written = _Written(
            on_text,
            None if tools else VisibleTextFilter((), HERMES.syntax if self.native_tools else JSON_FALLBACK.syntax),
        )
        with anyio.move_on_after(timeout) as scope:
            async with inference_lock():
                if on_start is not None:
                    try:
                        await on_start()
                    except BaseException:
                        # Refused before it started (e.g. by the budget): it never reached the model.
                        self.requests.remove(request)
                        self.replies.insert(0, reply)
                        raise
                if self.busy:
                    self.overlapped = True
                self.busy = True
                try:
                    completion = await self._play(reply, request, prompt_tokens, max_tokens, written, on_reasoning)
                    request.ended = completion.finish_reason
                    return completion
                finally:
                    self.busy = False
        assert scope.cancel_called
        text, wrote_call = written.finish()
        request.ended = "deadline"
        return Completion(
            text=text,
            finish_reason="deadline",
            wrote_tool_call=wrote_call,
            usage=Usage(prompt_tokens=prompt_tokens, evaluated_tokens=prompt_tokens, generated_tokens=count_text(text)),
        )

    async def _play(
        self, reply, request, prompt_tokens, max_tokens, written: _Written, on_reasoning: TextCallback | None
    ) -> Completion:
        if callable(reply) and not isinstance(reply, (Hang, Fail)):
            reply = reply(request)
        if isinstance(reply, Fail):
            raise ModelError(reply.message)
        if isinstance(reply, str):
            reply = Completion(text=reply)
        text = reply.text if isinstance(reply, (Completion, Hang)) else ""
        budget = max_tokens
        finish = reply.finish_reason if isinstance(reply, Completion) else "stop"
        thought: list[str] = []
        cut_thinking = False
        reasoning = reply.reasoning if isinstance(reply, Completion) else ""
        for index, word in enumerate(reasoning.split(" ") if reasoning else ()):
            piece = word if index == 0 else " " + word
            cost = count_text(piece)
            if cost > budget:
                finish, text, cut_thinking = "length", "", True  # the allowance ran out mid-thought
                break
            budget -= cost
            await anyio.sleep(0)
            thought.append(piece)
            if on_reasoning is not None:
                on_reasoning(piece)
        words = text.split(" ") if text or not thought else []
        for index, word in enumerate(words):
            piece = word if index == 0 else " " + word
            cost = count_text(piece)
            if cost > budget:
                finish = "length"
                break
            budget -= cost
            await anyio.sleep(0)  # a checkpoint between tokens, like the real providers
            written.add(piece)
        if isinstance(reply, Hang):
            await anyio.sleep_forever()
        out, wrote_call = written.finish()
        calls = reply.tool_calls if isinstance(reply, Completion) and not cut_thinking else ()
        return Completion(
            text=out,
            tool_calls=calls,
            finish_reason="tool_calls" if calls and finish == "stop" else finish,
            tool_call_error=reply.tool_call_error if isinstance(reply, Completion) else None,
            wrote_tool_call=wrote_call,
            usage=Usage(
                prompt_tokens=prompt_tokens,
                evaluated_tokens=prompt_tokens,
                generated_tokens=count_text("".join(written.raw))
                + count_text("".join(thought))
                + count_text("".join(msgspec.json.encode(c).decode() for c in calls)),
            ),
            reasoning="".join(thought),
        )


class _Written:
    """What a scripted reply has written: the raw pieces and, through the filter, what streamed."""

    def __init__(self, on_text: TextCallback | None, filter: VisibleTextFilter | None) -> None:
        self.raw: list[str] = []
        self._on_text = on_text
        self._filter = filter

    def add(self, piece: str) -> None:
        self.raw.append(piece)
        self._show(self._filter.feed(piece) if self._filter else piece)

    def finish(self) -> tuple[str, bool]:
        """The completion's text and whether call markup was written with no tools offered."""
        if self._filter is None:
            return "".join(self.raw), False
        last, parsed = self._filter.finish()
        self._show(last)
        return parsed.text, parsed.wrote_call

    def _show(self, piece: str) -> None:
        if piece and self._on_text:
            self._on_text(piece)


def call(name: str, call_id: str = "call_1", **arguments) -> ToolCall:
    """A tool call, for scripting replies: ``Completion(text="", tool_calls=(call("search", query="x"),))``."""
    return ToolCall(id=call_id, name=name, arguments=arguments)
