"""The raw wire of ``imprintd acp``: one JSON object per line, only protocol on stdout, every
request answered once, bad lines answered and the agent still alive afterwards."""

from __future__ import annotations

import json
import threading

import pytest
from acp import schema

from tests.acp.peer import TIMEOUT_S, RawAgent, SchemaChecker
from tests.openai_stub import StubReply


@pytest.fixture
def raw(daemon_env):
    agent = RawAgent(daemon_env)
    yield agent
    if agent.process.poll() is None:
        agent.process.kill()
        agent.process.wait()


def error_of(message: dict) -> tuple:
    return message["id"], message["error"]["code"]


def test_bad_lines_are_answered_and_the_agent_keeps_serving(raw):
    raw.write(b"{not json\n")
    assert error_of(raw.read()) == (None, -32700)
    raw.write(b"[1, 2]\n")
    assert error_of(raw.read()) == (None, -32600)
    raw.write(b'"just a string"\n')
    assert error_of(raw.read()) == (None, -32600)
    raw.send({"id": 7, "method": "initialize", "params": {"protocolVersion": 1}})  # no "jsonrpc"
    assert error_of(raw.read()) == (7, -32600)
    raw.send({"jsonrpc": "2.0", "id": True, "method": "initialize"})
    assert error_of(raw.read()) == (None, -32600)
    raw.send({"jsonrpc": "2.0", "id": 8, "method": "initialize", "params": "yes"})
    assert error_of(raw.read()) == (8, -32600)
    raw.request(9, "session/nonexistent", {})
    message = raw.read()
    assert error_of(message) == (9, -32601) and "session/nonexistent" in message["error"]["message"]
    raw.send({"jsonrpc": "2.0", "method": "some/notification", "params": {}})  # ignored, not answered
    raw.request(10, "initialize", {"protocolVersion": [1]})
    message = raw.read()
    assert error_of(message) == (10, -32602) and "protocolVersion" in message["error"]["message"]
    raw.write(b"\n   \n")  # blank lines are not messages
    raw.request(11, "session/prompt", {"sessionId": "x", "prompt": [{"type": "text"}]})
    message = raw.read()
    assert (
        error_of(message) == (11, -32602) and "prompt[0].text: required field is missing" in message["error"]["message"]
    )

    # Responses to requests the agent never sent (or with an error object that does not fit): not answered.
    raw.send({"jsonrpc": "2.0", "id": "imprintd-99", "result": {"outcome": {"outcome": "cancelled"}}})
    raw.send({"jsonrpc": "2.0", "id": 3, "error": {"code": "x"}})
    raw.send({"jsonrpc": "2.0", "id": 12, "method": "session/list", "params": None})  # null: no params
    assert raw.read() == {"jsonrpc": "2.0", "id": 12, "result": {"sessions": []}}
    raw.request(13, "initialize", {"protocolVersion": 1})
    answer = raw.read()
    assert answer["id"] == 13 and answer["result"]["protocolVersion"] == 1
    assert raw.close() == 0
    assert raw.lines.empty()  # exactly one answer each: nothing more was written


def test_deep_nesting_and_lone_surrogates_are_refused_and_the_agent_keeps_serving(raw):
    raw.write(b"[" * 100_000 + b"]" * 100_000 + b"\n")  # every JSON decoder after this one recurses
    message = raw.read()
    assert error_of(message) == (None, -32600) and "nested more than" in message["error"]["message"]
    raw.write(
        b'{"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"protocolVersion": 1, '
        b'"clientCapabilities": {"x": ' + b"[" * 200 + b"]" * 200 + b"}}}\n"
    )
    message = raw.read()
    assert error_of(message) == (2, -32600) and "nested more than" in message["error"]["message"]
    raw.write(
        b'{"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {"sessionId": "s", '
        b'"prompt": [{"type": "text", "text": "a\\udc80b"}]}}\n'
    )
    message = raw.read()
    assert error_of(message) == (3, -32602) and "prompt[0].text" in message["error"]["message"]
    raw.request(4, "initialize", {"protocolVersion": 1})
    assert raw.read()["id"] == 4
    assert raw.close() == 0


