"""The pygls ↔ msgspec adapter and the error scrubbing, in process with a captured writer."""

from __future__ import annotations

import asyncio
import json

import msgspec
import pytest

from imprintd.chat import Chat
from imprintd.rpc import msgspec_handler
from imprintd.server import build_server


class Capture:
    def __init__(self) -> None:
        self.frames: list[dict] = []
        self._wrote: asyncio.Event | None = None

    def write(self, data: bytes) -> None:
        body = data.split(b"\r\n\r\n", 1)[1]
        self.frames.append(json.loads(body))
        if self._wrote is not None:
            self._wrote.set()

    async def answer(self, request_id: int) -> dict:
        """The response to ``request_id`` once the server has written it (handlers may run in workers)."""
        while not (found := [frame for frame in self.frames if frame.get("id") == request_id]):
            self._wrote = asyncio.Event()
            await self._wrote.wait()
        [reply] = found
        return reply

    def close(self) -> None:
        pass


@pytest.fixture
def server():
    server = build_server(Chat())
    server.protocol.set_writer(Capture())
    return server


def send(server, message: dict) -> None:
    server.protocol.receive_body(json.dumps({"jsonrpc": "2.0", **message}).encode())


async def test_an_internal_error_carries_no_traceback_or_path(server):
    @server.feature("imprint/explode")
    def explode(params):
        raise RuntimeError("cannot open /home/alice/secret/project.db")

    send(server, {"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": None, "capabilities": {}}})
    await server.protocol.writer.answer(1)  # initialize awaits its work in worker threads
    send(server, {"id": 2, "method": "imprint/explode", "params": {}})
    reply = await server.protocol.writer.answer(2)
    assert reply["error"]["code"] == -32603
    text = json.dumps(reply)
    assert "/home/alice" not in text and "Traceback" not in text and "traceback" not in text
    assert "incident" in reply["error"]["message"]


class Params(msgspec.Struct, rename="camel"):
    session_id: str
    count: int = 1


class Result(msgspec.Struct, rename="camel"):
    session_id: str
    doubled: int


@msgspec_handler(Params)
def double(params: Params) -> Result:
    return Result(session_id=params.session_id, doubled=params.count * 2)


def test_the_adapter_decodes_camel_case_and_encodes_results():
    assert double({"sessionId": "s", "count": 3}) == {"sessionId": "s", "doubled": 6}
    assert double({"sessionId": "s"}) == {"sessionId": "s", "doubled": 2}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "sessionId: required field is missing"),
        ({"sessionId": 1}, "sessionId: expected `str`, got `int`"),
        ({"sessionId": "s", "count": "2"}, "count: expected `int`, got `str`"),
        ([], "params: expected `object`"),
    ],
)
def test_the_adapter_names_the_bad_field(params, message):
    from pygls.exceptions import JsonRpcInvalidParams

    with pytest.raises(JsonRpcInvalidParams) as error:
        double(params)
    assert message in error.value.message


@pytest.mark.parametrize(
    "method",
    ["imprint/sessions", "imprint/session", "imprint/summary", "imprint/deleteSession", "imprint/conversation_history"],
)
async def test_a_database_that_cannot_be_used_fails_short_requests_with_32803_saying_why(server, isolated_dirs, method):
    import apsw

    isolated_dirs.mkdir(parents=True)
    newer = apsw.Connection(str(isolated_dirs / "imprint.sqlite3"))
    newer.pragma("user_version", 99)
    newer.close()
    send(server, {"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": None, "capabilities": {}}})
    params = (
        {}
        if method == "imprint/sessions"
        else {"sessionId": "s1", "query": "x"}
        if method == "imprint/conversation_history"
        else {"sessionId": "s1"}
    )
    send(server, {"id": 2, "method": method, "params": params})
    reply = await server.protocol.writer.answer(2)
    assert reply["error"]["code"] == -32803
    assert "newer imprintd" in reply["error"]["message"]


async def test_a_database_error_mid_request_is_32803_not_an_internal_error(server, monkeypatch):
    import apsw

    from imprintd.store import Store

    def broken(self):
        raise apsw.IOError("disk I/O error")

    monkeypatch.setattr(Store, "sessions", broken)
    send(server, {"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": None, "capabilities": {}}})
    send(server, {"id": 2, "method": "imprint/sessions", "params": {}})
    reply = await server.protocol.writer.answer(2)
    assert reply["error"]["code"] == -32803 and "disk I/O error" in reply["error"]["message"]


async def test_a_database_error_during_a_chat_is_32803(server, monkeypatch):
    import anyio
    import apsw

    from imprintd.store import Store

    def broken(self, session_id, messages):
        raise apsw.FullError("database or disk is full")

    monkeypatch.setattr(Store, "extend", broken)
    send(server, {"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": None, "capabilities": {}}})
    send(server, {"id": 2, "method": "imprint/chat", "params": {"text": "hello"}})
    for _ in range(200):
        replies = [frame for frame in server.protocol.writer.frames if frame.get("id") == 2]
        if replies:
            break
        await anyio.sleep(0.01)
    [reply] = replies
    assert reply["error"]["code"] == -32803 and "disk is full" in reply["error"]["message"]


def frame(message: dict) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def test_stdin_closing_after_exit_ends_the_reader_thread_without_a_traceback(monkeypatch, tmp_path):
    """The client closes stdin only after ``exit`` was served and the event loop has closed."""
    import os
    import threading

    from imprintd.rpc import run_stdio

    raised: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda hook: raised.append(hook.exc_value))
    read_end, write_end = os.pipe()
    server = build_server(Chat())
    served: list[int] = []
    with open(read_end, "rb", buffering=0) as stdin, open(tmp_path / "stdout", "wb") as stdout:
        serving = threading.Thread(target=lambda: served.append(run_stdio(server, stdin, stdout)))
        serving.start()
        init = {"processId": None, "rootUri": None, "capabilities": {}}
        os.write(write_end, frame({"id": 1, "method": "initialize", "params": init}))
        os.write(write_end, frame({"id": 2, "method": "shutdown"}))
        os.write(write_end, frame({"method": "exit"}))
        serving.join(timeout=60)
        assert served == [0], "exit after shutdown ends serving with 0"
        [reader] = [thread for thread in threading.enumerate() if thread.name == "imprintd-stdin"]
        os.close(write_end)  # EOF now reaches a reader whose event loop has closed
        reader.join(timeout=60)
    assert not reader.is_alive()
    assert raised == []
