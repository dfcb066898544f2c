"""One slow thing never stalls everyone. With another process holding
the data file (``BEGIN EXCLUSIVE``), a stored chat waits out the busy timeout in a worker thread
while the event loop goes on answering everything that does not need that write; a remote
retry's wait (``Retry-After``) leaves the inference lock to other sessions' replies."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from tests.e2e.rawclient import RawClient
from tests.openai_stub import StubReply

#: Rounds of requests that need no write sent while two chats wait on the file (each round
#: takes milliseconds; the chats wait up to the 5 s busy timeout). Before, each request waited
#: with the chats, 4.7-5.1 s.
PROBE_ROUNDS = 10

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


def answered(raw: RawClient, request_id: int, responses: dict[int, dict]) -> dict:
    """The response to ``request_id``; others that come first are kept in ``responses``."""
    while request_id not in responses:
        message = raw.next()
        assert message is not None, raw.stderr_text()[-3000:]
        if "method" not in message:
            responses[message["id"]] = message
    return responses.pop(request_id)


def test_a_write_waiting_on_the_file_stalls_no_other_request(raw, stub, tmp_path, holder):
    stub.queue("Billing listens on 8101.", "Ephemeral answer.", "A new one.")
    raw.initialize()
    responses: dict[int, dict] = {}
    stored = answered(raw, raw.request("imprint/chat", {"text": "Which port?"}), responses)
    ephemeral = answered(raw, raw.request("imprint/chat", {"text": "Hi?", "persist": False}), responses)
    ephemeral_id = ephemeral["result"]["sessionId"]
    other = holder(tmp_path / "data" / "imprint.sqlite3")
    try:
        waiting = raw.request("imprint/chat", {"text": "Sure?", "sessionId": stored["result"]["sessionId"]})
        also_waiting = raw.request("imprint/chat", {"text": "New?"})
        # While the chats wait, requests that need no write are answered, each before either chat
        # (each probe is sent when the one before it was answered): a loop stalled by the write
        # would answer them only once the chats had their answers, stored or busy.
        for _ in range(PROBE_ROUNDS):
            for method, params in (
                ("imprint/sessions", {}),
                ("imprint/session", {"sessionId": ephemeral_id}),
                ("imprint/summary", {"sessionId": ephemeral_id}),
                ("imprint/nonsense", {}),
            ):
                response = answered(raw, raw.request(method, params), responses)
                assert waiting not in responses and also_waiting not in responses, (method, responses)
                if method == "imprint/sessions":
                    listed = {s["sessionId"] for s in response["result"]["sessions"]}
                    assert {ephemeral_id, stored["result"]["sessionId"]} <= listed
                elif method == "imprint/nonsense":
                    assert response["error"]["code"] == -32601, response
                else:
                    assert "result" in response, (method, response)
        # A cancel reaches the waiting chat while the file is still held: cancelled, not busy.
        raw.notify("$/cancelRequest", {"id": waiting})
        cancelled = answered(raw, waiting, responses)
        assert cancelled["error"]["code"] == -32800, cancelled
        down = answered(raw, raw.request("shutdown"), responses)
        assert "result" in down, down
    finally:
        assert other.stdin is not None
        other.stdin.write("\n")
        other.stdin.flush()
        other.wait()
    # The other waiting chat still gets its one answer: ``shutdown`` cancelled it (or it ended first:
    # stored once the file was free, or busy past the timeout); never silence or a second answer.
    last = answered(raw, also_waiting, responses)
    assert "result" in last or last["error"]["code"] in (-32800, -32803), last
    raw.notify("exit")
    assert raw.wait() == 0
    assert not responses, responses


def test_a_retry_after_wait_holds_no_other_sessions_reply(raw, stub):
    """Session A's 429 with ``Retry-After: 30`` is waited out without the
    inference lock, so session B's reply, asked meanwhile, completes while A still waits."""
    a_refused = threading.Event()

    def model(request: dict) -> StubReply | str:
        asked = request["messages"][-1]["content"]
        if "session A" in asked:
            a_refused.set()
            return StubReply(status=429, body='{"error": {"message": "slow down"}}', headers={"Retry-After": "30"})
        return "B's answer."

    stub.queue(model, model, model)
    raw.initialize()
    responses: dict[int, dict] = {}
    a = raw.request("imprint/chat", {"text": "Question of session A", "persist": False})
    assert a_refused.wait(timeout=60)
    b = raw.request("imprint/chat", {"text": "Question of session B", "persist": False})
    answer = answered(raw, b, responses)
    assert answer["result"]["text"] == "B's answer."
    assert a not in responses  # A is still waiting out its Retry-After
    assert len(stub.requests) == 2  # A asked once so far, B once
    raw.notify("$/cancelRequest", {"id": a})
    cancelled = answered(raw, a, responses)
    assert cancelled["error"]["code"] == -32800, cancelled
