"""The remote provider: any OpenAI-compatible ``/v1/chat/completions`` server, streamed
(docs/architecture.md, "models/: one interface, two providers").

``chat.provider = "openai"``. Requests stream server-sent events through httpx and take native
tool calls from ``delta.tool_calls`` (split across chunks: accumulated by ``index``, the id and
name from the first delta, the argument text concatenated). A server that writes Hermes
``<tool_call>`` markup into the text instead (no tool parser configured) is understood too.
A reasoning model's thoughts, sent apart by servers with a reasoning parser (``delta.reasoning_content``
as llama.cpp's server and vLLM send it, or ``delta.reasoning``), stream through ``on_reasoning``
into ``Completion.reasoning``, never into the text; they count against the output allowance
like text. A server without a reasoning parser sends the thoughts inside the content, opened by
``<think>`` (Qwen3, DeepSeek-R1, SmolLM3 and most open reasoning models): content that opens
with ``<think>`` is taken as reasoning up to ``</think>`` (``_ThinkSplitter``). The model
``reasons`` from the first reply that brought any (a server's reasoning parser is not announced
before it is used).

Counting is the explicit UTF-8-byte estimate of ADR 0093, since the server's tokenizer and
context are not available locally; ``chat.n_ctx`` is the budget:

* text: ``ceil(utf8_bytes / 3)`` tokens. Three bytes per token over-counts English BPE text
  (about four bytes per token) and stays close for code and non-Latin text, so fitting errs on
  the side of room to spare;
* a message: its content, tool calls (as JSON) and name, plus ``MESSAGE_OVERHEAD`` for the role
  header and end marker a template adds;
* a prompt: the sum of its messages, each tool schema as its OpenAI JSON, plus
  ``PROMPT_OVERHEAD`` for the generation prompt. The estimate is additive by construction, so
  ``count_prompt == PROMPT_OVERHEAD + tools + sum(count_message)`` exactly;
* output: a server that ignores ``max_tokens`` (one misconfigured to stream forever) is cut
  once its text, tool names and arguments reach ``max_tokens * OUTPUT_BYTES_PER_TOKEN`` bytes:
  the stream is closed and the completion ends with finish ``"length"``, as a local model's
  does. Not at the three bytes of the estimate: that over-counts, and would cut an English
  answer that is within its allowance at three quarters of it.

A transient failure (429, 500, 502, 503, 504, or a connection reset before the first byte) is
asked again after 1, 2 and 4 s, or after the server's ``Retry-After``, while the wait ends
within the request's deadline (which the reply's time budget bounds); each retry is reported
through ``on_retry``. Nothing is retried once any of the reply has arrived. Failures then raise
``ModelError`` naming the cause (refused connection, unknown host, 401, 404,
429, 5xx, a stream cut short, no answer within the read timeout, a stream chunk that is not
JSON or not of the ``chat.completion.chunk`` shape); nothing waits forever. The API key comes
from ``IMPRINT_CHAT_API_KEY`` and is only ever put in the Authorization header: a server that
echoes it (in an error body, the reply's text or a tool call's arguments) has it masked
before the text goes on to the client, the store or the log.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import re
import socket
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import msgspec

from imprintd import wellformed
from imprintd.messages import Message, ToolSpec
from imprintd.models import server_window
from imprintd.models.base import (
    Completion,
    ContextExceeded,
    FinishReason,
    ModelError,
    ModelUnavailable,
    RetryCallback,
    StartHook,
    TextCallback,
    Usage,
    report_usage,
)
from imprintd.models.repetition import RepetitionGuard, cut_before_loop
from imprintd.models.server_counts import COUNTING_SERVERS, ServerCounts
from imprintd.models.server_http import tls_context
from imprintd.models.server_window import ServerWindow
from imprintd.models.toolcalls import ParsedOutput, VisibleTextFilter, call_from_object, new_call_id
from imprintd.offload import in_worker
from imprintd.redact import hide_url_passwords, mask, mask_json

logger = logging.getLogger(__name__)

API_KEY_ENV = "IMPRINT_CHAT_API_KEY"
#: UTF-8 bytes per estimated token (ADR 0093's remote estimate).
BYTES_PER_TOKEN = 3
#: Estimated tokens a message adds beyond its text: role header, separators, end marker.
MESSAGE_OVERHEAD = 4
#: Estimated tokens of the generation prompt that ends every formatted prompt.
PROMPT_OVERHEAD = 3
#: Message estimates kept (``count_message``); the whole cache is dropped when it is full.
COUNT_CACHE_SIZE = 8_192
#: Characters of message text the count caches may hold alive (their keys are the messages'
#: own strings, and the by-object cache keeps the messages): a pasted megabyte is counted and
#: then let go, rather than kept by the cache until 8,192 entries have piled up.
COUNT_CACHE_CHARS = 4 << 20
#: Requests at the server at once by default (``chat.remote_parallel``): llama-server's default
#: slots and LM Studio's default parallel predictions are 4; vLLM takes many more, and Ollama
#: queues what is past its ``OLLAMA_NUM_PARALLEL`` itself.
DEFAULT_PARALLEL = 4
#: Connections kept open to the server between requests.
KEEPALIVE_CONNECTIONS = 8
#: The calibration of the estimate from the server's counts stays within these factors.
CALIBRATION_RANGE = (0.5, 4.0)
#: Prompts smaller than this many estimated tokens do not calibrate (the overheads dominate).
CALIBRATE_FROM_TOKENS = 128
#: The margin kept over the server's own count when calibrating, and after it cut or refused a prompt.
CALIBRATION_MARGIN = 1.05
TRUNCATION_MARGIN = 1.25
#: UTF-8 bytes a token of output may average before a server is taken to ignore ``max_tokens``:
#: about twice what tokenizers average on English (four), so an answer within its allowance is
#: never cut, while one that streams on stops within 8 KiB per 1,024 tokens.
OUTPUT_BYTES_PER_TOKEN = 8
#: Characters one line of the event stream may hold. A chunk carries a few tokens; even a whole
#: answer in one chunk (32,768 tokens of 8 bytes, JSON-escaped) fits. A server that streams on
#: without a line break is refused instead of being buffered without end.
MAX_STREAM_LINE_CHARS = 4 << 20
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


#: What an API key may hold: printable ASCII, as HTTP headers carry it (RFC 9110 field values).
_KEY_CHARACTERS = frozenset(chr(code) for code in range(0x21, 0x7F))


def usable_api_key(key: str | None) -> str | None:
    """``key`` when an ``Authorization`` header can carry it; None for none.

    Raises ``ModelUnavailable`` naming ``IMPRINT_CHAT_API_KEY`` and what is accepted, without
    repeating the key: a line break or a character outside printable ASCII cannot go into a
    header, and the HTTP library's refusal would quote it.
    """
    if not key:
        return None
    bad = set(key) - _KEY_CHARACTERS
    if not bad:
        return key
    if bad & {"\r", "\n"}:
        what = "a line break (CR or LF; a file written on Windows ends its lines with CR LF)"
    elif bad & {" ", "\t"}:
        what = "a space or tab"
    elif any(ord(character) > 0x7E for character in bad):
        what = "a character outside ASCII"
    else:
        what = "a control character"
    raise ModelUnavailable(
        f"{API_KEY_ENV} holds {what}; an API key is accepted as printable ASCII (letters, digits "
        "and punctuation) without spaces or line breaks. Set it to the key alone."
    )


#: Statuses worth asking again: rate limited, or a server or gateway failing for now.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
#: Seconds waited before each retry of a transient failure (unless the server says Retry-After).
RETRY_DELAYS_S = (1.0, 2.0, 4.0)
#: Retries of one request at most (one per delay).
MAX_RETRIES = len(RETRY_DELAYS_S)


class _Transient(ModelError):
    """A failure that asking again may cure; ``retry_after`` is the server's wait, if it named one."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _TooLong(ModelError):
    """The server refused the prompt as too long for its window (``server_window.context_exceeded``)."""

    def __init__(self, message: str, exceeded: server_window.Exceeded) -> None:
        super().__init__(message)
        self.exceeded = exceeded


