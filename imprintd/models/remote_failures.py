"""What a model server's failures say: which are worth asking again (and after how long), which
are refusals for length, and the words that name each for the user (for ``remote.py``).

A transient failure (429, 500, 502, 503, 504, or a connection reset before the first byte) is a
``_Transient``, with the server's ``Retry-After`` when it named one; a refusal for length is a
``_TooLong`` carrying what ``server_window.context_exceeded`` read of it. Everything else is a
``ModelError`` naming the cause: refused connection, unknown host, 401, 403, 404, 429, 5xx.
"""

from __future__ import annotations

import email.utils
import socket
import time
from typing import Any

import httpx

from imprintd.models import server_window
from imprintd.models.api_key import API_KEY_ENV
from imprintd.models.base import ModelError
from imprintd.models.bounded_json import loads_bounded

#: Statuses worth asking again: rate limited, or a server or gateway failing for now.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


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


def status_message(response: httpx.Response, *, model: str, url: str, base_url: str) -> str:
    """What an answer of status 400 or more (its body read) says, in words, for ``model`` asked
    at ``url`` of the server at ``base_url``."""
    status = response.status_code
    detail = _error_text(_json_or_none(response)) or response.text.strip()[:300]
    suffix = f": {detail}" if detail else ""
    if status == 401:
        return f"the server answered 401 Unauthorized: check {API_KEY_ENV}{suffix}"
    if status == 403:
        return f"the server answered 403 Forbidden: check {API_KEY_ENV} and access to model {model!r}{suffix}"
    if status == 404:
        return f"model {model!r} was not found (404) at {url}{suffix}; check chat.model and chat.base_url"
    if status == 429:
        retry = response.headers.get("retry-after")
        wait = f"; retry after {retry} s" if retry else ""
        return f"rate limited (429) by {base_url}{wait}{suffix}"
    if status >= 500:
        return f"server error {status}{suffix or ': ' + response.reason_phrase}"
    return f"the server refused the request ({status} {response.reason_phrase}){suffix}"


def connect_message(error: httpx.ConnectError, base_url: str) -> str:
    """Why the server at ``base_url`` could not be reached: an unknown host, a refused
    connection, or httpx's own words."""
    causes = _causes(error)
    if any(isinstance(c, socket.gaierror) for c in causes) or _mentions(
        error, "name or service not known", "name resolution", "nodename nor servname", "getaddrinfo"
    ):
        host = httpx.URL(base_url).host
        return f"could not resolve the host {host!r} of the model server at {base_url} (DNS lookup failed)"
    if any(isinstance(c, ConnectionRefusedError) for c in causes) or _mentions(
        error, "refused", "all connection attempts failed"
    ):
        return f"the model server at {base_url} refused the connection; is it running?"
    return f"could not connect to the model server at {base_url}: {error or type(error).__name__}"


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
    """The body of a read answer as JSON (nested 32 deep at most), or None."""
    try:
        return loads_bounded(response.content, max_nesting=32)
    except (ValueError, UnicodeDecodeError):  # TooDeep is a ValueError
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
