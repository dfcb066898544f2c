"""Hostile or buggy client input over real stdio.

Each test failed before its fix (the daemon exited, hung, answered -32603 or stored an
empty session); each ends in the answer protocol.md names, with the daemon still serving.
"""

from __future__ import annotations

import json
import threading

import pytest

from tests.e2e.rawclient import RawClient, next_matching, show_messages_until_response
from tests.openai_stub import StubReply


def body(message: dict) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **message}).encode()


def still_serves(raw: RawClient) -> None:
    request_id = raw.request("imprint/sessions", {})
    assert "result" in raw.response(request_id), raw.stderr_text()


# -- $/cancelRequest with an id that is not an int or a string -----------------------


def test_a_cancel_with_an_object_or_array_id_is_ignored_while_a_request_runs(raw, stub):
    release = threading.Event()
    stub.queue(StubReply(text="Still answering here.", hold=release))
    raw.initialize()
    chat_id = raw.request("imprint/chat", {"text": "Which port?", "persist": False})
    next_matching(raw, lambda m: m.get("method") == "imprint/replyDelta")  # the reply is running
    for bad in ({"a": 1}, [chat_id], True, 1.5, None):
        raw.notify("$/cancelRequest", {"id": bad})
    still_serves(raw)  # the daemon did not exit on an unhashable id
    release.set()
    answer = raw.response(chat_id)
    assert answer["result"]["text"] == "Still answering here."  # and nothing was cancelled
    assert "Traceback" not in raw.stderr_text()


# -- nesting -------------------------------------------------------------------------


def test_a_body_of_a_thousand_nested_arrays_is_refused_and_the_daemon_serves(raw):
    raw.initialize()
    raw.send_bytes(b"[" * 1000 + b"]" * 1000)
    error = raw.response(None)["error"]
    assert error["code"] == -32600 and "nested more than 64 levels" in error["message"]
    still_serves(raw)


def test_deep_params_are_refused_with_the_request_id_and_shallow_ones_pass(raw):
    raw.initialize()
    deep: object = "x"
    for _ in range(100):
        deep = [deep]
    raw.send_bytes(body({"id": 41, "method": "imprint/sessions", "params": {"extra": deep}}))
    error = raw.response(41)["error"]
    assert error["code"] == -32600 and "params.extra" in error["message"] and "64" in error["message"]
    shallow: object = "x"
    for _ in range(60):
        shallow = [shallow]
    raw.send_bytes(body({"id": 42, "method": "imprint/sessions", "params": {"extra": shallow}}))
    assert "result" in raw.response(42)


def test_deep_nesting_in_a_notification_is_dropped_unanswered(raw):
    raw.initialize()
    raw.send_bytes(
        body({"method": "workspace/didChangeConfiguration", "params": {"settings": json.loads("[" * 100 + "]" * 100)}})
    )
    still_serves(raw)  # the next answer is to the next request: the notification got none


# -- lone surrogates in any string param ---------------------------------------------

STRING_PARAMS = [
    ("imprint/chat", {"text": "hi"}, "text"),
    ("imprint/chat", {"text": "hi"}, "sessionId"),
    ("imprint/chat", {"text": "hi"}, "style"),
    ("imprint/chat", {"text": "hi"}, "workspace"),
    ("imprint/chat", {"text": "hi"}, "workDoneToken"),
    ("imprint/session", {}, "sessionId"),
    ("imprint/deleteSession", {}, "sessionId"),
    ("imprint/summary", {}, "sessionId"),
    ("imprint/read_chat_section", {"start": 0, "length": 5}, "replyId"),
    ("imprint/read_chat_section", {"start": 0, "length": 5}, "sourceId"),
    ("imprint/conversation_history", {"sessionId": "s"}, "query"),
    ("imprint/conversation_history", {"query": "q"}, "sessionId"),
    ("imprint/sessions", {}, "anything"),
]


@pytest.mark.parametrize(("method", "others", "field"), STRING_PARAMS)
def test_a_lone_surrogate_in_any_string_param_is_32602_naming_it(raw, stub, method, others, field):
    raw.initialize()
    # json.dumps writes the lone surrogate as the escape "\udc80".
    raw.send_bytes(body({"id": 7, "method": method, "params": {**others, field: "a\udc80b"}}))
    error = raw.response(7)["error"]
    assert error["code"] == -32602, error
    assert f"params.{field}" in error["message"] and "lone surrogate" in error["message"]
    listed = raw.response(raw.request("imprint/sessions", {}))["result"]["sessions"]
    assert listed == [] and stub.requests == []  # nothing stored, nothing asked of the model


