"""A malformed message costs the log one short line, never a traceback: a client that sends
them without end cannot make the daemon write kilobytes for each (SECURITY.md, section 4)."""

from __future__ import annotations

import pytest

from tests.e2e.rawclient import RawClient

MALFORMED_NOTIFICATIONS = [
    ("textDocument/didOpen", {"textDocument": 3}),
    ("textDocument/didOpen", {"textDocument": {"uri": 5, "languageId": [], "version": "x", "text": None}}),
    ("textDocument/didChange", {"textDocument": "x", "contentChanges": 7}),
    ("textDocument/didClose", {"textDocument": {"uri": {"a": 1}}}),
    ("workspace/didChangeWorkspaceFolders", {"event": {"added": [3] * 500, "removed": "x"}}),
    ("initialized", []),
    ("$/setTrace", {"value": 42}),
]
#: Longer than any one refusal needs, far shorter than the ~4 KB traceback each used to cost.
LINE_LIMIT = 1_000


@pytest.fixture
def logged(daemon_env, tmp_path):
    log = tmp_path / "imprintd.log"
    client = RawClient(daemon_env, args=("serve", "--log-file", str(log)))
    yield client, log
    client.kill()


def test_each_malformed_notification_logs_one_short_line(logged):
    client, log = logged
    client.initialize()
    assert "result" in client.response(client.request("imprint/sessions", {}))
    before = log.read_text(encoding="utf-8").splitlines()
    rounds = 5
    for _ in range(rounds):
        for method, params in MALFORMED_NOTIFICATIONS:
            client.notify(method, params)
    # Answered only after every notification above was read and refused (and logged: the log
    # file is written, and flushed, before the next message is read).
    assert "result" in client.response(client.request("imprint/sessions", {}))
    lines = log.read_text(encoding="utf-8").splitlines()[len(before) :]
    sent = rounds * len(MALFORMED_NOTIFICATIONS)
    assert len(lines) <= sent, "\n".join(lines[:80])  # before the fix: about 60 lines each
    assert all(len(line) <= LINE_LIMIT for line in lines), max(lines, key=len)[:3000]
    assert not any("Traceback" in line or "Exception Group" in line for line in lines)
    assert any("didOpen" in line and "text_document" in line for line in lines)  # still says which and why


def test_a_malformed_request_is_answered_in_words_and_logs_no_traceback(logged):
    client, log = logged
    client.initialize()
    error = client.response(client.request("textDocument/hover", {"textDocument": 3, "position": [1] * 5000}))
    assert error["error"]["code"] == -32602 and "text_document" in error["error"]["message"]
    assert len(error["error"]["message"]) <= LINE_LIMIT
    assert "result" in client.response(client.request("imprint/sessions", {}))
    text = log.read_text(encoding="utf-8")
    assert "Traceback" not in text and "Exception Group" not in text and "Unable to deserialize" not in text
