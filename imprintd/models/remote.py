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
with ``<think>`` is taken as reasoning up to ``</think>`` (``remote_reply._ThinkSplitter``). The model
``reasons`` from the first reply that brought any (a server's reasoning parser is not announced
before it is used).

Prompts are counted with the UTF-8-byte estimate (``remote_counts``), or the
server's own counts where it gives them (``server_counts``); ``chat.n_ctx`` is the budget, or
the server's window when it is smaller (``server_window``). The reply's output is bounded too:

* a server that ignores ``max_tokens`` (one misconfigured to stream forever) is cut
  once its text, tool names and arguments reach ``max_tokens * OUTPUT_BYTES_PER_TOKEN`` bytes:
  the stream is closed and the completion ends with finish ``"length"``, as a local model's
  does. Not at the three bytes of the estimate: that over-counts, and would cut an English
  answer that is within its allowance at three quarters of it.

The event stream is read by ``remote_events`` and each reply assembled by ``remote_reply``;
``remote_failures`` says what a failure means and whether it is worth asking again.

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
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import msgspec

from imprintd.messages import Message, ToolSpec
from imprintd.models import server_window
from imprintd.models.api_key import API_KEY_ENV as API_KEY_ENV  # named as remote.API_KEY_ENV by callers
from imprintd.models.api_key import request_headers, usable_api_key
from imprintd.models.base import (
    Completion,
    ContextExceeded,
    FinishReason,
    ModelError,
    RetryCallback,
    StartHook,
    TextCallback,
    Usage,
    report_usage,
)
from imprintd.models.chat_formats.calls import ParsedOutput, VisibleTextFilter
from imprintd.models.chat_formats.hermes import HERMES
from imprintd.models.remote_counts import BYTES_PER_TOKEN, PROMPT_OVERHEAD, EstimatedCounts
from imprintd.models.remote_events import parse_chunk, stream_lines
from imprintd.models.remote_failures import (
    TRANSIENT_STATUSES,
    _json_or_none,
    _retry_after,
    _TooLong,
    _Transient,
    connect_message,
    status_message,
)
from imprintd.models.remote_reply import _SecretMask, _Stream
from imprintd.models.repetition import cut_before_loop
from imprintd.models.server_counts import COUNTING_SERVERS, ServerCounts
from imprintd.models.server_http import read_error_body, tls_context
from imprintd.models.server_window import ServerWindow
from imprintd.offload import in_worker
from imprintd.redact import hide_url_passwords, mask

logger = logging.getLogger(__name__)

#: Requests at the server at once by default (``chat.remote_parallel``): llama-server's default
#: slots and LM Studio's default parallel predictions are 4; vLLM takes many more, and Ollama
#: queues what is past its ``OLLAMA_NUM_PARALLEL`` itself.
DEFAULT_PARALLEL = 4
#: Connections kept open to the server between requests.
KEEPALIVE_CONNECTIONS = 8
#: UTF-8 bytes a token of output may average before a server is taken to ignore ``max_tokens``:
#: about twice what tokenizers average on English (four), so an answer within its allowance is
#: never cut, while one that streams on stops within 8 KiB per 1,024 tokens.
OUTPUT_BYTES_PER_TOKEN = 8
#: Characters one line of the event stream may hold. A chunk carries a few tokens; even a whole
#: answer in one chunk (32,768 tokens of 8 bytes, JSON-escaped) fits. A server that streams on
#: without a line break is refused instead of being buffered without end.
MAX_STREAM_LINE_CHARS = 4 << 20
#: Seconds waited before each retry of a transient failure (unless the server says Retry-After).
RETRY_DELAYS_S = (1.0, 2.0, 4.0)
#: Retries of one request at most (one per delay).
MAX_RETRIES = len(RETRY_DELAYS_S)


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


@dataclass
class _Connections:
    """What a model keeps per event loop: its HTTP client, its request slots, the window question."""

    loop: asyncio.AbstractEventLoop
    client: httpx.AsyncClient
    slots: anyio.CapacityLimiter
    probing: anyio.Lock


def _on_loop(loop: asyncio.AbstractEventLoop, call: Callable[..., None], *args: Any) -> None:
    """``call(*args)`` on ``loop``: now when this thread runs it, else soon from its own thread;
    not at all when it has stopped."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        call(*args)
    elif loop.is_running():
        loop.call_soon_threadsafe(call, *args)


class RemoteModel(EstimatedCounts):
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
        super().__init__()
        tls_context()  # built once, here: models are built in worker threads, off the event loop
        #: What the server said or showed of its window; None while it has said nothing.
        self.window: ServerWindow | None = None
        self._asked_window = False
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
        return request_headers(self._api_key, "application/json")

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
        self._recalibrate(prompt, estimate)

    # -- connections ---------------------------------------------------------------------------
    def set_parallel(self, requests: int) -> None:
        """``chat.remote_parallel``: requests at the server at once (taken by the next request)."""
        self._parallel = max(1, requests)
        held = self._connections
        if held is None or held.slots.total_tokens == self._parallel or held.loop.is_closed():
            return
        # Waiters may be woken: done on the loop that owns them (this may be a worker thread).
        _on_loop(held.loop, self._apply_parallel, held)

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
        _on_loop(held.loop, self._close_if_idle)

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

    # -- counting (the UTF-8-byte estimate, calibrated: ``remote_counts``) ------------------------
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
        return request_headers(self._api_key, "text/event-stream")

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
            filter=VisibleTextFilter(tools, HERMES.syntax),
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
                    response = await read_error_body(response)
                    message = status_message(response, model=self.model, url=self.url, base_url=self.base_url)
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
            raise ModelError(connect_message(error, self.base_url)) from None
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
            response = await read_error_body(response)
            message = status_message(response, model=self.model, url=self.url, base_url=self.base_url)
            exceeded = server_window.context_exceeded(message, _json_or_none(response))
            if exceeded is not None:
                raise _TooLong(message, exceeded)

    async def _read_events(self, response: httpx.Response, stream: _Stream) -> None:
        async for line in stream_lines(response, max_chars=MAX_STREAM_LINE_CHARS, base_url=self.base_url):
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
