"""The LSP lifecycle and JSON-RPC error rules, over real stdio, including malformed input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.e2e.rawclient import RawClient


def test_request_before_initialize_gets_32002(raw):
    request_id = raw.request("imprint/sessions", {})
    assert raw.response(request_id)["error"]["code"] == -32002
    raw.initialize()  # and the daemon still serves


def test_notification_before_initialize_is_dropped(raw):
    raw.notify("workspace/didChangeConfiguration", {"settings": {}})
    result = raw.initialize()
    assert "capabilities" in result["result"]


def test_second_initialize_gets_32600(raw):
    raw.initialize()
    request_id = raw.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
    assert raw.response(request_id)["error"]["code"] == -32600


def test_shutdown_then_requests_get_32600_and_exit_is_0(raw):
    raw.initialize()
    request_id = raw.request("shutdown")
    assert raw.response(request_id) == {"jsonrpc": "2.0", "id": request_id, "result": None}
    request_id = raw.request("imprint/sessions", {})
    assert raw.response(request_id)["error"]["code"] == -32600
    raw.notify("exit")
    assert raw.wait() == 0


def test_exit_without_shutdown_is_1(raw):
    raw.initialize()
    raw.notify("exit")
    assert raw.wait() == 1


def test_stdin_eof_ends_the_process(raw):
    raw.initialize()
    raw.close_input()
    assert raw.wait() == 1


def test_daemon_exits_when_client_process_dies(daemon_env):
    parent = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    client = RawClient(daemon_env)
    try:
        client.initialize(processId=parent.pid)
        parent.kill()
        parent.wait()  # reaped, so the pid is really gone
        assert client.wait() in (0, 1)
    finally:
        client.kill()


def test_invalid_json_gets_32700_with_null_id(raw):
    raw.initialize()
    raw.send_bytes(b'{"jsonrpc": "2.0", "id": 7, "method": ')
    response = raw.response(None)
    assert response["error"]["code"] == -32700 and "id" in response and response["id"] is None
    request_id = raw.request("imprint/sessions", {})
    assert "result" in raw.response(request_id)


@pytest.mark.parametrize(
    "body",
    [b"[]", b"42", b'{"id": 3, "method": "imprint/sessions"}', b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "x"}'],
)
def test_non_request_gets_32600(raw, body):
    raw.initialize()
    raw.send_bytes(body)
    response = raw.response(3 if b'"id": 3' in body else None)
    assert response["error"]["code"] == -32600


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"text": 5}, "text"),
        ({}, "text"),
        ({"text": "hi", "style": "sung"}, "style"),
        ({"text": "hi", "persist": "no"}, "persist"),
        ({"text": ""}, "text"),
    ],
)
def test_invalid_chat_params_get_one_32602_naming_the_field(raw, params, field):
    raw.initialize()
    request_id = raw.request("imprint/chat", params)
    error = raw.response(request_id)["error"]
    assert error["code"] == -32602
    assert field in error["message"]
    # exactly one response: the next thing answered is the next request
    follow_up = raw.request("imprint/sessions", {})
    assert "result" in raw.response(follow_up)


def test_invalid_lsp_params_get_32602_with_the_request_id(raw):
    request_id = raw.request("initialize", {"processId": "not a number", "capabilities": {}})
    error = raw.response(request_id)["error"]
    assert error["code"] == -32602
    assert "processId" in error["message"] or "process_id" in error["message"]


def test_unknown_methods_get_32601_and_notifications_are_never_answered(raw):
    raw.initialize()
    unknown = raw.request("imprint/nope", {})
    assert raw.response(unknown)["error"]["code"] == -32601
    dollar = raw.request("$/somethingNew", {})
    assert raw.response(dollar)["error"]["code"] == -32601
    raw.notify("$/unknownNotification", {})
    raw.notify("imprint/unknownNotification", {})
    raw.notify("workspace/didChangeConfiguration", {"settings": {"chat": {"n_ctx": 4096}}})
    last = raw.request("shutdown")
    assert raw.response(last)["result"] is None  # nothing was answered in between
    raw.notify("exit")
    raw.wait()
    assert [m for m in raw.drain_messages() if "id" in m and "method" not in m] == []


def test_oversized_content_length_is_refused_without_reading_it_whole(raw):
    raw.initialize()
    size = 17 * 1024 * 1024
    raw.send_bytes(b" " * size, length=size)
    error = raw.response(None)["error"]
    assert error["code"] == -32600 and "exceeds" in error["message"]
    request_id = raw.request("imprint/sessions", {})
    assert "result" in raw.response(request_id)


def test_every_request_gets_exactly_one_response(raw):
    raw.initialize()
    ids = [raw.request("imprint/sessions", {}) for _ in range(5)]
    ids.append(raw.request("imprint/session", {"sessionId": "missing"}))
    ids.append(raw.request("imprint/nope", {}))
    shutdown = raw.request("shutdown")
    raw.notify("exit")
    assert raw.wait() == 0
    responses = [m for m in raw.drain_messages() if "method" not in m]
    assert sorted(m["id"] for m in responses) == sorted([*ids, shutdown])


def test_unknown_session_is_invalid_params_naming_it(raw):
    raw.initialize()
    request_id = raw.request("imprint/session", {"sessionId": "nope"})
    error = raw.response(request_id)["error"]
    assert error["code"] == -32602 and "nope" in error["message"]


def test_stdout_carries_protocol_only(raw):
    raw.initialize()
    raw.request("shutdown")
    raw.notify("exit")
    raw.wait()
    for message in raw.drain_messages():
        assert message["jsonrpc"] == "2.0"
    json.dumps(raw.stderr_text())  # logs went to stderr
