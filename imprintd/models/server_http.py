"""One bounded JSON request to a model server: the served model list, the window questions and
the server's own prompt counts all ask through it, each with its own limits.

A server is not trusted to answer sensibly. Within a request's ``Bounds`` (the caller's own
numbers) it gives up after ``timeout_s`` in all (connecting, waiting and reading together, not
per read), reads at most ``max_bytes`` as sent and as decoded (gzip and deflate are decoded here
as the body grows, so a gzip bomb stops there; other encodings are refused), refuses a declared
``Content-Length`` over ``max_bytes`` before reading, and refuses JSON nested deeper than
``max_nesting`` (``bounded_json``). Each refusal is a ``BoundedRequestError`` naming what was
wrong, never the headers (the API key goes there).

Two transports share these bounds: ``request_json`` over a model's own ``httpx.AsyncClient`` (its
connections reused; the deadline is a cancel scope), and ``request_json_sync``, which runs the
request in a thread of its own so that a blocking caller waits ``timeout_s`` at most whatever
the server does (the request it stopped waiting for ends at its next read), over the caller's
``httpx.Client`` or, without one, a client made for that one request.
"""

from __future__ import annotations

import functools
import ssl
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from imprintd.models.base import ModelError
from imprintd.models.bounded_json import TooDeep, loads_bounded

#: Arrays and objects nested deeper than this are refused (a model list, a server's props or a
#: token list nests a few levels).
MAX_NESTING = 32

_CHUNK = 64 << 10
#: Sent with every bounded request: the encodings ``_Body`` decodes (httpx's own default too).
_ENCODINGS = "gzip, deflate"


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The certificate store every request to a model server verifies with, built once.

    httpx builds one per client by default (certifi's bundle, or ``SSL_CERT_FILE`` /
    ``SSL_CERT_DIR``), which took about 50 ms, and a client is made per request, on the event
    loop: every reply's model calls paid it, plain ``http://`` too, and every other request
    waited meanwhile. The environment that names the bundle is read once, at the first request.
    """
    return httpx.create_ssl_context()


class BoundedRequestError(ModelError):
    """A bounded request got no JSON; ``problem`` says why, without the URL."""

    def __init__(
        self, method: str, url: str, problem: str, *, status: int | None = None, answered: bool = False
    ) -> None:
        super().__init__(f"{method} {url}: {problem}")
        self.problem = problem
        #: The HTTP status of an answer other than 200; None for every other problem.
        self.status = status
        #: The server answered 200 and its body was refused (too large, too deep, not JSON).
        self.answered = answered


@dataclass(frozen=True)
class Bounds:
    """What one request may take: seconds in all, bytes of its answer (as sent and as decoded),
    and levels of nesting of its JSON."""

    timeout_s: float
    max_bytes: int
    max_nesting: int = MAX_NESTING


class _Limits:
    """One request's bounds, and the errors that name them."""

    def __init__(self, method: str, url: str, bounds: Bounds) -> None:
        self.method, self.url = method, url
        self.timeout_s, self.max_bytes, self.max_nesting = bounds.timeout_s, bounds.max_bytes, bounds.max_nesting
        self.answered = False

    def error(self, problem: str, *, status: int | None = None) -> BoundedRequestError:
        return BoundedRequestError(self.method, self.url, problem, status=status, answered=self.answered)

    def late(self) -> BoundedRequestError:
        return self.error(f"no complete answer within {self.timeout_s:g} s")

    def could_not_ask(self, error: httpx.HTTPError) -> BoundedRequestError:
        return self.error(f"the server could not be asked ({type(error).__name__})")

    def opened(self, response: httpx.Response) -> _Body:
        """The body to read of ``response``, once its status and headers are within bounds."""
        if response.status_code != 200:
            raise self.error(f"the server answered {response.status_code}", status=response.status_code)
        self.answered = True
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            raise self.error(f"the answer is {int(declared):,} bytes; at most {self.max_bytes:,} are read")
        return _Body(self, response.headers.get("content-encoding", ""))

    def decoded(self, raw: bytes) -> Any:
        try:
            return loads_bounded(raw, max_nesting=self.max_nesting)
        except TooDeep as error:
            raise self.error(f"the answer is {error}") from None
        except ValueError:
            raise self.error("the answer is not JSON") from None


