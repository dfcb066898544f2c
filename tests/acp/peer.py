"""An independent ACP peer for the tests: the official Python SDK (``agent-client-protocol``) as
the client, driving a real ``imprintd acp`` process over its stdio.

Every message the agent writes is checked against the SDK's schema models, strictly: it must
validate, and dumping the validated model must give back exactly what was sent (the SDK
quietly drops or defaults fields it cannot read; a round trip catches that).
"""

from __future__ import annotations

import asyncio
import json
import queue
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import acp
from acp import schema
from acp.connection import StreamDirection, StreamEvent
from pydantic import BaseModel

#: What each request the client sends is answered with, by method.
RESULTS: dict[str, type[BaseModel] | None] = {
    "initialize": schema.InitializeResponse,
    "session/new": schema.NewSessionResponse,
    "session/load": schema.LoadSessionResponse,  # or null
    "session/resume": schema.ResumeSessionResponse,
    "session/close": schema.CloseSessionResponse,
    "session/list": schema.ListSessionsResponse,
    "session/delete": schema.DeleteSessionResponse,
    "session/prompt": schema.PromptResponse,
    "session/set_config_option": schema.SetSessionConfigOptionResponse,
}


def conforms(model: type[BaseModel], value: Any) -> None:
    """``value`` is a valid ``model`` and nothing of it was dropped, added or defaulted."""
    parsed = model.model_validate(value)
    assert parsed.model_dump(mode="json", by_alias=True, exclude_unset=True) == value, (model.__name__, value)


class SchemaChecker:
    """Records every message both ways and checks each one the agent wrote."""

    def __init__(self) -> None:
        self.sent: dict[int | str, str] = {}  # request id -> method
        self.received: list[dict] = []
        self.problems: list[str] = []

    def observe(self, event: StreamEvent) -> None:
        message = event.message
        if event.direction is StreamDirection.OUTGOING:
            if "method" in message and "id" in message:
                self.sent[message["id"]] = message["method"]
            return
        self.received.append(message)
        try:
            self.check(message)
        except Exception as error:  # noqa: BLE001 (collected; the test fails on them at the end)
            self.problems.append(f"{message}: {error}")

    def check(self, message: dict) -> None:
        assert message.get("jsonrpc") == "2.0"
        if "method" in message and "id" in message:
            assert message["method"] == "session/request_permission", "the one request the agent sends"
            conforms(schema.RequestPermissionRequest, message["params"])
            return
        if "method" in message:
            assert message["method"] == "session/update"
            conforms(schema.SessionNotification, message["params"])
            return
        method = self.sent[message["id"]]
        if "error" in message:
            assert "result" not in message
            conforms(schema.Error, message["error"])
            return
        model = RESULTS[method]
        if message["result"] is None:
            assert method == "session/load", f"{method} answered null"
        else:
            conforms(model, message["result"])