def test_raw_surrogate_bytes_in_chat_text_are_32602_and_nothing_is_stored(raw, stub):
    raw.initialize()
    raw.send_bytes(b'{"jsonrpc": "2.0", "id": 8, "method": "imprint/chat", "params": {"text": "a\xed\xa0\x80b"}}')
    error = raw.response(8)["error"]
    assert error["code"] == -32602 and "params.text" in error["message"]
    assert raw.response(raw.request("imprint/sessions", {}))["result"]["sessions"] == []
    assert stub.requests == []


def test_a_lone_surrogate_in_an_lsp_param_or_the_method_is_refused(raw):
    raw.initialize()
    raw.send_bytes(body({"id": 9, "method": "shutdown", "params": {"note": "\ud800"}}))
    assert raw.response(9)["error"]["code"] == -32602
    raw.send_bytes(body({"id": 10, "method": "imprint/\udfff"}))
    assert raw.response(10)["error"]["code"] == -32600
    raw.send_bytes(body({"id": "x\udc80", "method": "imprint/sessions"}))
    assert raw.response(None)["error"]["code"] == -32600  # an id that cannot be written back
    still_serves(raw)


def test_a_lone_surrogate_in_initialize_params_is_32602_and_initialize_can_be_retried(raw):
    raw.send_bytes(
        body(
            {
                "id": 1,
                "method": "initialize",
                "params": {"processId": None, "rootUri": "file:///ws/\udc80", "capabilities": {}},
            }
        )
    )
    error = raw.response(1)["error"]
    assert error["code"] == -32602 and "params.rootUri" in error["message"]
    assert "capabilities" in raw.initialize()["result"]


def test_a_valid_surrogate_pair_is_text_like_any_other(raw, stub):
    stub.queue("Smile back.")
    raw.initialize()
    raw.send_bytes(
        body({"id": 11, "method": "imprint/chat", "params": {"text": "a \U0001f600 face", "persist": False}})
    )
    assert raw.response(11)["result"]["text"] == "Smile back."
    assert stub.requests[0]["messages"][-1]["content"] == "a \U0001f600 face"


# -- a bool is not an id -------------------------------------------------------------


@pytest.mark.parametrize("bad_id", [True, False, 1.5, None, [], {}])
def test_a_bad_id_gets_32600_with_a_null_id(raw, bad_id):
    raw.initialize()
    raw.send_bytes(body({"id": bad_id, "method": "imprint/sessions"}))
    response = raw.response(None)
    assert response["id"] is None and response["error"]["code"] == -32600
    still_serves(raw)


# -- editor settings that are not an object -----------------------------------------


def test_initialization_options_with_a_non_object_section_are_refused_by_name(raw):
    request_id = raw.request(
        "initialize", {"processId": None, "rootUri": None, "capabilities": {}, "initializationOptions": {"imprint": 5}}
    )
    shown, response = show_messages_until_response(raw, request_id)
    assert "capabilities" in response["result"]
    assert any("settings from editor must be an object" in text and "5" in text for text in shown), shown
    still_serves(raw)


@pytest.mark.parametrize("section", ["x", 5, [1, 2], True])
def test_did_change_configuration_with_a_non_object_section_names_it(raw, section):
    raw.initialize()
    raw.notify("workspace/didChangeConfiguration", {"settings": {"imprint": section}})
    message = next_matching(raw, lambda m: m.get("method") == "window/showMessage")
    text = message["params"]["message"]
    assert "must be an object" in text and "AttributeError" not in text
    still_serves(raw)


# -- folders and URLs that cannot be used -------------------------------------------


@pytest.mark.parametrize("folder", ["/dev/null", "FILE/sub"])
def test_a_data_dir_that_cannot_be_used_is_32803_naming_it(daemon_env, tmp_path, folder):
    if folder.startswith("FILE"):
        (tmp_path / "a-file").write_text("not a folder")
        folder = str(tmp_path / "a-file" / "sub")
    client = RawClient({**daemon_env, "IMPRINT_DATA_DIR": folder})
    try:
        client.initialize()
        for method, params in (("imprint/sessions", {}), ("imprint/chat", {"text": "hi"})):
            error = client.response(client.request(method, params))["error"]
            assert error["code"] == -32803, error
            assert folder in error["message"] and "data folder" in error["message"]
            assert "IMPRINT_DATA_DIR" in error["message"]
    finally:
        client.kill()


