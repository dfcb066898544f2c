"""A daemon killed with SIGKILL mid-reply loses nothing it acknowledged."""

from __future__ import annotations

import threading
from pathlib import Path

import apsw

from tests.e2e.rawclient import RawClient
from tests.openai_stub import StubReply


def test_sigkill_during_a_reply_keeps_every_acknowledged_message(daemon_env, stub):
    hold = threading.Event()
    stub.queue("First answer.", "Second answer.", StubReply(text="Third answer is being written", hold=hold))
    daemon = RawClient(daemon_env)
    try:
        daemon.initialize()
        first = daemon.response(daemon.request("imprint/chat", {"text": "First question"}))["result"]
        daemon.response(daemon.request("imprint/chat", {"text": "Second question", "sessionId": first["sessionId"]}))
        daemon.request("imprint/chat", {"text": "Third question", "sessionId": first["sessionId"]})
        while (message := daemon.next()) is not None and message.get("method") != "imprint/replyDelta":
            pass
        daemon.proc.kill()  # SIGKILL, mid-reply
        daemon.proc.wait()
    finally:
        hold.set()
        daemon.kill()

    database = Path(daemon_env["IMPRINT_DATA_DIR"]) / "imprint.sqlite3"
    connection = apsw.Connection(str(database))
    assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    connection.close()

    restarted = RawClient(daemon_env)
    try:
        restarted.initialize()
        session = restarted.response(restarted.request("imprint/session", {"sessionId": first["sessionId"]}))["result"]
        assert [(m["seq"], m["role"], m["content"]) for m in session["messages"]] == [
            (1, "user", "First question"),
            (2, "assistant", "First answer."),
            (3, "user", "Second question"),
            (4, "assistant", "Second answer."),
            (5, "user", "Third question"),  # stored before any model work
        ]
    finally:
        restarted.kill()
