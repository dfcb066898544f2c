"""JSON-RPC over stdio with LSP framing: where pygls leaves gaps, this module closes them.

pygls 2.x parses frames and dispatches handlers; around it this module adds what the LSP
and JSON-RPC specs require of a daemon that must keep serving whatever it is sent:

- the lifecycle: -32002 before ``initialize``, -32600 for a second ``initialize`` and for
  any request after ``shutdown``; ``exit`` ends with 0 after ``shutdown`` and 1 without;
- malformed input: a ``Content-Length`` over ``MAX_CONTENT_LENGTH`` is refused without
  allocating it (and one over ``MAX_SKIP_LENGTH``, which cannot be skipped, ends the
  connection), invalid JSON gets -32700 with id null, a message that is not a JSON-RPC
  request (a bad id, nesting deeper than ``wellformed.MAX_NESTING``) gets -32600, invalid
  params get one -32602 that names the field, a lone surrogate in any string param included;
- internal errors never carry a traceback or a path to the client (they go to the log);
- the one adapter between pygls and msgspec: ``msgspec_handler`` decodes ``imprint/*``
  params into Structs (naming the bad field) and encodes results to camelCase JSON.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import re
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, BinaryIO, TypeVar
from urllib.parse import urlparse

import cattrs
import msgspec
from lsprotocol import types
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInternalError,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcParseError,
    JsonRpcServerNotInitialized,
)
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCNotification, JsonRPCRequestMessage
from pygls.protocol.language_server import lsp_method

from imprintd import wellformed

logger = logging.getLogger(__name__)

#: Frames larger than this are refused (and skipped unread) rather than allocated.
MAX_CONTENT_LENGTH = 16 * 1024 * 1024
#: A frame announcing more than this is not skipped: no client sends one, so the length is
#: garbage and skipping it would swallow every later frame. The connection ends instead.
MAX_SKIP_LENGTH = 256 * 1024 * 1024
#: A header line longer than this is not a header: the stream is out of sync.
MAX_HEADER_LINE = 8 * 1024
_CONTENT_LENGTH = re.compile(rb"^content-length:[ \t]*(\d+)[ \t]*$", re.IGNORECASE)

P = TypeVar("P", bound=msgspec.Struct)


class ExpectedErrorFilter(logging.Filter):
    """Keep tracebacks of answered errors out of the log: a refused param or a failed model
    call is reported to the client in words; only internal errors deserve a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, JsonRpcException) and error.code != JsonRpcInternalError.CODE:
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
            # Render the record before rewriting it: its args belong to the old format, and an
            # error text may hold a '%' of its own ("100% of your quota", a session id "%d").
            record.msg = f"{record.getMessage()}: answered {error.code} {error.message}"
            record.args = ()
        return True


