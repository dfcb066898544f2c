"""The models an OpenAI-compatible server offers (``GET {chat.base_url}/models``), for
``imprint/models`` and the ACP model picker; and ``get_json_bounded``, the bounded JSON GET it
uses, for any other short question to a model server.

A server is not trusted to answer sensibly: ``get_json_bounded`` gives up after ``TIMEOUT_S`` in
all (connecting, waiting and reading together, not per read), reads at most ``MAX_BODY_BYTES``
as sent and as decoded (a gzip bomb stops there), refuses JSON nested deeper than
``MAX_NESTING``, and ``served_models`` keeps the first ``MAX_IDS`` ids of at most
``MAX_ID_LENGTH`` characters. Each refusal is a ``ModelError`` naming what was wrong; the API
key goes in the Authorization header as the chat sends it, and is never in a message.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import zlib
from typing import Any

import httpx

from imprintd.models.base import ModelError
from imprintd.models.bounded_json import TooDeep, loads_bounded
from imprintd.models.remote import API_KEY_ENV, tls_context, usable_api_key

logger = logging.getLogger(__name__)

#: A whole request, from connecting to the body's last byte.
TIMEOUT_S = 10.0
#: Bytes of a body, both as sent and once decoded (gzip, deflate).
MAX_BODY_BYTES = 8 << 20
#: Arrays and objects nested deeper than this are refused (a model list nests 3 or 4 levels).
MAX_NESTING = 32
#: Ids kept from one list, and the longest id kept.
MAX_IDS = 1_000
MAX_ID_LENGTH = 256

_CHUNK = 64 << 10


class BoundedGetError(ModelError):
    """``get_json_bounded`` could not get JSON; ``problem`` says why, without the URL."""

    def __init__(self, url: str, problem: str, *, status: int | None = None) -> None:
        super().__init__(f"GET {url}: {problem}")
        self.problem = problem
        #: The HTTP status of an answer other than 200; None for every other problem.
        self.status = status


def get_json_bounded(
    url: str,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = TIMEOUT_S,
    max_bytes: int = MAX_BODY_BYTES,
    max_nesting: int = MAX_NESTING,
) -> Any:
    """``GET url``, its 200 answer decoded as JSON, within every bound above (the caller's values).

    The request runs in a thread of its own so that the caller waits ``timeout_s`` at most
    whatever the server does; one the caller stopped waiting for ends at its next read (the
    deadline is checked after each), or ``timeout_s`` after its last byte. BoundedGetError.
    """
    outcome: list[tuple[bool, Any]] = []

    def fetch() -> None:
        try:
            outcome.append((True, _fetch(url, headers or {}, timeout_s, max_bytes, max_nesting)))
        except BaseException as error:  # noqa: BLE001 (handed to the caller's thread)
            outcome.append((False, error))

    thread = threading.Thread(target=fetch, name="imprintd-get-json", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        raise BoundedGetError(url, f"no complete answer within {timeout_s:g} s")
    done, value = outcome[0]
    if not done:
        raise value
    return value


def _fetch(url: str, headers: dict[str, str], timeout_s: float, max_bytes: int, max_nesting: int) -> Any:
    deadline = time.monotonic() + timeout_s
    # Decoded here, not by httpx, so that the decoded size is bounded as it grows.
    sent = {**headers, "Accept-Encoding": "gzip, deflate"}
    try:
        with (
            httpx.Client(timeout=timeout_s, verify=tls_context()) as client,
            client.stream("GET", url, headers=sent) as response,
        ):
            if response.status_code != 200:
                raise BoundedGetError(url, f"the server answered {response.status_code}", status=response.status_code)
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise BoundedGetError(url, f"the answer is {int(declared):,} bytes; at most {max_bytes:,} are read")
            body = _Body(url, response.headers.get("content-encoding", ""), max_bytes)
            for chunk in response.iter_raw(_CHUNK):
                body.feed(chunk)
                if time.monotonic() > deadline:
                    raise BoundedGetError(url, f"no complete answer within {timeout_s:g} s")
            raw = body.finish()
    except httpx.HTTPError as error:
        raise BoundedGetError(url, f"the server could not be asked ({type(error).__name__})") from None
    try:
        return loads_bounded(raw, max_nesting=max_nesting)
    except TooDeep as error:
        raise BoundedGetError(url, f"the answer is {error}") from None
    except ValueError:
        raise BoundedGetError(url, "the answer is not JSON") from None


class _Body:
    """A body as it arrives: counted as sent and as decoded, each at most ``limit`` bytes."""

    def __init__(self, url: str, encoding: str, limit: int) -> None:
        self._url, self._limit = url, limit
        self._sent = 0
        self._data = bytearray()
        coding = encoding.strip().lower()
        if coding in ("", "identity"):
            self._decoder = None
        elif coding in ("gzip", "x-gzip", "deflate"):
            # 47: a zlib or gzip header, told from the data (deflate is zlib-wrapped as sent).
            self._decoder = zlib.decompressobj(47)
        else:
            raise BoundedGetError(url, f"the answer is encoded as {encoding!r}; gzip, deflate or none is read")

    def _too_large(self) -> BoundedGetError:
        return BoundedGetError(self._url, f"the answer is larger than {self._limit:,} bytes")

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
                raise BoundedGetError(self._url, "the answer's compression is damaged") from None
            if len(self._data) > self._limit:
                raise self._too_large()
            pending = self._decoder.unconsumed_tail

    def finish(self) -> bytes:
        if self._decoder is not None:
            self._data += self._decoder.flush()
            if len(self._data) > self._limit:
                raise self._too_large()
        return bytes(self._data)


def served_models(base_url: str, *, timeout_s: float | None = None) -> list[str]:
    """The ids the server lists, in its order (the first ``MAX_IDS``), asked within ``timeout_s``
    (``TIMEOUT_S``); ModelError naming what went wrong."""
    headers = {"Accept": "application/json"}
    key = usable_api_key(os.environ.get(API_KEY_ENV))
    if key:
        headers["Authorization"] = f"Bearer {key}"
    url = base_url.rstrip("/") + "/models"
    try:
        answer = get_json_bounded(url, headers=headers, timeout_s=timeout_s or TIMEOUT_S)
    except BoundedGetError as error:
        if error.status is not None:
            raise ModelError(f"the model server answered {error.status} to GET /models") from None
        raise ModelError(f"the model server at {base_url} could not be asked for its models: {error.problem}") from None
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        raise ModelError(f"the model server at {base_url} did not answer GET /models with an OpenAI model list")
    ids = [item["id"] for item in data if isinstance(item, dict) and isinstance(item.get("id"), str)]
    kept = [name for name in ids if 0 < len(name) <= MAX_ID_LENGTH]
    if len(kept) > MAX_IDS:
        logger.info("the model server at %s lists %d models: the first %d are offered", base_url, len(kept), MAX_IDS)
    return kept[:MAX_IDS]