def _retry_after(response: httpx.Response) -> float | None:
    """The ``Retry-After`` header in seconds (delta-seconds or an HTTP date), or None."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def estimate_tokens(text: str) -> int:
    """The remote estimate for plain text: one token per started group of three UTF-8 bytes."""
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


def to_openai_message(message: Message) -> dict[str, Any]:
    """A core message in the ``/v1/chat/completions`` request form."""
    out: dict[str, Any] = {"role": message.role, "content": message.prompt_content}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
            }
            for call in message.tool_calls
        ]
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id or ""
        if message.name:
            out["name"] = message.name
    return out


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


@dataclass
class _Connections:
    """What a model keeps per event loop: its HTTP client, its request slots, the window question."""

    loop: asyncio.AbstractEventLoop
    client: httpx.AsyncClient
    slots: anyio.CapacityLimiter
    probing: anyio.Lock


class RemoteModel:
    """A chat model behind an OpenAI-compatible server (implements ``imprintd.models.base.Model``).

    ``base_url`` ends in ``/v1``; requests go to ``{base_url}/chat/completions``. ``timeout`` of a
    request bounds the whole reply (the wait for a request slot included) and ends it with finish
    ``"deadline"``; ``connect_timeout`` and ``read_timeout`` bound each connection attempt and each
    wait for the next bytes, so a silent server fails with ``ModelError`` rather than hanging.

    Requests run side by side, ``parallel`` at a time (``chat.remote_parallel``), over one HTTP
    client kept for the model's life (its connections reused) and closed by ``close_connections``.

    ``n_ctx`` is the smaller of the configured window (``chat.n_ctx``) and the server's: asked by
    ``learn_window`` (``server_window.probe``), or learned from a refusal for length or a
    ``usage.prompt_tokens`` that shows a prompt cut to fit (``ContextExceeded`` then: refit).
    """

    native_tools = True
    #: The server parses tool calls and reasoning (``reasoning_content``) in its own format.
    chat_format = "openai"
    #: True once a reply brought reasoning (see the module docstring).
    reasons = False
    #: False: the UTF-8-byte estimate; True while the server counts (``server_counts``).
    exact_counts = False

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        n_ctx: int = 8192,
        api_key: str | None = None,
        connect_timeout: float = 10.0,
        read_timeout: float = 120.0,
        temperature: float | None = 0.0,
        parallel: int = DEFAULT_PARALLEL,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        #: The URL as every message names it: a password in it is masked.
        self.shown_url = hide_url_passwords(self.base_url)
        self.model = model
        #: ``chat.n_ctx``: the window unless the server's is smaller.
        self.configured_n_ctx = n_ctx
        self.model_id = f"openai:{self.shown_url}#{model}"
        self._api_key = usable_api_key(api_key)  # never logged, never in repr
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._temperature = temperature
        self._parallel = max(1, parallel)
        tls_context()  # built once, here: models are built in worker threads, off the event loop
        #: Estimates by what they read (text, name, calls): fitting and the usage report count a
        #: session's history several times a round, every round (``Model.count_message``: cached).
        self._counts: dict[tuple[str, str, bytes], int] = {}
        #: The same by object: a session's messages are the same objects reply after reply (the
        #: store keeps them), and the tool specs are constants, so most counts are found by ``id``
        #: without building a key. Each entry holds its object, so an ``id`` is never reused under it.
        self._by_object: dict[int, tuple[object, int]] = {}
        #: Characters of text the two caches hold (``COUNT_CACHE_CHARS`` at most).
        self._cached_chars = 0
        #: What the server said or showed of its window; None while it has said nothing.
        self.window: ServerWindow | None = None
        self._asked_window = False
        #: The estimate times this is the count (``usage.prompt_tokens`` over the estimate).
        self.calibration = 1.0
        #: Said once, to the user, when the server's window is smaller than ``chat.n_ctx``.
        self._notice: str | None = None
        self._told = False
        #: The server's own counts, once it showed it can give them (llama-server, vLLM).
        self._counter: ServerCounts | None = None
        self._connections: _Connections | None = None
        self._active = 0
        self._closing = False
        self._closings: set[asyncio.Future] = set()

    def __repr__(self) -> str:
        return f"RemoteModel({self.shown_url!r}, {self.model!r}, n_ctx={self.n_ctx})"

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    # -- the window ---------------------------------------------------------------------------
    @property
    def n_ctx(self) -> int:
        """The window prompts are fitted to: ``chat.n_ctx``, or the server's when it is smaller."""
        if self.window is not None and self.window.tokens < self.configured_n_ctx:
            return self.window.tokens
        return self.configured_n_ctx

    @n_ctx.setter
    def n_ctx(self, tokens: int) -> None:
        self.configured_n_ctx = tokens

    @property
    def window_source(self) -> str:
        """Where ``n_ctx`` comes from: ``"chat.n_ctx"`` or the server's endpoint, error or usage."""
        if self.window is not None and self.window.tokens < self.configured_n_ctx:
            return self.window.source
        return "chat.n_ctx"

    @property
    def server_n_ctx(self) -> int | None:
        """The window the server reported or showed; None while it said nothing."""
        return self.window.tokens if self.window is not None else None

    async def learn_window(self) -> None:
        """Ask the server for its window (once per model; again while the answer was a guess).

        Short and bounded (``server_window.PROBE_TIMEOUT_S``); a server that answers none of
        the questions leaves ``chat.n_ctx``.
        """
        if self._asked_window and (self.window is None or not self.window.provisional):
            return
        connections = self._connections_here()
        async with connections.probing:
            if self._asked_window and (self.window is None or not self.window.provisional):
                return
            found = await server_window.probe(connections.client, self.base_url, self.model, self._probe_headers())
            self._asked_window = True
        if found is not None:
            logger.info("%s: the server's window is %d tokens (%s)", self.model_id, found.tokens, found.source)
            self._set_window(found)
            if found.server in COUNTING_SERVERS and self._counter is None:
                self._counter = ServerCounts(
                    found.server, self.base_url, self.model, self._probe_headers(), tls_context()
                )
                self.exact_counts = True

    def _probe_headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _set_window(self, window: ServerWindow) -> None:
        known = self.window
        if known is not None and not known.provisional and (window.provisional or window.tokens > known.tokens):
            return  # what the server said or showed stands over a guess, and a smaller window over a larger
        self.window = window
        if window.tokens < self.configured_n_ctx:
            self._notice = (
                f"The model server's context window is {window.tokens:,} tokens ({window.source}), smaller "
                f"than chat.n_ctx ({self.configured_n_ctx:,}): Imprint fits prompts to {window.tokens:,}. "
                f"To give it more, {window.how_to_raise()}."
            )

    def take_window_notice(self) -> str | None:
        """The notice that the server's window is smaller than ``chat.n_ctx``, the first time it
        is asked once there is one; None otherwise."""
        if self._notice is None or self._told:
            return None
        self._told = True
        return self._notice

    def _learn(self, *, window: int | None, source: str, server: str, prompt: int | None, estimate: int) -> None:
        """What a refusal for length, or a prompt the server cut, showed: its window, and that
        the estimate counted this prompt short (``prompt``: the server's count, when it said)."""
        if window:
            shown = server or (self.window.server if self.window is not None else "")
            if self.window is None or window < self.window.tokens or self.window.provisional:
                self._set_window(ServerWindow(tokens=window, source=source, server=shown))
        if prompt and estimate:
            # The server's own count: the estimate is brought to it (and not below where it was).
            ratio = prompt / max(1.0, self._raw_prompt_estimate(estimate)) * CALIBRATION_MARGIN
        else:
            ratio = self.calibration * TRUNCATION_MARGIN  # no count given: allow a quarter more
        self.calibration = min(CALIBRATION_RANGE[1], max(self.calibration, ratio))

    def _raw_prompt_estimate(self, calibrated: int) -> float:
        return calibrated / self.calibration

    def _calibrate(self, prompt_tokens: int, estimate: int) -> None:
        """Bring the estimate to the server's own count of a prompt it took whole."""
        if self.exact_counts:
            return  # counted by the server already
        raw = self._raw_prompt_estimate(estimate)
        if raw < CALIBRATE_FROM_TOKENS:
            return
        low, high = CALIBRATION_RANGE
        self.calibration = min(high, max(low, prompt_tokens / raw * CALIBRATION_MARGIN))

    # -- connections ---------------------------------------------------------------------------
    def set_parallel(self, requests: int) -> None:
        """``chat.remote_parallel``: requests at the server at once (taken by the next request)."""
        self._parallel = max(1, requests)
        held = self._connections
        if held is None or held.slots.total_tokens == self._parallel or held.loop.is_closed():
            return
        # Waiters may be woken: done on the loop that owns them (this may be a worker thread).
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is held.loop:
            self._apply_parallel(held)
        elif held.loop.is_running():
            held.loop.call_soon_threadsafe(self._apply_parallel, held)

    def _apply_parallel(self, held: _Connections) -> None:
        held.slots.total_tokens = self._parallel

    def _connections_here(self) -> _Connections:
        """This event loop's client, slots and probe lock (a new loop, as in tests, gets its own)."""
        loop = asyncio.get_running_loop()
        held = self._connections
        if held is not None and held.loop is loop:
            return held
        client = httpx.AsyncClient(
            verify=tls_context(),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=KEEPALIVE_CONNECTIONS),
        )
        self._connections = _Connections(
            loop=loop, client=client, slots=anyio.CapacityLimiter(self._parallel), probing=anyio.Lock()
        )
        return self._connections

    def close_connections(self) -> None:
        """Close the HTTP client once no request is using it (now, when none is). Any thread."""
        self._closing = True
        if self._counter is not None:
            self._counter.close()
        held = self._connections
        if held is None or held.loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is held.loop:
            self._close_if_idle()
        elif held.loop.is_running():
            held.loop.call_soon_threadsafe(self._close_if_idle)

    async def aclose_connections(self) -> None:
        """Close the HTTP client now, on this loop (nothing may be using it)."""
        self._closing = True
        if self._counter is not None:
            self._counter.close()
        held, self._connections = self._connections, None
        if held is not None:
            await held.client.aclose()

    def _close_if_idle(self) -> None:
        held = self._connections
        if not self._closing or self._active or held is None:
            return
        self._connections = None
        closing = asyncio.ensure_future(held.client.aclose())
        self._closings.add(closing)
        closing.add_done_callback(self._closings.discard)

    # -- counting (the UTF-8-byte estimate, calibrated) -----------------------------------------
    def count_text(self, text: str) -> int:
        return self._calibrated(estimate_tokens(text))

    def _calibrated(self, raw: int) -> int:
        return raw if self.calibration == 1.0 else math.ceil(raw * self.calibration)

    def count_message(self, message: Message) -> int:
        held = self._by_object.get(id(message))
        if held is not None and held[0] is message:
            return self._calibrated(held[1])
        # The key's strings are the message's own: their hashes are computed once and kept.
        calls = msgspec.json.encode(message.tool_calls)
        key = (message.prompt_content, message.name or "", calls)
        count = self._counts.get(key)
        size = len(key[0]) + len(key[1]) + len(calls)
        if count is None:
            count = self._estimate(message)
            if self._room_for(size):
                self._counts[key] = count
        if self._room_for(size):
            self._held(message, count, size)
        return self._calibrated(count)

    def _room_for(self, size: int) -> bool:
        """Whether an entry of ``size`` characters may be kept: the caches are emptied when they
        would pass ``COUNT_CACHE_CHARS``; an entry larger than a quarter of it is not kept."""
        if size > COUNT_CACHE_CHARS // 4:
            return False
        if self._cached_chars + size > COUNT_CACHE_CHARS:
            self._counts.clear()
            self._by_object.clear()
            self._cached_chars = 0
        return True

    def _held(self, item: object, count: int, size: int = 0) -> int:
        if len(self._by_object) >= COUNT_CACHE_SIZE or len(self._counts) >= COUNT_CACHE_SIZE:
            self._by_object.clear()
            self._counts.clear()
            self._cached_chars = 0
        self._by_object[id(item)] = (item, count)
        self._cached_chars += size
        return count

    @staticmethod
    def _estimate(message: Message) -> int:
        calls = "".join(
            json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False) for c in message.tool_calls
        )
        return (
            MESSAGE_OVERHEAD
            + estimate_tokens(message.prompt_content)
            + estimate_tokens(calls)
            + estimate_tokens(message.name or "")
        )

    def count_tool(self, tool: ToolSpec) -> int:
        held = self._by_object.get(id(tool))
        if held is not None and held[0] is tool:
            return self._calibrated(held[1])
        return self._calibrated(self._held(tool, estimate_tokens(json.dumps(tool.as_openai(), ensure_ascii=False))))

    def count_prompt(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        """The server's own count when it gives one (blocking: from a worker thread), else the
        estimate: ``PROMPT_OVERHEAD`` + tools + ``count_message`` of each message."""
        counter = self._counter
        if counter is not None:
            exact = counter.count([to_openai_message(m) for m in messages], [t.as_openai() for t in tools])
            if exact is not None:
                return exact
            self.exact_counts = False
        return PROMPT_OVERHEAD + sum(self.count_tool(t) for t in tools) + sum(self.count_message(m) for m in messages)

    # -- generation -------------------------------------------------------------------------
    def request_body(self, messages: Sequence[Message], tools: Sequence[ToolSpec], max_tokens: int) -> dict[str, Any]:
        """The JSON body sent for one request."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [to_openai_message(m) for m in messages],
            "max_tokens": max_tokens,
            "stream": True,
            # Servers that support it send usage (with cached prompt tokens) in a last chunk.
            "stream_options": {"include_usage": True},
        }
        if self._temperature is not None:
            body["temperature"] = self._temperature
        if tools:
            body["tools"] = [tool.as_openai() for tool in tools]
        return body

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

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
        grammar: str | None = None,  # not sent: OpenAI-compatible servers do not share one way to take it
        on_reasoning: TextCallback | None = None,
    ) -> Completion:
        # The server's count is a request to it: asked from a worker thread, not on the loop.
        prompt_tokens = (
            await in_worker(self.count_prompt, messages, tools)
            if self._counter is not None
            else self.count_prompt(messages, tools)
        )
        if prompt_tokens + max_tokens > self.n_ctx:
            if self.window_source != "chat.n_ctx":
                raise ContextExceeded(self._too_long(prompt_tokens, max_tokens))
            raise ModelError(
                f"prompt of about {prompt_tokens} tokens plus {max_tokens} output tokens "
                f"exceeds the {self.n_ctx}-token context (chat.n_ctx)"
            )
        stream = _Stream(
            filter=VisibleTextFilter(tools, "native"),
            on_text=on_text,
            secret=_SecretMask(self._api_key),
            allowance=max_tokens * OUTPUT_BYTES_PER_TOKEN,
            on_reasoning=on_reasoning,
            thought_secret=_SecretMask(self._api_key),
        )
        body = self.request_body(messages, tools, max_tokens)
        deadline = math.inf if timeout is None else anyio.current_time() + timeout
        with anyio.move_on_after(timeout):
            try:
                await self._stream(body, stream, deadline, on_retry, on_start)
            except _TooLong as refused:
                found = refused.exceeded
                self._learn(
                    window=found.window,
                    source="the server's refusal",
                    server=found.server,
                    prompt=found.prompt_tokens,
                    estimate=prompt_tokens,
                )
                raise ContextExceeded(
                    f"{refused} ({self._too_long(prompt_tokens, max_tokens, refused=True)})"
                ) from None
            await self._check_prompt(stream, prompt_tokens, max_tokens)
            return self._completion(stream, tools, prompt_tokens)
        # The deadline passed: keep what was written (ADR semantics of the base protocol).
        parsed = stream.parsed(tools)
        self._saw_reasoning(stream)
        return report_usage(
            self.model_id,
            Completion(
                text=parsed.text,
                finish_reason="deadline",
                wrote_tool_call=parsed.wrote_call,
                usage=self._usage(stream, prompt_tokens, parsed),
                reasoning="".join(stream.thought),
            ),
        )

    def _too_long(self, prompt_tokens: int, max_tokens: int, *, refused: bool = False) -> str:
        """Why a prompt does not fit the server's window, and what would make it fit."""
        window = self.window
        advice = window.how_to_raise() if window is not None else server_window.GENERIC_RAISE
        shown = f"{self.n_ctx:,}-token window" + (f" ({window.source})" if window is not None else "")
        what = "the prompt" if refused else f"a prompt of about {prompt_tokens:,} tokens"
        return (
            f"the model server at {self.shown_url} has a {shown}, too small for {what} with "
            f"{max_tokens:,} tokens for the answer; to fit more, {advice}, or lower chat.max_tokens"
        )

    async def _check_prompt(self, stream: _Stream, prompt_tokens: int, max_tokens: int) -> None:
        """Calibrate the estimate from the server's own count of the prompt, or, when that count
        leaves no room for the output allowance in the server's window, take the prompt as cut to
        fit (Ollama cuts it silently, from the front): learn and raise ``ContextExceeded``."""
        usage = stream.server_usage or {}
        counted = usage.get("prompt_tokens")
        if not isinstance(counted, int) or isinstance(counted, bool) or counted <= 0:
            return
        if self.window is not None and self.window.provisional:
            await self.learn_window()  # a guessed window: what the server has now it has the model loaded
        window = self.window
        if window is not None and counted + max_tokens > window.tokens:
            if prompt_tokens + max_tokens <= window.tokens:
                # The window it has now was known, and the estimate still said the prompt fit:
                # the estimate counted short (what the server counted is what it kept, not what
                # was sent, so it cannot say by how much).
                self._learn(
                    window=None, source=window.source, server=window.server, prompt=None, estimate=prompt_tokens
                )
            logger.warning(
                "%s: the server counted %d prompt tokens in its %d-token window: the prompt was cut to fit",
                self.model_id,
                counted,
                window.tokens,
            )
            raise ContextExceeded(
                f"the server cut the prompt to fit its window (it counted {counted:,} prompt tokens; "
                f"{self._too_long(prompt_tokens, max_tokens, refused=True)})"
            )
        self._calibrate(counted, prompt_tokens)

    def _saw_reasoning(self, stream: _Stream) -> None:
        if stream.thought:
            self.reasons = True

    def _completion(self, stream: _Stream, tools: Sequence[ToolSpec], prompt_tokens: int) -> Completion:
        parsed = stream.parsed(tools)
        self._saw_reasoning(stream)
        finish: FinishReason = "length" if stream.finish == "length" else "stop"
        if stream.guard.looping:
            finish = "repetition"
        elif parsed.calls and finish == "stop":
            finish = "tool_calls"
        looped = finish == "repetition"
        completion = Completion(
            text=cut_before_loop(parsed.text, stream.guard.loop_start) if looped else parsed.text,
            tool_calls=() if looped else parsed.calls,
            finish_reason=finish,
            tool_call_error=None if looped else parsed.error,
            wrote_tool_call=parsed.wrote_call,
            usage=self._usage(stream, prompt_tokens, parsed),
            reasoning="".join(stream.thought),
        )
        return report_usage(self.model_id, completion)

    def _usage(self, stream: _Stream, prompt_tokens: int, parsed: ParsedOutput) -> Usage:
        generated = math.ceil(stream.output_bytes / BYTES_PER_TOKEN)
        evaluated = prompt_tokens
        usage = stream.server_usage or {}
        if isinstance(usage.get("prompt_tokens"), int):
            # The server's own count of what it processed: its prompt less any cached prefix.
            details = usage.get("prompt_tokens_details") or {}
            cached = details.get("cached_tokens") if isinstance(details, dict) else None
            evaluated = max(0, usage["prompt_tokens"] - (cached if isinstance(cached, int) else 0))
        return Usage(prompt_tokens=prompt_tokens, evaluated_tokens=evaluated, generated_tokens=generated)

    async def _stream(
        self,
        body: dict[str, Any],
        stream: _Stream,
        deadline: float,
        on_retry: RetryCallback | None,
        on_start: StartHook | None = None,
    ) -> None:
        """Stream one reply, retrying a transient failure (429, 5xx gateway errors, a connection
        reset before the first byte) after ``RETRY_DELAYS_S`` or the server's ``Retry-After``,
        while the wait ends before ``deadline``; never once any of the reply has arrived.

        Each attempt holds one of the model's request slots (``chat.remote_parallel``), the wait
        between attempts does not: a server's ``Retry-After: 120`` for one session must not hold
        other sessions' model calls. ``on_start`` runs once, the first time a slot is held (the
        budget is reserved once).
        """
        connections = self._connections_here()
        self._active += 1
        try:
            await self._attempts(connections, body, stream, deadline, on_retry, on_start)
        finally:
            self._active -= 1
            if self._closing:
                self._close_if_idle()

    async def _attempts(
        self,
        connections: _Connections,
        body: dict[str, Any],
        stream: _Stream,
        deadline: float,
        on_retry: RetryCallback | None,
        on_start: StartHook | None,
    ) -> None:
        attempt = 0
        while True:
            try:
                held = object()  # a slot per attempt, not per task: a task may ask twice over time
                await connections.slots.acquire_on_behalf_of(held)
                try:
                    if on_start is not None:
                        await on_start()
                        on_start = None
                    await self._stream_unmasked(connections.client, body, stream)
                finally:
                    connections.slots.release_on_behalf_of(held)
                return
            except _Transient as error:
                attempt += 1
                if stream.received:
                    raise self._masked(error) from None
                if attempt > len(RETRY_DELAYS_S):
                    raise self._masked(ModelError(f"{error} (tried {attempt} times)")) from None
                wait = error.retry_after if error.retry_after is not None else RETRY_DELAYS_S[attempt - 1]
                left = deadline - anyio.current_time()
                if wait >= left:
                    raise self._masked(
                        ModelError(f"{error} (not retried: a wait of {wait:g} s would pass the request's deadline)")
                    ) from None
                if on_retry is not None:
                    on_retry(
                        hide_url_passwords(
                            mask(
                                f"The model server: {error}. Retrying in {wait:g} s (attempt {attempt + 1} of "
                                f"{len(RETRY_DELAYS_S) + 1})…",
                                self._api_key,
                            )
                        )
                    )
                await anyio.sleep(wait)
            except _TooLong as error:
                raise _TooLong(hide_url_passwords(mask(str(error), self._api_key)), error.exceeded) from None
            except ModelError as error:
                raise self._masked(error) from None

    def _masked(self, error: ModelError) -> ModelError:
        # Error bodies are the server's words, and some echo the key they were sent; the
        # HTTP library's words can quote the URL, password and all.
        masked = hide_url_passwords(mask(str(error), self._api_key))
        if isinstance(error, _Transient):
            return ModelError(masked)
        return type(error)(masked) if masked != str(error) else error

    async def _stream_unmasked(self, client: httpx.AsyncClient, body: dict[str, Any], stream: _Stream) -> None:
        timeout = httpx.Timeout(
            connect=self._connect_timeout, read=self._read_timeout, write=self._read_timeout, pool=self._connect_timeout
        )
        started = time.monotonic()
        try:
            # msgspec encodes the body (a prompt of every kept message) several times faster.
            content = msgspec.json.encode(body)
            headers = {**self._headers(), "Content-Type": "application/json"}
            async with client.stream("POST", self.url, content=content, headers=headers, timeout=timeout) as response:
                if response.status_code >= 400:
                    await response.aread()
                    message = self._status_message(response)
                    exceeded = server_window.context_exceeded(message, _json_or_none(response))
                    if exceeded is not None:
                        raise _TooLong(message, exceeded)
                    if response.status_code in TRANSIENT_STATUSES:
                        raise _Transient(message, _retry_after(response))
                    raise ModelError(message)
                stream.opened = True
                await self._read_events(response, stream)
            if not stream.done and stream.finish is None and not stream.chunks:
                # Some servers (llama-cpp-python's) end a stream they cannot start without a
                # word: asked once without streaming, they say why (a prompt over the window).
                await self._why_no_stream(client, body, timeout)
        except httpx.TimeoutException as error:
            waited = (
                self._connect_timeout
                if isinstance(error, (httpx.ConnectTimeout, httpx.PoolTimeout))
                else self._read_timeout
            )
            raise ModelError(
                f"no answer within {waited:g} s from the model server at {self.base_url} "
                f"(after {time.monotonic() - started:.1f} s)"
            ) from None
        except httpx.ConnectError as error:
            raise ModelError(self._connect_message(error)) from None
        except (httpx.RemoteProtocolError, httpx.ReadError) as error:
            reason = f"the stream ended before the reply finished ({error or type(error).__name__})"
            if stream.opened and not stream.chunks:
                # Answered 200, then cut before a chunk: a server that could not start the reply.
                await self._why_broken(client, body, timeout)  # a refusal for length is not retried
            if not stream.received:
                raise _Transient(reason) from None  # reset before the first byte: safe to ask again
            raise ModelError(reason) from None
        except httpx.HTTPError as error:
            raise ModelError(f"the request to {self.url} failed: {error or type(error).__name__}") from None
        if not stream.done and stream.finish is None:
            raise ModelError("the stream ended before the reply finished (no [DONE] and no finish_reason)")

    async def _why_broken(self, client: httpx.AsyncClient, body: dict[str, Any], timeout: httpx.Timeout) -> None:
        """``_why_no_stream`` for a connection cut before the first chunk; its own failures ignored."""
        try:
            await self._why_no_stream(client, body, timeout)
        except httpx.HTTPError:
            return

    async def _why_no_stream(self, client: httpx.AsyncClient, body: dict[str, Any], timeout: httpx.Timeout) -> None:
        """Ask once more without streaming, for one token, to hear why the stream stopped; raise
        ``_TooLong`` when the answer is a refusal for length, else return (the caller reports the
        empty stream)."""
        asked = {key: value for key, value in body.items() if key not in ("stream", "stream_options")}
        asked["max_tokens"] = 1
        headers = {**self._headers(), "Accept": "application/json", "Content-Type": "application/json"}
        async with client.stream(
            "POST", self.url, content=msgspec.json.encode(asked), headers=headers, timeout=timeout
        ) as response:
            if response.status_code < 400:
                return
            await response.aread()
            message = self._status_message(response)
            exceeded = server_window.context_exceeded(message, _json_or_none(response))
            if exceeded is not None:
                raise _TooLong(message, exceeded)

    async def _read_events(self, response: httpx.Response, stream: _Stream) -> None:
        async for line in self._stream_lines(response):
            stream.received = True
            if not line.startswith("data:"):
                continue  # comments (": ping"), event names, blank separators
            data = line[5:].strip()
            if data == "[DONE]":
                stream.done = True
                return
            stream.apply(parse_chunk(data))
            if stream.cut or stream.guard.looping:
                return  # leaving the response's context closes the stream: the server stops

    async def _stream_lines(self, response: httpx.Response) -> AsyncIterator[str]:
        """The stream's lines, ended by CR LF, LF or CR as server-sent events are; ModelError
        for one longer than ``MAX_STREAM_LINE_CHARS`` (httpx's ``aiter_lines`` has no bound).

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
            if size > MAX_STREAM_LINE_CHARS:
                raise ModelError(
                    f"the model server at {self.base_url} sent a line of more than {MAX_STREAM_LINE_CHARS:,} "
                    "characters without a line break: not a stream of chat.completion.chunk events"
                )
        if size:
            yield "".join(parts)

    def _status_message(self, response: httpx.Response) -> str:
        status = response.status_code
        detail = _error_text(_json_or_none(response)) or response.text.strip()[:300]
        suffix = f": {detail}" if detail else ""
        if status == 401:
            return f"the server answered 401 Unauthorized: check {API_KEY_ENV}{suffix}"
        if status == 403:
            return f"the server answered 403 Forbidden: check {API_KEY_ENV} and access to model {self.model!r}{suffix}"
        if status == 404:
            return f"model {self.model!r} was not found (404) at {self.url}{suffix}; check chat.model and chat.base_url"
        if status == 429:
            retry = response.headers.get("retry-after")
            wait = f"; retry after {retry} s" if retry else ""
            return f"rate limited (429) by {self.base_url}{wait}{suffix}"
        if status >= 500:
            return f"server error {status}{suffix or ': ' + response.reason_phrase}"
        return f"the server refused the request ({status} {response.reason_phrase}){suffix}"

    def _connect_message(self, error: httpx.ConnectError) -> str:
        causes = _causes(error)
        if any(isinstance(c, socket.gaierror) for c in causes) or _mentions(
            error, "name or service not known", "name resolution", "nodename nor servname", "getaddrinfo"
        ):
            host = httpx.URL(self.base_url).host
            return f"could not resolve the host {host!r} of the model server at {self.base_url} (DNS lookup failed)"
        if any(isinstance(c, ConnectionRefusedError) for c in causes) or _mentions(
            error, "refused", "all connection attempts failed"
        ):
            return f"the model server at {self.base_url} refused the connection; is it running?"
        return f"could not connect to the model server at {self.base_url}: {error or type(error).__name__}"


def _causes(error: BaseException) -> list[BaseException]:
    """The exception, its causes and contexts, and members of exception groups among them."""
    seen: list[BaseException] = []
    todo: list[BaseException] = [error]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.append(current)
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
    return seen


def _mentions(error: BaseException, *words: str) -> bool:
    text = " ".join(str(e).lower() for e in _causes(error))
    return any(word in text for word in words)


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except (ValueError, UnicodeDecodeError):
        return None


def _error_text(body: Any) -> str:
    """The message of an OpenAI-style ``{"error": {"message": ...}}`` (or ``{"detail": ...}``) body."""
    if not isinstance(body, dict):
        return ""
    error = body.get("error", body.get("detail"))
    if isinstance(error, dict):
        return str(error.get("message") or error)[:300]
    if error:
        return str(error)[:300]
    return ""