class StructureTracebackFilter(logging.Filter):
    """Drop pygls' record of a message it could not structure: a traceback of several
    kilobytes (a cattrs ExceptionGroup) per malformed message, which a client could send
    without end. ``ImprintProtocol.receive_body`` answers or logs each such message in one
    line naming the field; with ``-v`` (debug) the traceback is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Unable to deserialize message"):
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


logging.getLogger("pygls.protocol.json_rpc").addFilter(ExpectedErrorFilter())
logging.getLogger("pygls.protocol.json_rpc").addFilter(StructureTracebackFilter())


class ImprintProtocol(LanguageServerProtocol):
    """pygls' LSP protocol with the lifecycle and error rules of the spec enforced."""

    def __init__(self, server, converter) -> None:
        super().__init__(server, converter)
        self.initialize_received = False
        self.exit_code: int | None = None
        #: An ``initialize`` ``rootUri`` that does not parse as a URI, kept from pygls (below)
        #: for the server to report.
        self.unparsable_root_uri: str | None = None

        #: ``capabilities.experimental`` of the ``initialize`` result, asked once the editor's
        #: initialize handler has run (pygls builds the rest of the capabilities itself): an
        #: awaitable, as finding it may read a file, which the loop must not wait for.
        self.experimental: Callable[[], Awaitable[Any]] | None = None

    @lsp_method(types.INITIALIZE)
    async def lsp_initialize(self, params: types.InitializeParams) -> types.InitializeResult:  # type: ignore[override]
        """pygls' initialize (a generator yielding the editor's handler to be run), run here as
        one task: the handler and the model info await work in worker threads, and a request
        pygls runs in steps of its own cannot be cancelled safely (``shutdown`` sent before the
        answer cancels pending requests, and a cancelled step's future changes the table of
        pending requests while pygls walks it)."""
        steps = super().lsp_initialize(params)
        done: Any = None
        try:
            while True:
                handler, args, kwargs = steps.send(done)
                done = handler(*args, **(kwargs or {}))
                if inspect.isawaitable(done):
                    done = await done
        except StopIteration as finished:
            result: types.InitializeResult = finished.value
        if self.experimental is not None:
            result.capabilities.experimental = await self.experimental()
        return result

    # -- lifecycle ----------------------------------------------------------
    def handle_message(self, message) -> None:
        method = getattr(message, "method", None)
        msg_id = getattr(message, "id", None)
        is_request = method is not None and msg_id is not None
        if method == types.EXIT:
            self.exit_code = 0 if self._shutdown else 1
            return
        if method == types.CANCEL_REQUEST and not _is_id(getattr(message.params, "id", None)):
            # Only an int or string can name a request; anything else names none (and an
            # object or array would not even be hashable).
            logger.warning("ignoring $/cancelRequest whose id is not an integer or a string")
            return
        if is_request and self._shutdown:
            self.send_error(msg_id, JsonRpcInvalidRequest("The server is shutting down; only 'exit' is accepted."))
            return
        if method == types.INITIALIZE and is_request:
            if self.initialize_received:
                self.send_error(msg_id, JsonRpcInvalidRequest("The server is already initialized."))
                return
            self.initialize_received = True
            self._keep_unparsable_root_uri(message.params)
        elif method is not None and not self.initialize_received:
            if is_request:
                self.send_error(msg_id, JsonRpcServerNotInitialized(f"Received {method!r} before 'initialize'."))
            return  # notifications before initialize are dropped, as the spec says
        super().handle_message(message)

    def _keep_unparsable_root_uri(self, params: types.InitializeParams) -> None:
        """pygls parses ``rootUri`` before any handler runs, and one that does not parse
        (``file://[::1/ws``) fails ``initialize`` as an internal error; it is set aside instead."""
        try:
            urlparse(params.root_uri or "")
        except ValueError:
            self.unparsable_root_uri, params.root_uri = params.root_uri, None

    # -- errors -------------------------------------------------------------
    def send_error(self, msg_id: Any, error: JsonRpcException) -> None:
        if msg_id is None:
            # pygls drops a None id when serializing; JSON-RPC wants "id": null spelled out.
            self._send_data({"jsonrpc": "2.0", "id": None, "error": {"code": error.code, "message": error.message}})
            return
        self._send_response(msg_id, error=error.to_response_error())

    def _send_response(self, msg_id, result=None, error=None):
        if error is not None and error.code == JsonRpcInternalError.CODE:
            # The detail (and any traceback or path in it) stays in the log.
            incident = uuid.uuid4().hex[:8]
            logger.error("internal error %s answering request %r: %s %s", incident, msg_id, error.message, error.data)
            error = types.ResponseError(
                code=error.code, message=f"Internal error (incident {incident}); see the imprintd log."
            )
        super()._send_response(msg_id, result, error)

    # -- input --------------------------------------------------------------
    def receive_body(self, body: bytes) -> None:
        """Decode one frame's body and dispatch it; every failure gets the spec's answer."""
        try:
            raw = json.loads(body)
        except RecursionError:
            self.send_error(None, JsonRpcInvalidRequest(wellformed.TOO_DEEP))
            return
        except (ValueError, UnicodeDecodeError) as error:
            self.send_error(None, JsonRpcParseError(f"Invalid JSON: {error}"))
            return
        problem = _envelope_problem(raw)
        if problem:
            is_notification = isinstance(raw, dict) and "method" in raw and "id" not in raw
            if not is_notification:
                self.send_error(_valid_id(raw), JsonRpcInvalidRequest(problem))
            else:
                logger.warning("dropping invalid notification: %s", problem)
            return
        if wellformed.may_need_check(body):
            try:
                wellformed.check(raw)
            except wellformed.Malformed as error:
                self._refuse_malformed(raw, error)
                return
        try:
            message = self._structure(raw)
        except JsonRpcException as error:
            detail = _structure_error_detail(error)
            if "id" in raw and "method" in raw:
                self.send_error(raw["id"], JsonRpcInvalidParams(f"Invalid params for {raw['method']!r}: {detail}"))
            else:
                logger.warning("dropping message %r with invalid params: %s", raw.get("method"), detail)
            return
        try:
            self.handle_message(message)
        except Exception:  # a bug must cost one answer, never the daemon
            logger.exception("failed to dispatch %r", raw.get("method"))
            if "id" in raw and "method" in raw:
                self.send_error(raw["id"], JsonRpcInternalError("The request could not be dispatched."))

    def _refuse_malformed(self, raw: dict, error: wellformed.Malformed) -> None:
        """Answer a message ``wellformed.check`` refused: -32602 for a bad param, else -32600."""
        answer = wellformed.refusal(raw, error)
        if answer is None:
            logger.warning("dropping malformed message %r: %s", raw.get("method"), error)
            return  # notifications and responses are never answered
        msg_id, code, message = answer
        refused = JsonRpcInvalidParams if code == wellformed.INVALID_PARAMS else JsonRpcInvalidRequest
        self.send_error(msg_id, refused(message))

    def _structure(self, raw: dict) -> Any:
        """LSP messages become lsprotocol types; ``imprint/*`` params stay plain JSON for msgspec."""
        method = raw.get("method")
        if method is None:
            return self.structure_message(raw)  # a response: pygls pairs it with what it asked
        message_type = self.get_message_type(method)
        if message_type is not None:
            # Structured here, not by pygls' structure_message, which formats a traceback of
            # every failure before logging it: seconds of work for a list of 10,000 bad items.
            try:
                return self._converter.structure(raw, message_type)
            except cattrs.ClassValidationError as error:
                raise JsonRpcInvalidParams() from error
            except Exception as error:  # cattrs raises what the structuring hit
                raise JsonRpcInvalidParams(f"{type(error).__name__}: {error}") from error
        params = raw.get("params")
        if "id" in raw:
            return JsonRPCRequestMessage(id=raw["id"], method=method, jsonrpc="2.0", params=params)
        return JsonRPCNotification(method=method, jsonrpc="2.0", params=params)