def test_the_cli_names_a_data_dir_that_cannot_be_used(daemon_env):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "imprintd", "sessions"],
        capture_output=True,
        text=True,
        check=False,
        env={**daemon_env, "IMPRINT_DATA_DIR": "/dev/null"},
        timeout=60,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "the data folder /dev/null cannot be used" in done.stderr


def test_a_cache_dir_that_cannot_be_used_is_32803_naming_it(daemon_env, workspace, stub):
    client = RawClient({**daemon_env, "IMPRINT_CACHE_DIR": "/dev/null"})
    try:
        client.initialize()
        params = {"text": "hi", "workspace": str(workspace), "persist": False}
        error = client.response(client.request("imprint/chat", params))["error"]
        assert error["code"] == -32803 and "/dev/null" in error["message"] and "cache folder" in error["message"]
        assert stub.requests == []
    finally:
        client.kill()


def test_a_base_url_that_cannot_be_parsed_is_refused_as_a_setting(daemon_env):
    client = RawClient({**daemon_env, "IMPRINT_CHAT_BASE_URL": "http://[::1"})
    try:
        request_id = client.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        shown, response = show_messages_until_response(client, request_id)
        assert "capabilities" in response["result"]
        assert any("chat.base_url" in text and "http://[::1" in text for text in shown), shown
        error = client.response(client.request("imprint/chat", {"text": "hi", "persist": False}))["error"]
        assert error["code"] != -32603, error  # the previous (default) URL stays; no internal error
    finally:
        client.kill()


# -- a Content-Length that cannot be skipped ----------------------------------------


@pytest.mark.parametrize("length", ["1" + "0" * 30, "9" * 5000, str(2**40)])
def test_a_content_length_that_cannot_be_skipped_ends_the_connection(raw, length):
    raw.initialize()
    raw.proc.stdin.write(f"Content-Length: {length}\r\n\r\n".encode())
    raw.proc.stdin.flush()
    raw.request("imprint/sessions", {})  # would be swallowed forever by a skip
    assert raw.wait() == 1
    messages = raw.drain_messages()
    assert [m["error"]["code"] for m in messages if "error" in m] == [-32600]
    assert "cannot be skipped" in messages[-1]["error"]["message"]
    assert "input stream is broken" in raw.stderr_text()


def test_a_length_over_the_limit_that_can_be_skipped_still_is(raw):
    raw.initialize()
    size = 17 * 1024 * 1024
    raw.send_bytes(b" " * size, length=size)
    assert "exceeds" in raw.response(None)["error"]["message"]
    still_serves(raw)


# -- no thread may hold the process at exit ------------------------------------------


def test_a_stuck_worker_thread_does_not_hold_the_process_at_exit():
    import subprocess
    import sys

    program = (
        "import logging, sys, threading\n"
        "from imprintd.rpc import leave_despite_busy_threads\n"
        "logging.basicConfig()\n"
        "threading.Thread(target=threading.Event().wait, name='stuck reader').start()\n"
        "leave_despite_busy_threads(3, grace=0.2)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 3
    assert "1 worker thread(s) still busy: stuck reader" in done.stderr


def test_finished_worker_threads_leave_the_normal_exit_alone():
    import subprocess
    import sys

    program = (
        "import threading\n"
        "from imprintd.rpc import leave_despite_busy_threads\n"
        "threading.Thread(target=lambda: None).start()\n"
        "leave_despite_busy_threads(3, grace=30)\n"
        "print('returned')\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "returned"


# -- an error text holding '%' is still answered ------------------------------


@pytest.mark.parametrize(
    ("method", "params", "named"),
    [
        ("imprint/session", {"sessionId": "%d"}, "%d"),
        ("imprint/summary", {"sessionId": "100%s done"}, "100%s done"),
        ("imprint/chat", {"text": "Which port?", "workspace": "/no/such/%s/%(x)s"}, "/no/such/%s/%(x)s"),
    ],
)
def test_an_error_whose_text_holds_a_percent_sign_is_answered(raw, method, params, named):
    raw.initialize()
    request_id = raw.request(method, params)
    error = raw.response(request_id)["error"]  # before the fix: never answered
    assert named in error["message"]
    still_serves(raw)
    assert "Traceback" not in raw.stderr_text() and "--- Logging error ---" not in raw.stderr_text()