class RecordingClient:
    """An ACP client that records every ``session/update``, and answers ``session/request_permission``
    from ``permissions``: an option id to select, ``"cancelled"``, or an awaitable giving one.
    With none queued it answers as a client without the method does (-32601)."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []
        self.arrived = asyncio.Condition()
        self.permissions: list[Any] = []
        self.asked: list[schema.RequestPermissionRequest] = []

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> schema.RequestPermissionResponse:
        self.asked.append(schema.RequestPermissionRequest(session_id=session_id, tool_call=tool_call, options=options))
        if not self.permissions:
            raise acp.RequestError.method_not_found("session/request_permission")
        answer = self.permissions.pop(0)
        if not isinstance(answer, str):
            answer = await answer
        if answer == "cancelled":
            return schema.RequestPermissionResponse(outcome=schema.DeniedOutcome(outcome="cancelled"))
        return schema.RequestPermissionResponse(outcome=schema.AllowedOutcome(outcome="selected", option_id=answer))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        async with self.arrived:
            self.updates.append((session_id, update))
            self.arrived.notify_all()

    def on_connect(self, conn) -> None:
        pass


class Peer:
    def __init__(
        self, conn: acp.ClientSideConnection, process, client: RecordingClient, checker: SchemaChecker, stderr: Path
    ) -> None:
        self.conn = conn
        self.process = process
        self.client = client
        self.checker = checker
        self.stderr = stderr

    def updates(self, session_id: str) -> list[Any]:
        return [update for sid, update in self.client.updates if sid == session_id]

    async def wait_for_update(self, session_id: str, wanted: Callable[[Any], bool], timeout: float = 60) -> Any:
        """The first update of ``session_id`` that is ``wanted``, waiting for it to arrive."""

        def found() -> Any:
            return next((update for update in self.updates(session_id) if wanted(update)), None)

        async with self.client.arrived:
            await asyncio.wait_for(self.client.arrived.wait_for(lambda: found() is not None), timeout)
            return found()

    def take_updates(self, session_id: str) -> list[Any]:
        """The conversation's updates of ``session_id`` since the last call, for asserting one prompt
        at a time; the agent's announcements (its commands, the title) are kept for ``take_announcements``."""
        taken = self.updates(session_id)
        self.client.updates = [
            (sid, update)
            for sid, update in self.client.updates
            if sid != session_id or update.session_update in ANNOUNCEMENTS
        ]
        return [update for update in taken if update.session_update not in ANNOUNCEMENTS]

    def take_announcements(self, session_id: str) -> list[Any]:
        """The ``available_commands_update`` and ``session_info_update`` of ``session_id`` since the last call."""
        taken = [update for update in self.updates(session_id) if update.session_update in ANNOUNCEMENTS]
        self.client.updates = [
            (sid, update)
            for sid, update in self.client.updates
            if sid != session_id or update.session_update not in ANNOUNCEMENTS
        ]
        return taken

    async def delete_session(self, session_id: str) -> Any:
        # The SDK 0.12.1 client has the schema for session/delete but no method to send it.
        return await self.conn._conn.send_request("session/delete", {"sessionId": session_id})

    def log(self) -> str:
        return self.stderr.read_text(encoding="utf-8", errors="replace")


@asynccontextmanager
async def acp_agent(
    env: dict[str, str], log_dir: Path, name: str = "agent", *, args: tuple[str, ...] = ()
) -> AsyncIterator[Peer]:
    """A running ``imprintd acp``, initialized; on exit, every message it wrote must have conformed."""
    client = RecordingClient()
    checker = SchemaChecker()
    stderr = log_dir / f"{name}.stderr"
    with open(stderr, "wb") as log:
        async with acp.spawn_agent_process(
            client,
            sys.executable,
            "-m",
            "imprintd",
            "acp",
            *args,
            env=env,
            transport_kwargs={"stderr": log, "shutdown_timeout": 30.0},
            observers=[checker.observe],
        ) as (conn, process):
            peer = Peer(conn, process, client, checker, stderr)
            await conn.initialize(
                protocol_version=acp.PROTOCOL_VERSION,
                client_info=schema.Implementation(name="imprint-tests", version="1"),
            )
            yield peer
    assert not checker.problems, "\n".join(checker.problems)
    assert process.returncode == 0, peer.log()


#: Updates about the session rather than its conversation.
ANNOUNCEMENTS = ("available_commands_update", "session_info_update")


def texts(updates, kind: str) -> list[str]:
    """The text of each ``kind`` chunk (``agent_message_chunk``, ``agent_thought_chunk`` …)."""
    return [u.content.text for u in updates if u.session_update == kind and u.content.type == "text"]


#: Seconds a raw read waits for the agent's next line.
TIMEOUT_S = 60


class RawAgent:
    """``imprintd acp`` on pipes: write raw bytes, read stdout line by line (a thread reads)."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "imprintd", "acp", *args],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.stdout = b""
        self.stderr = b""
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.stdout += line
            self.lines.put(line)

    def _read_stderr(self) -> None:
        self.stderr = self.process.stderr.read()

    def write(self, data: bytes) -> None:
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def send(self, message: dict) -> None:
        self.write(json.dumps(message).encode() + b"\n")

    def request(self, request_id: int, method: str, params: dict | None = None) -> None:
        message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def read(self) -> dict:
        line = self.lines.get(timeout=TIMEOUT_S)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        message = json.loads(line)
        assert message["jsonrpc"] == "2.0"
        if "error" in message:
            assert "result" not in message and "id" in message
            conforms(schema.Error, message["error"])
        return message

    def close(self) -> int:
        self.process.stdin.close()
        code = self.process.wait(timeout=TIMEOUT_S)
        return code
