"""Issue 35, items 1 and 2: one slow thing never stalls everyone. With another process holding
the data file (``BEGIN EXCLUSIVE``), a stored chat waits out the busy timeout in a worker thread
while the event loop goes on answering everything that does not need that write; a remote
retry's wait (``Retry-After``) leaves the inference lock to other sessions' replies."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.e2e.rawclient import RawClient

#: What the issue allows a request that needs no waiting write (it took 4.7-5.1 s before).
PROMPT_S = 0.1

HOLDER = """
import sys, apsw
db = apsw.Connection(sys.argv[1])
db.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""


@pytest.fixture
def holder(tmp_path):
    """Another process (a backup, ``sqlite3`` in a terminal) holding the data file exclusively."""
    processes: list[subprocess.Popen] = []

    def hold(path) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        processes.append(process)
        assert process.stdout is not None and process.stdout.readline() == "held\n"
        return process

    yield hold
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def answered(raw: RawClient, request_id: int, responses: dict[int, dict]) -> tuple[dict, float]:
    """The response to ``request_id`` and the seconds it took from now; others are kept in ``responses``."""
    started = time.monotonic()
    while request_id not in responses:
        message = raw.next()
        assert message is not None, raw.stderr_text()[-3000:]
        if "method" not in message:
            responses[message["id"]] = message
    return responses.pop(request_id), time.monotonic() - started


def test_a_write_waiting_on_the_file_stalls_no_other_request(raw, stub, tmp_path, holder):
    stub.queue("Billing listens on 8101.", "Ephemeral answer.", "A new one.")
    raw.initialize()
    responses: dict[int, dict] = {}
    stored, _ = answered(raw, raw.request("imprint/chat", {"text": "Which port?"}), responses)
    ephemeral, _ = answered(raw, raw.request("imprint/chat", {"text": "Hi?", "persist": False}), responses)
    ephemeral_id = ephemeral["result"]["sessionId"]
    other = holder(tmp_path / "data" / "imprint.sqlite3")
    try:
        waiting = raw.request("imprint/chat", {"text": "Sure?", "sessionId": stored["result"]["sessionId"]})
        also_waiting = raw.request("imprint/chat", {"text": "New?"})
        # For a second of the chats' wait, requests that need no write keep being answered at once
        # (polled, not slept on: each probe is sent when the one before it was answered).
        probing_until = time.monotonic() + 1.0
        probes = 0
        while time.monotonic() < probing_until:
            for method, params in (
                ("imprint/sessions", {}),
                ("imprint/session", {"sessionId": ephemeral_id}),
                ("imprint/summary", {"sessionId": ephemeral_id}),
                ("imprint/nonsense", {}),
            ):
                response, took = answered(raw, raw.request(method, params), responses)
                assert took < PROMPT_S, (method, took, response)
                probes += 1
                if method == "imprint/sessions":
                    listed = {s["sessionId"] for s in response["result"]["sessions"]}
                    assert {ephemeral_id, stored["result"]["sessionId"]} <= listed
        assert waiting not in responses and also_waiting not in responses, responses
        raw.notify("$/cancelRequest", {"id": waiting})
        cancelled, took = answered(raw, waiting, responses)
        assert cancelled["error"]["code"] == -32800 and took < PROMPT_S, (took, cancelled)
        down, took = answered(raw, raw.request("shutdown"), responses)
        assert "result" in down and took < PROMPT_S, (took, down)
    finally:
        assert other.stdin is not None
        other.stdin.write("\n")
        other.stdin.flush()
        other.wait()
    # The other waiting chat still gets its one answer: ``shutdown`` cancelled it (or it ended first:
    # stored once the file was free, or busy past the timeout); never silence or a second answer.
    last, _ = answered(raw, also_waiting, responses)
    assert "result" in last or last["error"]["code"] in (-32800, -32803), last
    raw.notify("exit")
    assert raw.wait() == 0
    assert not responses, responses

