"""Newline-delimited JSON-RPC 2.0 on stdio, as ACP frames it: one JSON object per line.

What the agent must do whatever it is sent: answer every request exactly once, answer
invalid JSON with -32700 (id null), a line that is not a JSON-RPC request with -32600, an
unknown method with -32601, bad params with -32602 naming the field, ignore unknown
notifications, and keep serving. A request that cannot be carried out (the model cannot be
reached, the store fails) is -32603 with the cause in words; an unexpected error is -32603
with an incident id, its detail in the log, never sent to the client.

Handlers are plain functions. One that returns an awaitable is run as its own task, so a
long ``session/prompt`` never holds up the requests after it; everything up to that point
runs in arrival order, so a ``session/cancel`` always finds the prompt sent before it.

The agent asks the client too (``session/request_permission``): ``Connection.request`` sends a
request and waits for the response with its id; a response nobody waits for is logged and
dropped, and when the client's input ends every request still waiting fails.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, BinaryIO

import msgspec
from msgspec import UNSET

from imprintd import wellformed
from imprintd.acp import wire

logger = logging.getLogger(__name__)

#: A line longer than this, its newline included, is refused (and skipped unread) rather than held.
MAX_LINE = 16 * 1024 * 1024

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: ACP's "Resource not found", e.g. an unknown sessionId.
RESOURCE_NOT_FOUND = -32002


class RpcError(Exception):
    """A request that is answered with an error; ``message`` says what was wrong."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class LineTooLong:
    """What the reader hands over in place of a line over ``MAX_LINE`` bytes."""

    def __init__(self, length: int) -> None:
        self.length = length


Handler = Callable[[Any], Any]


class ClientGone(Exception):
    """The client's input ended while a request to it waited for its answer."""


class Connection:
    """Writes messages to the client, one line each; all writes happen on the event loop.

    Also the agent's own requests to the client, each waiting on its response (``request``).
    """

    def __init__(self, stdout: BinaryIO) -> None:
        self._stdout = stdout
        self._last_id = 0
        self._waiting: dict[str, asyncio.Future[msgspec.Raw]] = {}

    def send(self, message: msgspec.Struct) -> None:
        self._stdout.write(wire.encoder.encode(message) + b"\n")
        self._stdout.flush()

    def respond(self, request_id: int | str | None, result: Any) -> None:
        self.send(wire.Response(id=request_id, result=result))

    def fail(self, request_id: int | str | None, code: int, message: str) -> None:
        self.send(wire.Response(id=request_id, error=wire.ErrorObject(code=code, message=message)))

    def notify(self, method: str, params: msgspec.Struct) -> None:
        self.send(wire.Notification(method=method, params=params))

    async def request(self, method: str, params: msgspec.Struct) -> msgspec.Raw:
        """Ask the client; its result, undecoded. An error response raises ``RpcError`` with the
        client's code and message; the end of its input raises ``ClientGone``."""
        self._last_id += 1
        # A string id of our own, so a client that echoes ids back as numbers cannot mix them up.
        request_id = f"imprintd-{self._last_id}"
        answer: asyncio.Future[msgspec.Raw] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        try:
            self.send(wire.Request(id=request_id, method=method, params=params))
            return await answer
        finally:
            self._waiting.pop(request_id, None)

    def answered(self, message: wire.Envelope) -> None:
        """A response from the client: to the request waiting on its id, or logged as unexpected."""
        answer = self._waiting.get(message.id) if isinstance(message.id, str) else None
        if answer is None or answer.done():
            logger.info("ignoring a response from the client to id %r: no request of ours waits for it", message.id)
            return
        if message.error is not UNSET:
            try:
                error = msgspec.json.decode(message.error, type=wire.ErrorObject)
            except msgspec.DecodeError:
                error = wire.ErrorObject(code=INTERNAL_ERROR, message=bytes(message.error).decode(errors="replace"))
            answer.set_exception(RpcError(error.code, error.message))
        else:
            assert message.result is not UNSET  # a response holds a result or an error (_request_problem)
            answer.set_result(message.result)

    def client_gone(self) -> None:
        """The client's input ended: no request of ours will be answered."""
        for answer in self._waiting.values():
            if not answer.done():
                answer.set_exception(ClientGone("the client closed its input before answering"))


