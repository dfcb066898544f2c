"""A small scripted HTTP server on 127.0.0.1 for the remote provider's tests.

Each test gives it a handler ``(request, writer) -> None``; it records every request (path,
headers, JSON body) so a test can assert what went over the wire. Runs in a thread; the
connection is closed when the handler returns (HTTP/1.0, no Content-Length), so a handler that
writes part of a stream and returns simulates a server that stops mid-reply.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class Writer:
    """What a handler uses to answer."""

    def __init__(self, handler: BaseHTTPRequestHandler) -> None:
        self._handler = handler

    def status(self, code: int, headers: dict[str, str] | None = None) -> None:
        self._handler.send_response(code)
        for name, value in (headers or {}).items():
            self._handler.send_header(name, value)
        self._handler.end_headers()

    def json(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.status(code, {"Content-Type": "application/json", "Content-Length": str(len(data)), **(headers or {})})
        self._handler.wfile.write(data)

    def start_stream(self) -> None:
        self.status(200, {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})

    def raw(self, text: str) -> None:
        self.data(text.encode())

    def data(self, data: bytes) -> None:
        self._handler.wfile.write(data)
        self._handler.wfile.flush()

    def event(self, data: Any) -> None:
        self.raw(f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n")


Handler = Callable[[Recorded, Writer], None]


@dataclass
class ScriptedServer:
    handler: Handler
    requests: list[Recorded] = field(default_factory=list)
    #: Set at teardown: handlers that wait (a silent server) return then.
    release: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        outer = self

        class RequestHandler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                request = Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                outer.requests.append(request)
                try:
                    outer.handler(request, Writer(self))
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (deadline, cancel): nothing to do

            do_POST = do_GET = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), RequestHandler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def chunk(
    content: str | None = None, *, finish: str | None = None, tool_calls: list | None = None, usage: dict | None = None
) -> dict:
    """One ``chat.completion.chunk``."""
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    out: dict[str, Any] = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        out["usage"] = usage
    return out


def stream_reply(*chunks: dict, done: bool = True) -> Handler:
    """A handler that streams ``chunks`` (and ``[DONE]`` unless ``done`` is False)."""

    def handle(request: Recorded, writer: Writer) -> None:
        writer.start_stream()
        for item in chunks:
            writer.event(item)
        if done:
            writer.event("[DONE]")

    return handle
