"""A scripted OpenAI-compatible server on loopback, for end-to-end tests of the daemon.

The daemon talks to it through its real remote provider (``chat.provider = "openai"``), so
an end-to-end test drives the real wire on both sides and can script exactly what the
"model" says (answers, tool calls, reasoning) and assert exactly what reached it. Replies stream
as server-sent events, tool calls as native ``tool_calls`` deltas split across chunks, and a
reasoning model's thoughts as ``reasoning_content`` deltas ahead of the text, as llama.cpp's
server and vLLM send them with a reasoning parser.

Beside the chat it can answer the endpoints other servers keep for what they serve
(``endpoints``): llama-server's ``GET /props``, LM Studio's ``GET /api/v0/models``, Ollama's
``POST /api/show`` and ``GET /api/ps``, each as those servers document it; any other path is 404,
as on a server that knows none of them. A reply can end with a ``usage`` chunk (the
``prompt_tokens`` a server counted, e.g. after Ollama cut the prompt to its window).
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class StubReply:
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"name":..., "arguments": {...}}
    #: Block after the first piece until the test releases it (for cancellation tests).
    hold: threading.Event | None = None
    #: Send these ``data:`` payloads verbatim instead of a well-formed stream (malformed chunks).
    raw_events: list[str] | None = None
    #: Answer with this HTTP status and body instead of a stream (error replies), with these headers.
    status: int = 200
    body: str = ""
    #: Stream this piece again and again, each time followed by its number, ``max_tokens``
    #: ignored, as a misconfigured server does: until the daemon hangs up, or ``ENDLESS_LIMIT``
    #: pieces (then it finishes).
    endless: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    #: The stream's finish_reason ("length": the answer hit its output limit); default "stop" or "tool_calls".
    finish_reason: str = ""
    #: What the model thought first, streamed word by word in ``reasoning_field`` deltas.
    reasoning: str = ""
    reasoning_field: str = "reasoning_content"
    #: Sent in a last chunk without choices before ``[DONE]`` (``stream_options.include_usage``).
    usage: dict[str, Any] | None = None


#: The most pieces an endless reply streams when nobody hangs up (about 12 MB of events).
ENDLESS_LIMIT = 50_000


Script = StubReply | str | Callable[[dict], "StubReply | str"]

#: Headers of a failing answer the daemon asks again at once: ``Retry-After: 0`` spares a test of
#: what follows the retries the 1, 2 and 4 s backoff (tests/models/test_remote.py checks those
#: waits, and the server's own, without spending them).
RETRY_AT_ONCE = {"Retry-After": "0"}


def unavailable(times: int) -> list[StubReply]:
    """``times`` answers 503 with ``RETRY_AT_ONCE``: a server failing for now, retried at once."""
    return [StubReply(status=503, body='{"error": {"message": "unavailable"}}', headers=RETRY_AT_ONCE)] * times


def drop_connection(request: dict) -> StubReply:
    """A script that drops the connection before a byte of the answer (a server gone mid-request)."""
    raise ConnectionError("dropped by the test")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A daemon that hangs up mid-request (killed mid-reply, on purpose) is no error of the
        # stub's; anything else is printed as the standard server prints it.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class OpenAIStub:
    """``with OpenAIStub() as stub: stub.queue("hello"); ... stub.requests``.

    ``record=False`` keeps no request or headers: a benchmark's thousands of prompts would stay
    in memory for nothing, and slow the process's garbage collection as they pile up.
    """

    def __init__(self, *, record: bool = True) -> None:
        self.record = record
        self.replies: list[Script] = []
        #: What answers once ``replies`` is used up (default: "(no scripted reply)").
        self.default_reply: Script = StubReply(text="(no scripted reply)")
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        #: Pieces of an endless reply sent so far, and whether the daemon hung up on it.
        self.endless_sent = 0
        self.hung_up = threading.Event()
        #: What ``GET /models`` lists, and its status (another answers ``{"error": ...}``); the paths asked.
        self.models = ["stub"]
        self.models_status = 200
        self.gets: list[str] = []
        #: Other endpoints, "METHOD /path" → (status, JSON body), or a function of the request's
        #: JSON body giving them (a server's own window, template and tokenizer endpoints).
        self.endpoints: dict[str, tuple[int, Any] | Callable[[Any], tuple[int, Any]]] = {}
        #: Every request to them, as ("METHOD /path", JSON body or None).
        self.endpoint_requests: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def _endpoint(self, method: str, body: Any = None) -> None:
                """A scripted endpoint's answer; 404 for one not scripted."""
                key = f"{method} {self.path}"
                with stub._lock:
                    stub.endpoint_requests.append((key, body))
                    answer = stub.endpoints.get(key)
                if callable(answer):
                    answer = answer(body)
                if answer is not None:
                    self._send_json(answer[0], json.dumps(answer[1]).encode())
                else:
                    self._send_json(404, json.dumps({"error": f"{key} is not served"}).encode())

            def do_GET(self):
                if self.path != "/v1/models" or f"GET {self.path}" in stub.endpoints:
                    self._endpoint("GET")
                    return
                with stub._lock:
                    stub.gets.append(self.path)
                    models, status = list(stub.models), stub.models_status
                if status != 200:
                    self._send_json(status, json.dumps({"error": {"message": "scripted failure"}}).encode())
                    return
                data = [{"id": model, "object": "model"} for model in models]
                self._send_json(200, json.dumps({"object": "list", "data": data}).encode())

            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                request = json.loads(self.rfile.read(length))
                if self.path != "/v1/chat/completions":
                    self._endpoint("POST", request)
                    return
                with stub._lock:
                    if stub.record:
                        stub.requests.append(request)
                        stub.headers.append(dict(self.headers))
                    script = stub.replies.pop(0) if stub.replies else stub.default_reply
                reply = script(request) if callable(script) else script
                if isinstance(reply, str):
                    reply = StubReply(text=reply)
                if reply.status != 200:
                    self._send_json(reply.status, reply.body.encode(), reply.headers)
                    return
                self._stream(reply)

            def _send_json(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _event(self, payload: dict | str) -> None:
                data = payload if isinstance(payload, str) else json.dumps(payload)
                chunk = f"data: {data}\n\n".encode()
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()

            def _chunk(self, delta: dict, finish: str | None = None) -> dict:
                return {
                    "id": "chatcmpl-stub",
                    "object": "chat.completion.chunk",
                    "model": "stub",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }

            def _stream(self, reply: StubReply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    if reply.raw_events is not None:
                        for data in reply.raw_events:
                            self._event(data)
                        self.wfile.write(b"0\r\n\r\n")
                        self.wfile.flush()
                        return
                    self._event(self._chunk({"role": "assistant", "content": ""}))
                    if reply.endless:
                        self._endless(reply.endless)
                        return
                    thoughts = reply.reasoning.split(" ") if reply.reasoning else []
                    for index, word in enumerate(thoughts):
                        self._event(self._chunk({reply.reasoning_field: word if index == 0 else " " + word}))
                    words = reply.text.split(" ") if reply.text else []
                    for index, word in enumerate(words):
                        self._event(self._chunk({"content": word if index == 0 else " " + word}))
                        if index == 0 and reply.hold is not None:
                            reply.hold.wait(timeout=60)
                    for index, call in enumerate(reply.tool_calls):
                        arguments = json.dumps(call.get("arguments", {}))
                        half = len(arguments) // 2
                        first = {
                            "index": index,
                            "id": call.get("id", f"call_{index}"),
                            "type": "function",
                            "function": {"name": call["name"], "arguments": arguments[:half]},
                        }
                        self._event(self._chunk({"tool_calls": [first]}))
                        self._event(
                            self._chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]})
                        )
                    self._event(self._chunk({}, reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")))
                    if reply.usage is not None:
                        last = {
                            "id": "chatcmpl-stub",
                            "object": "chat.completion.chunk",
                            "choices": [],
                            "usage": reply.usage,
                        }
                        self._event(last)
                    self._event("[DONE]")
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    stub.hung_up.set()  # the daemon hung up (a cancelled or cut reply)

            def _endless(self, piece: str) -> None:
                while stub.endless_sent < ENDLESS_LIMIT:
                    # Numbered, so the text never repeats itself: what is cut is the output
                    # allowance, not a loop (the repetition guard would stop that sooner).
                    self._event(self._chunk({"content": f"{piece}{stub.endless_sent} "}))
                    stub.endless_sent += 1
                self._event(self._chunk({}, "stop"))
                self._event("[DONE]")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self._server = _Server(("127.0.0.1", 0), Handler)
        # ``shutdown`` waits for the serving loop's next poll: 0.5 s by default, in every test's teardown.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def queue(self, *replies: Script) -> None:
        with self._lock:
            self.replies.extend(replies)

    def __enter__(self) -> OpenAIStub:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