class _Body:
    """A body as it arrives: counted as sent and as decoded, each at most ``max_bytes``."""

    def __init__(self, limits: _Limits, encoding: str) -> None:
        self._limits, self._limit = limits, limits.max_bytes
        self._sent = 0
        self._data = bytearray()
        coding = encoding.strip().lower()
        if coding in ("", "identity"):
            self._decoder = None
        elif coding in ("gzip", "x-gzip", "deflate"):
            # 47: a zlib or gzip header, told from the data (deflate is zlib-wrapped as sent).
            self._decoder = zlib.decompressobj(47)
        else:
            raise limits.error(f"the answer is encoded as {encoding!r}; gzip, deflate or none is read")

    def _too_large(self) -> BoundedRequestError:
        return self._limits.error(f"the answer is larger than {self._limit:,} bytes")

    def feed(self, chunk: bytes) -> None:
        self._sent += len(chunk)
        if self._sent > self._limit:
            raise self._too_large()
        if self._decoder is None:
            self._data += chunk
            return
        pending = chunk
        while pending:
            try:
                self._data += self._decoder.decompress(pending, self._limit - len(self._data) + 1)
            except zlib.error:
                raise self._limits.error("the answer's compression is damaged") from None
            if len(self._data) > self._limit:
                raise self._too_large()
            pending = self._decoder.unconsumed_tail

    def finish(self) -> bytes:
        if self._decoder is not None:
            self._data += self._decoder.flush()
            if len(self._data) > self._limit:
                raise self._too_large()
        return bytes(self._data)


#: What is read of an answer of status 400 or more: its message is near the start.
ERROR_BODY_BYTES = 64 << 10


async def read_error_body(response: httpx.Response, max_bytes: int = ERROR_BODY_BYTES) -> httpx.Response:
    """``response``, an error answer opened as a stream, with at most ``max_bytes`` of its body read
    (as sent and as decoded, gzip and deflate decoded here): an error's message is near its start,
    and a server is not trusted to send a short one. The rest is left unread (the connection is
    closed with the response); what was read is the returned response's whole body."""
    coding = response.headers.get("content-encoding", "").strip().lower()
    decoder = zlib.decompressobj(47) if coding in ("gzip", "x-gzip", "deflate") else None
    data, sent = bytearray(), 0
    try:
        async for chunk in response.aiter_raw(_CHUNK):
            sent += len(chunk)
            data += chunk if decoder is None else decoder.decompress(chunk, max_bytes - len(data) + 1)
            if len(data) >= max_bytes or sent >= max_bytes:
                break
    except zlib.error:
        pass  # a damaged compression: what was decoded before it is the message
    kept = [(k, v) for k, v in response.headers.items() if k.lower() not in ("content-encoding", "content-length")]
    return httpx.Response(response.status_code, headers=kept, content=bytes(data[:max_bytes]), request=response.request)


def _sent_headers(headers: dict[str, str] | None) -> dict[str, str]:
    # Decoded here, not by httpx, so that the decoded size is bounded as it grows.
    return {**(headers or {}), "Accept-Encoding": _ENCODINGS}


async def request_json(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    bounds: Bounds,
    *,
    content: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Any:
    """``method url`` (with ``content``) over ``client``, its 200 answer decoded as JSON, within
    ``bounds``; BoundedRequestError."""
    limits = _Limits(method, url, bounds)
    try:
        with anyio.fail_after(bounds.timeout_s):
            async with client.stream(
                method, url, content=content, headers=_sent_headers(headers), timeout=bounds.timeout_s
            ) as response:
                body = limits.opened(response)
                async for chunk in response.aiter_raw(_CHUNK):
                    body.feed(chunk)
                raw = body.finish()
    except TimeoutError:
        raise limits.late() from None
    except httpx.HTTPError as error:
        raise limits.could_not_ask(error) from None
    return limits.decoded(raw)


def request_json_sync(
    method: str,
    url: str,
    bounds: Bounds,
    *,
    client: httpx.Client | None = None,
    content: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Any:
    """``request_json`` for a blocking caller, over ``client`` (None: one made for this request),
    in a thread of its own: the caller waits ``bounds.timeout_s`` at most; BoundedRequestError."""
    limits = _Limits(method, url, bounds)
    outcome: list[tuple[bool, Any]] = []

    def fetch() -> None:
        try:
            if client is not None:
                value = _fetch(client, limits, content, headers)
            else:
                with httpx.Client(timeout=bounds.timeout_s, verify=tls_context()) as own:
                    value = _fetch(own, limits, content, headers)
            outcome.append((True, value))
        except BaseException as error:  # noqa: BLE001 (handed to the caller's thread)
            outcome.append((False, error))

    thread = threading.Thread(target=fetch, name="imprintd-server-json", daemon=True)
    thread.start()
    thread.join(bounds.timeout_s)
    if not outcome:
        raise limits.late()
    done, value = outcome[0]
    if not done:
        raise value
    return value


def _fetch(client: httpx.Client, limits: _Limits, content: bytes | None, headers: dict[str, str] | None) -> Any:
    deadline = time.monotonic() + limits.timeout_s
    try:
        with client.stream(
            limits.method, limits.url, content=content, headers=_sent_headers(headers), timeout=limits.timeout_s
        ) as response:
            body = limits.opened(response)
            for chunk in response.iter_raw(_CHUNK):
                body.feed(chunk)
                if time.monotonic() > deadline:
                    raise limits.late()
            raw = body.finish()
    except httpx.HTTPError as error:
        raise limits.could_not_ask(error) from None
    return limits.decoded(raw)