def _is_id(value: Any) -> bool:
    """JSON-RPC ids are integers or strings; a bool is neither, though Python calls it an int."""
    return isinstance(value, int | str) and not isinstance(value, bool)


def _valid_id(raw: Any) -> int | str | None:
    """The id to answer an invalid message with: its own when that is a valid id, else null."""
    msg_id = raw.get("id") if isinstance(raw, dict) else None
    if not _is_id(msg_id) or isinstance(msg_id, str) and wellformed.has_lone_surrogate(msg_id):
        return None  # a string id with a lone surrogate cannot be written back
    return msg_id


def _envelope_problem(raw: Any) -> str | None:
    """Why ``raw`` is not a JSON-RPC 2.0 message, or None when it is one."""
    if not isinstance(raw, dict):
        return "A message must be a JSON object (batches are not supported)."
    if raw.get("jsonrpc") != "2.0":
        return 'A message must have "jsonrpc": "2.0".'
    if "id" in raw and not _is_id(raw["id"]):
        return "A request id must be an integer or a string."
    if "method" in raw:
        if not isinstance(raw["method"], str):
            return '"method" must be a string.'
        if "params" in raw and not isinstance(raw["params"], (dict, list)):
            return '"params" must be an object or an array.'
    elif "id" not in raw or not ("result" in raw or "error" in raw):
        return "A message must be a request, a notification or a response."
    return None


