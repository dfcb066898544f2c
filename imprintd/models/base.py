"""The Model interface every record talks to (docs/architecture.md, "models/: one interface, two providers").

A model renders and counts a fully formatted prompt (messages plus tool schemas, generation
prompt included), streams a completion under a deadline and cancellation, and reports usage.
Providers: ``local.py`` (llama.cpp, exact counts) and ``remote.py`` (OpenAI-compatible, the
UTF-8-byte estimate of docs/decisions.md, "Counting tokens"). Tests use the stand-in in ``tests/standin.py``.

A request also carries, implicitly, the session it serves (``session_requests``, set by
``Chat.reply`` for the reply's task) and whether its model state is worth keeping
(``side_requests``: the summary and section workers). The local provider keeps and restores
llama.cpp's state per session by it (``state_cache.py``); remote providers ignore it.
"""

from __future__ import annotations

import contextvars
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Literal, Protocol, runtime_checkable

import anyio
import msgspec

from imprintd.messages import Message, ToolCall, ToolSpec

logger = logging.getLogger("imprintd.models")

FinishReason = Literal["stop", "length", "tool_calls", "deadline", "repetition"]


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """What one request cost: its formatted prompt, the part actually evaluated, and the output."""

    prompt_tokens: int
    evaluated_tokens: int
    generated_tokens: int


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    """The result of one model request.

    ``text`` is what the model wrote, tool-call markup removed. ``finish_reason`` is
    ``"deadline"`` when the request's time ran out; ``text`` then holds what was written
    before it. ``"repetition"``: the model started looping (``repetition.RepetitionGuard``)
    and generation stopped; ``text`` is cut back to the last whole sentence before the loop.
    ``tool_call_error`` names what was wrong with a malformed call, which is
    not run; the caller tells the model. ``wrote_tool_call`` is True when no tools were
    offered and the model wrote call markup as text anyway (``<tool_call>``, or in JSON mode
    a ``{"name": …}`` object; ``chat_formats.calls.VisibleTextFilter``): ``text`` and what streamed
    stop before it, whitespace before it included.
    """

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: FinishReason = "stop"
    usage: Usage = Usage(prompt_tokens=0, evaluated_tokens=0, generated_tokens=0)
    tool_call_error: str | None = None
    wrote_tool_call: bool = False
    #: What a reasoning model thought before it answered (its chat format's markers removed);
    #: never part of ``text``.
    reasoning: str = ""


class ModelError(Exception):
    """A model request failed. The message names the cause in words a user can act on."""


class ContextExceeded(ModelError):
    """The server refused a prompt as too long for its window, or cut it to fit (the remote
    provider). The model has learned the window by then: fitting again gives a prompt that fits,
    so a caller may refit and ask once more. The message names the window and how to raise it."""


class ModelUnavailable(ModelError):
    """No model can be loaded or reached (missing GGUF, no embedded model, bad config)."""


TextCallback = Callable[[str], None]
#: Called on the event loop once a request holds the inference lock, before anything is
#: evaluated; what it raises ends the request unsent (the research budget charges here, so
#: a local model's held prefix is measured when no other request can change it).
StartHook = Callable[[], Awaitable[object]]
#: Told, in words, that a transient failure is being retried ("server error 502; retrying in 2 s").
RetryCallback = Callable[[str], None]