def test_a_line_over_the_limit_is_refused_unread_and_the_next_is_served(raw):
    from imprintd.acp.jsonrpc import MAX_LINE

    raw.write(b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"x": "' + b"a" * MAX_LINE + b'"}}\n')
    message = raw.read()
    assert error_of(message) == (None, -32600) and "exceeds the limit" in message["error"]["message"]
    raw.request(2, "initialize", {"protocolVersion": 1})
    assert raw.read()["id"] == 2
    assert raw.close() == 0


def test_stdout_carries_only_acp_messages_each_valid_on_its_line(daemon_env, stub, workspace):
    """A whole session, with debug logging on: every stdout line is one message that conforms."""
    stub.queue(
        StubReply(text="Looking.", tool_calls=[{"name": "search", "id": "c0", "arguments": {"query": "x"}}]), "Done."
    )
    (workspace / "notes.txt").write_text("x marks the spot\n", encoding="utf-8")
    agent = RawAgent(daemon_env, "-v")
    agent.request(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    agent.request(2, "session/new", {"cwd": str(workspace), "mcpServers": []})
    assert agent.read()["id"] == 1
    session_id = agent.read()["result"]["sessionId"]
    agent.request(3, "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": "Where is x?"}]})
    while (message := agent.read()).get("id") != 3:
        assert message["method"] == "session/update"
    assert message["result"] == {"stopReason": "end_turn"}
    agent.request(4, "session/load", {"sessionId": session_id, "cwd": str(workspace), "mcpServers": []})
    while (message := agent.read()).get("id") != 4:
        assert message["method"] == "session/update"
    assert message["result"] is None
    agent.request(5, "session/list", {})
    agent.request(6, "session/delete", {"sessionId": session_id})
    assert [agent.read()["id"], agent.read()["id"]] == [5, 6]
    assert agent.close() == 0

    checker = SchemaChecker()
    checker.sent = {
        1: "initialize",
        2: "session/new",
        3: "session/prompt",
        4: "session/load",
        5: "session/list",
        6: "session/delete",
    }
    lines = agent.stdout.split(b"\n")
    assert lines[-1] == b""  # every message ends its line
    for line in lines[:-1]:
        checker.check(json.loads(line))
    assert b"DEBUG" in agent.stderr and b"INFO imprintd.acp" in agent.stderr  # the log is on stderr only
    assert any(
        json.loads(line).get("params", {}).get("update", {}).get("sessionUpdate") == "tool_call" for line in lines[:-1]
    )
    schema.InitializeResponse.model_validate(json.loads(lines[0])["result"])


def test_stdin_closing_mid_prompt_ends_the_agent_cleanly(daemon_env, stub, workspace):
    hold = threading.Event()
    reached = threading.Event()

    def slow(request):
        reached.set()
        return StubReply(text="Never finished", hold=hold)

    stub.queue(slow)
    agent = RawAgent(daemon_env)
    try:
        agent.request(1, "session/new", {"cwd": str(workspace), "mcpServers": []})
        session_id = agent.read()["result"]["sessionId"]
        agent.request(2, "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": "Go"}]})
        assert reached.wait(TIMEOUT_S)
        assert agent.close() == 0
    finally:
        hold.set()


def test_the_line_after_an_over_long_one_is_kept_whether_or_not_the_long_one_ended(monkeypatch):
    import io

    from imprintd.acp import jsonrpc

    monkeypatch.setattr(jsonrpc, "MAX_LINE", 8)
    stream = io.BytesIO(b"12345678\n" + b"x" * 20 + b"\nkept-1\n" + b"y" * 8 + b"\nkept-2\n\nlast")
    delivered = []
    jsonrpc.read_lines(stream, delivered.append)
    shown = [item.length if isinstance(item, jsonrpc.LineTooLong) else item for item in delivered]
    assert shown == [9, 21, b"kept-1\n", 9, b"kept-2\n", b"last", None]