#: Problems named of a message that could not be structured; a list of 100,000 bad items
#: must not make a line (or an answer) of 100,000 reasons.
MAX_PROBLEMS_NAMED = 8


def _structure_error_detail(error: JsonRpcException) -> str:
    cause = error.__cause__
    if isinstance(cause, cattrs.ClassValidationError):
        problems = cattrs.transform_error(cause, path="params")
        named = "; ".join(problems[:MAX_PROBLEMS_NAMED])
        more = len(problems) - MAX_PROBLEMS_NAMED
        return (f"{named}; and {more} more" if more > 0 else named) or str(cause)
    return error.message


def read_frames(stream: BinaryIO, deliver: Callable[[bytes | JsonRpcException | None], None]) -> None:
    """Read LSP frames from ``stream`` until EOF, handing each body (or framing error) to ``deliver``.

    Runs in its own daemon thread so a blocked read never holds up the event loop or the
    process's exit. ``deliver(None)`` signals EOF.
    """
    try:
        while True:
            length: int | None = None
            announced = b""
            while True:
                line = stream.readline(MAX_HEADER_LINE + 1)
                if not line:
                    return
                if line in (b"\r\n", b"\n"):
                    break
                match = _CONTENT_LENGTH.match(line.rstrip(b"\r\n"))
                if match:
                    announced = match.group(1)
                    digits = announced.lstrip(b"0")
                    # int() refuses over 4300 digits; anything past 19 is unskippable anyway.
                    length = int(digits or b"0") if len(digits) <= 19 else MAX_SKIP_LENGTH + 1
            if length is None:
                deliver(JsonRpcInvalidRequest("A frame must start with a Content-Length header."))
                continue
            if length > MAX_SKIP_LENGTH:
                # Skipping would swallow every later frame while waiting for bytes that never
                # come; a stream this broken cannot be resynchronized, so it ends (exit 1).
                logger.error(
                    "a frame announced %s bytes, more than the %d a frame may be skipped by; "
                    "the input stream is broken, closing it",
                    _shown_length(announced),
                    MAX_SKIP_LENGTH,
                )
                deliver(
                    JsonRpcInvalidRequest(
                        f"A Content-Length over {MAX_SKIP_LENGTH} bytes cannot be skipped; the connection is closed."
                    )
                )
                return
            if length > MAX_CONTENT_LENGTH:
                deliver(
                    JsonRpcInvalidRequest(
                        f"A message of {length} bytes exceeds the limit of {MAX_CONTENT_LENGTH} bytes; it was skipped."
                    )
                )
                if not _skip(stream, length):
                    return
                continue
            body = stream.read(length)
            if len(body) < length:
                return
            deliver(body)
    except (OSError, ValueError) as error:  # stdin closed under us
        logger.info("input closed: %s", error)
    finally:
        deliver(None)


def _shown_length(announced: bytes) -> str:
    digits = announced.decode()
    return digits if len(digits) <= 40 else f"{digits[:20]}… ({len(digits)} digits)"


def _skip(stream: BinaryIO, length: int) -> bool:
    """Discard ``length`` bytes in small pieces, never holding them all; False at EOF."""
    while length:
        piece = stream.read(min(length, 1 << 16))
        if not piece:
            return False
        length -= len(piece)
    return True


def msgspec_handler(params_type: type[P]) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Any]]:
    """Adapt a handler taking a msgspec Struct to pygls, which hands over raw JSON params.

    Params are decoded strictly (a wrong type or a missing field answers -32602 naming the
    field); the Struct the handler returns is encoded to JSON-ready builtins (camelCase
    where the Struct says so). Handlers may be sync or async.
    """

    def decorate(handler):
        def decode(raw: Any) -> P:
            if raw is None:
                raw = {}
            try:
                return msgspec.convert(raw, params_type, strict=True)
            except msgspec.ValidationError as error:
                raise JsonRpcInvalidParams(f"Invalid params: {wellformed.field_message(error)}") from None

        if asyncio.iscoroutinefunction(handler):

            @functools.wraps(handler)
            async def async_adapter(raw: Any) -> Any:
                return msgspec.to_builtins(await handler(decode(raw)))

            return async_adapter

        @functools.wraps(handler)
        def adapter(raw: Any) -> Any:
            return msgspec.to_builtins(handler(decode(raw)))

        return adapter

    return decorate