class Dispatcher:
    """Decodes each line, calls its handler and answers; never lets one message stop the loop."""

    def __init__(self, connection: Connection, requests: dict[str, Handler], notifications: dict[str, Handler]) -> None:
        self.connection = connection
        self.requests = requests
        self.notifications = notifications
        self.tasks: set[asyncio.Task] = set()

    def receive(self, line: bytes | LineTooLong) -> None:
        if isinstance(line, LineTooLong):
            self.connection.fail(
                None,
                INVALID_REQUEST,
                f"A message of {line.length} bytes exceeds the limit of {MAX_LINE} bytes; it was skipped.",
            )
            return
        if not _is_utf8(line):
            self._refuse_undecodable(line)
            return
        if wellformed.may_need_check(line) and self._refused_as_malformed(line):
            return
        try:
            message = wire.envelope_decoder.decode(line)
        except msgspec.ValidationError as error:
            self.connection.fail(_salvaged_id(line), INVALID_REQUEST, _envelope_problem(error))
            return
        except msgspec.DecodeError as error:
            self.connection.fail(None, PARSE_ERROR, f"Invalid JSON: {error}")
            return
        problem = _request_problem(message)
        if problem:
            if message.method is UNSET or message.id is not UNSET:
                self.connection.fail(message.id if message.id is not UNSET else None, INVALID_REQUEST, problem)
            else:
                logger.warning("dropping an invalid notification: %s", problem)
            return
        if message.method is UNSET:
            self.connection.answered(message)
        elif message.id is UNSET:
            self._notification(message.method, message.params)
        else:
            assert message.id is not None  # refused above: a request id is never null
            self._request(message.id, message.method, message.params)

    def _refused_as_malformed(self, line: bytes) -> bool:
        """Refuse a line nested too deep or holding a lone surrogate (see ``wellformed``); True if refused."""
        try:
            raw = json.loads(line)
        except RecursionError:
            self.connection.fail(None, INVALID_REQUEST, wellformed.TOO_DEEP)
            return True
        except ValueError:
            return False  # not JSON: the envelope decoder names it
        try:
            wellformed.check(raw)
        except wellformed.Malformed as error:
            answer = wellformed.refusal(raw, error) if isinstance(raw, dict) else (None, INVALID_REQUEST, str(error))
            if answer is None:
                logger.warning("dropping a malformed notification: %s", error)
            else:
                self.connection.fail(*answer)
            return True
        return False

    def _refuse_undecodable(self, line: bytes) -> None:
        """A line that is not UTF-8: -32602 naming the string that holds the bad bytes, -32700
        when they are not inside a string (or the line is not JSON even so)."""
        found = wellformed.find_undecodable(line)
        if found is None:
            self.connection.fail(None, PARSE_ERROR, "Invalid JSON: the line is not UTF-8 text.")
            return
        raw, error = found
        answer = wellformed.refusal(raw, error) if isinstance(raw, dict) else None
        if answer is None:
            logger.warning("dropping a message that is not UTF-8: %s", error)
        else:
            self.connection.fail(*answer)

    # -- requests ---------------------------------------------------------------
    def _request(self, request_id: int | str, method: str, raw: msgspec.Raw | Any) -> None:
        handler = self.requests.get(method)
        if handler is None:
            self.connection.fail(request_id, METHOD_NOT_FOUND, f"Unknown method {method!r}.")
            return
        try:
            outcome = handler(_decode_params(method, raw))
        except Exception as error:  # noqa: BLE001 (every request gets its one answer)
            self._fail(request_id, method, error)
            return
        if inspect.isawaitable(outcome):
            task = asyncio.ensure_future(self._answer_later(request_id, method, outcome))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        else:
            self.connection.respond(request_id, outcome)

    async def _answer_later(self, request_id: int | str, method: str, outcome: Awaitable[Any]) -> None:
        try:
            result = await outcome
        except Exception as error:  # noqa: BLE001
            self._fail(request_id, method, error)
            return
        self.connection.respond(request_id, result)

    def _fail(self, request_id: int | str, method: str, error: Exception) -> None:
        if isinstance(error, RpcError):
            logger.info("%s answered %d: %s", method, error.code, error.message)
            self.connection.fail(request_id, error.code, error.message)
            return
        incident = uuid.uuid4().hex[:8]
        logger.error("internal error %s answering %s (id %r)", incident, method, request_id, exc_info=error)
        self.connection.fail(request_id, INTERNAL_ERROR, f"Internal error (incident {incident}); see the imprintd log.")

    # -- notifications ----------------------------------------------------------
    def _notification(self, method: str, raw: msgspec.Raw | Any) -> None:
        handler = self.notifications.get(method)
        if handler is None:
            logger.info("ignoring unknown notification %r", method)
            return
        try:
            handler(_decode_params(method, raw))
        except Exception:  # a notification has no one to answer: log it and go on
            logger.exception("notification %s failed", method)


