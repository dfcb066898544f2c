"""The scripted OpenAI-compatible server (tests/openai_stub.py) as a process, for tests in other languages.

``python -m tests.openai_stub_cli`` starts an ``OpenAIStub`` on loopback and prints one JSON line,
``{"baseUrl": "http://127.0.0.1:PORT/v1"}``. It then reads one JSON command per line on stdin
and answers each with one JSON line on stdout:

- ``{"cmd": "queue", "replies": [{"text": "...", "toolCalls": [{"name": "search", "arguments": {...}}],
  "hold": true}]}``: queue scripted replies (``hold``: stream the first word, then wait for ``release``).
  Answers ``{"ok": true}``.
- ``{"cmd": "requests"}``: every chat request the stub received so far, in order: ``{"requests": [...]}``.
- ``{"cmd": "release"}``: lets every held reply go on. Answers ``{"ok": true}``.
- ``{"cmd": "endpoint", "key": "GET /props", "status": 200, "body": {...}}``: answer another server's
  endpoint (``OpenAIStub.endpoints``: a served model's own window) with this JSON body (``status``
  200 when left out). Answers ``{"ok": true}``.

A command that is not understood answers ``{"error": "..."}`` naming what is accepted. stdin
reaching EOF stops the server.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from tests.openai_stub import OpenAIStub, StubReply

COMMANDS = ("queue", "requests", "release", "endpoint")


class StubSession:
    """An ``OpenAIStub`` driven by JSON commands; held replies share one release event."""

    def __init__(self, stub: OpenAIStub) -> None:
        self.stub = stub
        self.release = threading.Event()

    def reply_of(self, spec: dict[str, Any]) -> StubReply:
        calls = [
            {"id": call.get("id", f"call_{index}"), "name": call["name"], "arguments": call.get("arguments", {})}
            for index, call in enumerate(spec.get("toolCalls", []))
        ]
        return StubReply(
            text=spec.get("text", ""),
            tool_calls=calls,
            hold=self.release if spec.get("hold") else None,
            reasoning=spec.get("reasoning", ""),
        )

    def run(self, command: dict[str, Any]) -> dict[str, Any]:
        name = command.get("cmd")
        if name == "queue":
            self.release.clear()
            self.stub.queue(*(self.reply_of(spec) for spec in command.get("replies", [])))
            return {"ok": True}
        if name == "requests":
            return {"requests": list(self.stub.requests)}
        if name == "release":
            self.release.set()
            return {"ok": True}
        if name == "endpoint":
            key, status = command["key"], command.get("status", 200)
            if not isinstance(key, str) or len(key.split(" ")) != 2 or not isinstance(status, int):
                return {"error": f"an endpoint is {{key: 'METHOD /path', status: int, body}}, not {command!r}"}
            with self.stub._lock:
                self.stub.endpoints[key] = (status, command.get("body"))
            return {"ok": True}
        return {"error": f"unknown cmd {name!r}; accepted: {', '.join(COMMANDS)}"}


def answer(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def main() -> None:
    with OpenAIStub() as stub:
        session = StubSession(stub)
        answer({"baseUrl": stub.base_url})
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                command = json.loads(line)
                if not isinstance(command, dict):
                    raise ValueError("a command is a JSON object")
                answer(session.run(command))
            except (ValueError, KeyError, TypeError) as error:
                answer({"error": f"bad command {line.strip()[:200]!r}: {error}"})
        session.release.set()


if __name__ == "__main__":
    main()