#: Seconds worker threads get to finish once the daemon is done serving.
EXIT_GRACE_S = 5.0


def leave_despite_busy_threads(code: int, grace: float = EXIT_GRACE_S) -> None:
    """End the process with ``code`` now if worker threads are still busy after ``grace`` seconds.

    Python waits for every non-daemon thread at exit, and anyio's worker threads are not
    daemons: one stuck in a read of a hung file system, or a local model still generating,
    would keep the daemon alive after ``exit`` or EOF. Everything that must be saved was
    saved before this (a reply is acknowledged only once stored); the log is flushed first.
    """
    import os
    import threading
    import time

    deadline = time.monotonic() + grace
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    busy = [
        t.name for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon and t.is_alive()
    ]
    if not busy:
        return
    logger.warning("exiting with %d worker thread(s) still busy: %s", len(busy), ", ".join(busy))
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(code)


def run_stdio(server, stdin: BinaryIO, stdout: BinaryIO, *, watch_interval: float = 1.0) -> int:
    """Serve ``server`` on the given streams until ``exit``, EOF or the client's death.

    Returns the process exit code: 0 after ``shutdown`` then ``exit``, 1 otherwise.
    """
    from pygls.io_ import StdoutWriter

    protocol: ImprintProtocol = server.protocol
    protocol.set_writer(StdoutWriter(stdout))
    return asyncio.run(_serve(server, stdin, watch_interval))


async def _serve(server, stdin: BinaryIO, watch_interval: float) -> int:
    import threading

    protocol: ImprintProtocol = server.protocol
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[bytes | JsonRpcException | None] = asyncio.Queue()
    threading.Thread(
        target=read_frames, args=(stdin, _deliver_to(loop, inbox)), name="imprintd-stdin", daemon=True
    ).start()
    watcher = asyncio.ensure_future(_watch_client(server, watch_interval, inbox))
    try:
        while protocol.exit_code is None:
            item = await inbox.get()
            if item is None:
                break
            if isinstance(item, JsonRpcException):
                protocol.send_error(None, item)
            else:
                protocol.receive_body(item)
    finally:
        watcher.cancel()
        closing = getattr(server, "aclose", None)
        if closing:
            await closing()  # e.g. MCP servers, each in the task that owns it, before tasks are cancelled
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        on_stop = getattr(server, "on_stop", None)
        if on_stop:
            on_stop()
    if protocol.exit_code is not None:
        return protocol.exit_code
    return 0 if protocol._shutdown else 1


def _deliver_to(
    loop: asyncio.AbstractEventLoop, inbox: asyncio.Queue[bytes | JsonRpcException | None]
) -> Callable[[bytes | JsonRpcException | None], None]:
    """Hand what the stdin thread reads to the event loop, or drop it once the loop has closed.

    After ``exit`` the loop closes while the client may still be closing stdin; the reader's
    EOF then has nobody left to tell, and must not end the thread in a traceback.
    """

    def deliver(item: bytes | JsonRpcException | None) -> None:
        try:
            loop.call_soon_threadsafe(inbox.put_nowait, item)
        except RuntimeError:  # "Event loop is closed": the daemon is done serving
            if not loop.is_closed():
                raise

    return deliver


async def _watch_client(server, interval: float, inbox: asyncio.Queue) -> None:
    """End the daemon when the client process named at initialize has died (LSP processId)."""
    import os

    while True:
        await asyncio.sleep(interval)
        pid = getattr(server, "process_id", None)
        if not pid:
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            logger.info("client process %s is gone; exiting", pid)
            inbox.put_nowait(None)
            return
        except PermissionError:
            pass  # it exists, owned by someone else