def _is_utf8(line: bytes) -> bool:
    """Whether ``line`` decodes as UTF-8; the bytes of a lone surrogate pass, for ``wellformed`` to name."""
    try:
        line.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return False
    return True


def _decode_params(method: str, raw: msgspec.Raw | Any) -> Any:
    """The method's params Struct; RpcError -32602 naming the field when they do not fit."""
    decoder = wire.PARAMS.get(method)
    if decoder is None:
        return None
    try:
        return decoder.decode(b"{}" if raw is UNSET or bytes(raw) == b"null" else raw)
    except msgspec.ValidationError as error:
        raise RpcError(INVALID_PARAMS, f"Invalid params for {method!r}: {wellformed.field_message(error)}") from None


def _request_problem(message: wire.Envelope) -> str | None:
    """Why a well-formed JSON object is not a JSON-RPC 2.0 message, or None."""
    if message.jsonrpc != "2.0":
        return 'A message must have "jsonrpc": "2.0".'
    if message.method is UNSET:
        if message.id is UNSET or (message.result is UNSET and message.error is UNSET):
            return "A message must be a request, a notification or a response."
        return None
    if message.id is None:
        return "A request id must be an integer or a string, not null."
    if message.params is not UNSET and bytes(message.params)[:1] not in (b"{", b"[", b"n"):
        return '"params" must be an object or an array.'  # (null is taken as no params)
    return None


def _envelope_problem(error: msgspec.ValidationError) -> str:
    text = str(error)
    if text.startswith("Expected `object`"):
        return "A message must be a JSON object (batches are not supported)."
    return f"Not a JSON-RPC 2.0 message: {wellformed.field_message(error)}"


def _salvaged_id(line: bytes) -> int | str | None:
    """The id of a message that is valid JSON but not a valid message, when it has a usable one."""
    try:
        raw = wire.any_decoder.decode(line)
    except msgspec.DecodeError:
        return None
    found = raw.get("id") if isinstance(raw, dict) else None
    return found if isinstance(found, (int, str)) and not isinstance(found, bool) else None


def read_lines(stream: BinaryIO, deliver: Callable[[bytes | LineTooLong | None], None]) -> None:
    """Hand each non-blank line of ``stream`` to ``deliver``; ``deliver(None)`` at EOF.

    Runs in its own daemon thread so a blocked read never holds up the event loop or the
    process's exit. A line over ``MAX_LINE`` is skipped in pieces, never held whole.
    """
    try:
        while True:
            line = stream.readline(MAX_LINE + 1)
            if not line:
                return
            if len(line) > MAX_LINE:
                rest = 0 if line.endswith(b"\n") else _skip_line(stream)
                deliver(LineTooLong(len(line) + rest))
                continue
            if line.strip():
                deliver(line)
    except (OSError, ValueError) as error:  # stdin closed under us
        logger.info("input closed: %s", error)
    finally:
        deliver(None)


def _skip_line(stream: BinaryIO) -> int:
    """Discard the rest of the current line; how many bytes that was."""
    skipped = 0
    while True:
        piece = stream.readline(1 << 16)
        skipped += len(piece)
        if not piece or piece.endswith(b"\n"):
            return skipped


async def serve_lines(dispatcher: Dispatcher, stdin: BinaryIO) -> None:
    """Feed ``stdin``'s lines to ``dispatcher`` until EOF, then cancel what is still running."""
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[bytes | LineTooLong | None] = asyncio.Queue()
    threading.Thread(
        target=read_lines,
        args=(stdin, lambda item: loop.call_soon_threadsafe(inbox.put_nowait, item)),
        name="imprintd-acp-stdin",
        daemon=True,
    ).start()
    try:
        while (line := await inbox.get()) is not None:
            dispatcher.receive(line)
    finally:
        dispatcher.connection.client_gone()
        pending = list(dispatcher.tasks)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
