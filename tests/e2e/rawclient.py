"""A bare stdio client that can send anything, malformed frames included.

pytest-lsp's client only sends well-formed messages; the protocol-gap tests need to send
broken JSON, oversized headers and requests out of order, and to see every byte back.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from typing import Any

TIMEOUT = 60  # generous: the machine is shared and slow


class RawClient:
    def __init__(
        self, env: dict[str, str] | None = None, args: tuple[str, ...] = ("serve",), command: list[str] | None = None
    ) -> None:
        # ``command``: the whole command line instead (a benchmark runs the daemon under a profiler).
        self.proc = subprocess.Popen(
            command or [sys.executable, "-m", "imprintd", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        self.inbox: queue.Queue[dict | None] = queue.Queue()
        self.stderr: list[bytes] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()
        self._next_id = 0

    def _read(self) -> None:
        stream = self.proc.stdout
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    self.inbox.put(None)
                    return
                if line == b"\r\n":
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            self._received(stream.read(length))

    def _received(self, body: bytes) -> None:
        self.inbox.put(json.loads(body))

    # -- sending --------------------------------------------------------------
    def send_bytes(self, body: bytes, length: int | None = None) -> None:
        header = f"Content-Length: {len(body) if length is None else length}\r\n\r\n".encode()
        self.proc.stdin.write(header + body)
        self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_bytes(json.dumps({"jsonrpc": "2.0", **message}).encode())

    def request(self, method: str, params: Any = None) -> int:
        self._next_id += 1
        message = {"id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self._next_id

    def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def initialize(self, **params: Any) -> dict:
        request_id = self.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}, **params})
        response = self.response(request_id)
        self.notify("initialized", {})
        return response

    # -- receiving ------------------------------------------------------------
    def next(self, timeout: float = TIMEOUT) -> dict | None:
        return self.inbox.get(timeout=timeout)

    def response(self, request_id: int | None, timeout: float = TIMEOUT) -> dict:
        """The next response (not notification or server request) and check its id."""
        while True:
            message = self.next(timeout)
            assert message is not None, f"the daemon closed its output; stderr:\n{self.stderr_text()}"
            if "method" in message:
                continue
            assert message.get("id") == request_id, message
            return message

    def drain_messages(self) -> list[dict]:
        """Everything the daemon wrote until it closed stdout (call after exit or EOF)."""
        out = []
        while (message := self.next()) is not None:
            out.append(message)
        return out

    def close_input(self) -> None:
        self.proc.stdin.close()

    def wait(self, timeout: float = TIMEOUT) -> int:
        return self.proc.wait(timeout=timeout)

    def stderr_text(self) -> str:
        return b"".join(self.stderr).decode(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def next_matching(client: RawClient, predicate, limit: int = 200) -> dict:
    """The next message the daemon sends that ``predicate`` accepts (others are passed over)."""
    for _ in range(limit):
        message = client.next()
        assert message is not None, f"the daemon closed its output; stderr:\n{client.stderr_text()}"
        if predicate(message):
            return message
    raise AssertionError(f"no matching message among the next {limit}")


def show_messages_until_response(client: RawClient, request_id: int) -> tuple[list[str], dict]:
    """``window/showMessage`` texts sent before the response to ``request_id``, and the response."""
    shown = []
    while True:
        message = client.next()
        assert message is not None, f"the daemon closed its output; stderr:\n{client.stderr_text()}"
        if message.get("method") == "window/showMessage":
            shown.append(message["params"]["message"])
        elif "method" not in message and message.get("id") == request_id:
            return shown, message