@runtime_checkable
class Model(Protocol):
    """What the core needs of a chat model."""

    #: Identity for prefix sharing: the same id means the same tokenizer and template.
    model_id: str
    #: The context window the prompt, tool schemas and output allowance must fit.
    n_ctx: int
    #: True when counts are the model's own tokenization (local), False for an estimate (remote).
    exact_counts: bool

    @property
    def chat_format(self) -> str:
        """How this model writes tool calls and reasoning (``models/chat_formats/table.py``): ``hermes``,
        ``json-fallback``, …; ``openai`` for a remote server, which parses them itself."""
        ...

    @property
    def reasons(self) -> bool:
        """True when the model thinks before it answers (its reasoning comes through ``on_reasoning``)."""
        ...

    @property
    def native_tools(self) -> bool:
        """True when the model's own template renders tool schemas and it writes calls natively."""
        ...

    def count_prompt(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        """Tokens of the fully formatted prompt, generation prompt included (exact for local)."""
        ...

    def count_message(self, message: Message) -> int:
        """Tokens ``message`` adds to a formatted prompt; cached, cheap to call repeatedly."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens of plain text (for generated output, clipping and notes)."""
        ...

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
        """Generate a reply, calling ``on_text`` with each piece of visible text as it comes,
        and ``on_reasoning`` with each piece of reasoning (never answer text).

        ``grammar``, a GBNF grammar (llama.cpp's), constrains what a local model may write; a
        provider that cannot constrain its output (a remote server) ignores it.

        A local model runs under the process-wide inference lock (one context, one queue); a
        remote one holds one of its server's request slots (``chat.remote_parallel``), so
        requests to a server run side by side. ``timeout`` covers the wait for the lock or
        slot too. ``on_start`` is awaited once it is held, before anything is evaluated (not
        at all when the deadline passes in the queue). A provider that
        retries transient failures says so through ``on_retry``. Cancelling the calling task
        stops generation before the next token and re-raises the cancellation. Raises
        ``ModelError`` on failure.
        """
        ...


@runtime_checkable
class SessionStates(Protocol):
    """A model that keeps state per session (the local provider, ``state_cache.py``)."""

    def set_state_limits(self, *, memory_bytes: int, disk_bytes: int) -> None:
        """Apply ``chat.state_cache_memory`` and ``chat.state_cache_disk``."""
        ...

    def forget_session(self, session_id: str) -> None:
        """Delete every state of ``session_id``."""
        ...

    def close_states(self) -> None:
        """Write what is queued and stop writing."""
        ...

    def make_way(self, scope: RequestScope) -> None:
        """``scope``'s request comes next: start keeping the state it would replace (returns at once)."""
        ...


@runtime_checkable
class ServerConnections(Protocol):
    """A model behind a server (the remote provider): requests side by side, one HTTP client."""

    def set_parallel(self, requests: int) -> None:
        """Apply ``chat.remote_parallel``: how many requests may be at the server at once."""
        ...

    def close_connections(self) -> None:
        """Close the model's HTTP client once no request is using it (the model was replaced,
        or the daemon stops). Callable from any thread."""
        ...


@runtime_checkable
class ServedWindow(Protocol):
    """A model whose window is its server's (the remote provider): asked, then known."""

    async def learn_window(self) -> None:
        """Ask the server for its window, once (short timeouts; nothing said: ``chat.n_ctx``)."""
        ...

    def take_window_notice(self) -> str | None:
        """Once: the server's window is smaller than ``chat.n_ctx`` and how to raise it."""
        ...


class Notices(Protocol):
    """Where a notice for the user goes (``ReplyEvents.notice``)."""

    def notice(self, message: str) -> None: ...


async def learn_window(model: object, events: Notices | None = None) -> None:
    """Ask a served model's server for its window; tell ``events`` (``ReplyEvents.notice``) once
    when it is smaller than ``chat.n_ctx``. Nothing for a local model."""
    if not isinstance(model, ServedWindow):
        return
    await model.learn_window()
    tell_window(model, events)


def tell_window(model: object, events: Notices | None) -> None:
    """``ReplyEvents.notice`` of the window notice, the first time there is one."""
    if events is None or not isinstance(model, ServedWindow):
        return
    notice = model.take_window_notice()
    if notice:
        events.notice(notice)


def window_source(model: object) -> str:
    """Where ``model.n_ctx`` comes from: ``"chat.n_ctx"``, or the server that said it was smaller."""
    return str(getattr(model, "window_source", "chat.n_ctx"))


def server_window(model: object) -> int | None:
    """The context window the model's server reported or showed; None for a local model or a
    server that said nothing."""
    value = getattr(model, "server_n_ctx", None)
    return value if isinstance(value, int) else None


#: The output allowance of a model turn when the server's window is smaller than ``chat.n_ctx``:
#: at most this share of the window (``chat.max_tokens`` is chosen for ``chat.n_ctx``).
SERVER_WINDOW_OUTPUT_SHARE = 4
#: ... and never less than this many tokens.
MIN_OUTPUT_ALLOWANCE = 128


def output_allowance(model: object, max_tokens: int) -> int:
    """A turn's output allowance: ``chat.max_tokens``, or a quarter of the server's window when
    that window, smaller than ``chat.n_ctx``, is what the model has (a 1,024-token server and
    the default 1,024 output tokens would leave no room for any prompt)."""
    if window_source(model) == "chat.n_ctx":
        return max_tokens
    n_ctx = int(getattr(model, "n_ctx", 0))
    return min(max_tokens, max(MIN_OUTPUT_ALLOWANCE, n_ctx // SERVER_WINDOW_OUTPUT_SHARE))


def report_usage(model_id: str, completion: Completion) -> Completion:
    """Log what a request cost (prompt, actually evaluated, generated) and pass it on."""
    usage = completion.usage
    logger.info(
        "%s: %d prompt tokens, %d evaluated, %d generated (%s)",
        model_id,
        usage.prompt_tokens,
        usage.evaluated_tokens,
        usage.generated_tokens,
        completion.finish_reason,
    )
    return completion


_locks: weakref.WeakKeyDictionary[object, anyio.Lock] = weakref.WeakKeyDictionary()


def inference_lock() -> anyio.Lock:
    """The one lock that serializes local model calls in this process (one per event loop).

    A local model has one llama.cpp context: its requests take turns. A remote model's
    requests do not take it (``remote.RemoteModel``: the server's request slots)."""
    import asyncio

    loop = asyncio.get_running_loop()
    lock = _locks.get(loop)
    if lock is None:
        lock = _locks[loop] = anyio.Lock()
    return lock


class RequestScope(msgspec.Struct, frozen=True, kw_only=True):
    """Whose request this is, for the model state a local provider keeps per session."""

    session_id: str
    #: False for a session with persistence off: its states stay in memory.
    persist: bool
    #: False for side requests (the summary, section workers): their state is not kept, and
    #: the session's state is restored after them.
    keep: bool = True


# A context variable, not a parameter: every request of a reply (research rounds, workers, the
# summary, the final answer) serves that reply's session, and each reply runs in its own task,
# so concurrent replies never see each other's scope.
_scope: contextvars.ContextVar[RequestScope | None] = contextvars.ContextVar("imprintd_request_scope", default=None)


def request_scope() -> RequestScope | None:
    """The scope of requests made here; None outside a reply."""
    return _scope.get()


@contextmanager
def session_requests(session_id: str, *, persist: bool) -> Iterator[None]:
    """Model requests made in this block serve ``session_id``."""
    token = _scope.set(RequestScope(session_id=session_id, persist=persist))
    try:
        yield
    finally:
        _scope.reset(token)


@contextmanager
def side_requests() -> Iterator[None]:
    """Model requests made in this block (a summary, a section worker) are not kept."""
    scope = _scope.get()
    token = _scope.set(None if scope is None else msgspec.structs.replace(scope, keep=False))
    try:
        yield
    finally:
        _scope.reset(token)
