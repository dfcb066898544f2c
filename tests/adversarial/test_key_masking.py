"""The API key and a password in ``chat.base_url`` reach no answer, notification, stored
message or log line, however a server writes them back: in a tool call's id, ``\\u``-escaped in
its arguments, or quoted by the HTTP library. A key no HTTP header can carry (a line break, a
character outside ASCII) is refused by name, without repeating it."""

from __future__ import annotations

import json

import pytest

from imprintd import settings
from imprintd.models.api_key import API_KEY_ENV, usable_api_key
from imprintd.models.base import ModelUnavailable
from imprintd.redact import MARK
from tests.e2e.rawclient import RawClient
from tests.openai_stub import StubReply

KEY = "sk-test-1f2e3d4c5b6a7988abcdef0123456789"
PASSWORD = "hunter2-Pw"


def chunk(delta: dict, finish: str | None = None) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def call_events(call_id: str, arguments_text: str) -> list[str]:
    call = {"index": 0, "id": call_id, "function": {"name": "search", "arguments": arguments_text}}
    return [chunk({"tool_calls": [call]}), chunk({}, "tool_calls"), "[DONE]"]


def everything_until(client: RawClient, request_id: int) -> list[dict]:
    seen = []
    while (message := client.next()) is not None:
        seen.append(message)
        if message.get("id") == request_id and "method" not in message:
            return seen
    raise AssertionError(client.stderr_text()[-3000:])


def stored_bytes(data_dir) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(data_dir.iterdir()) if path.is_file())


def escaped(text: str) -> str:
    """``text`` with every character written as a JSON ``\\u`` escape."""
    return "".join(f"\\u{ord(character):04x}" for character in text)


@pytest.mark.parametrize(
    "events",
    [
        pytest.param(call_events(f"call-{KEY}", json.dumps({"query": "billing"})), id="key in the call id"),
        pytest.param(call_events("c1", '{"query": "' + escaped(KEY) + '"}'), id="key escaped in the arguments"),
        pytest.param(call_events("c1", '{"query": "see ' + KEY[:10] + escaped(KEY[10:]) + '"}'), id="key half escaped"),
    ],
)
def test_a_key_written_back_in_a_tool_call_is_masked_everywhere(daemon_env, stub, workspace, tmp_path, events):
    stub.queue(StubReply(raw_events=events), "Billing listens on 8101.")
    client = RawClient({**daemon_env, "IMPRINT_CHAT_API_KEY": KEY})
    try:
        client.initialize()
        request_id = client.request("imprint/chat", {"text": "Which port?", "workspace": str(workspace)})
        seen = everything_until(client, request_id)
        result = seen[-1]["result"]
        assert result["text"] == "Billing listens on 8101."
        steps = [m["params"] for m in seen if m.get("method") == "imprint/toolStep"]
        assert steps, seen  # the call ran
        session = client.response(client.request("imprint/session", {"sessionId": result["sessionId"]}))
        wire = json.dumps([seen, session])  # escaped as the wire escapes it, and decoded:
        assert KEY not in wire and KEY not in json.dumps([seen, session], ensure_ascii=False)
        assert escaped(KEY) not in wire
        # The model is not sent it back either (the call as it was stored, in the next request).
        resent = json.dumps(stub.requests[1]["messages"], ensure_ascii=False)
        assert KEY not in resent
        client.request("shutdown")
        client.notify("exit")
        assert client.wait() == 0
        assert KEY not in client.stderr_text()
        assert KEY.encode() not in stored_bytes(tmp_path / "data")
    finally:
        client.kill()


def test_a_key_in_a_call_id_gives_the_call_an_id_of_its_own(daemon_env, stub, workspace):
    stub.queue(StubReply(raw_events=call_events(f"call-{KEY}", '{"query": "billing"}')), "Done.")
    client = RawClient({**daemon_env, "IMPRINT_CHAT_API_KEY": KEY})
    try:
        client.initialize()
        result = everything_until(client, client.request("imprint/chat", {"text": "hi", "workspace": str(workspace)}))
        session = client.response(client.request("imprint/session", {"sessionId": result[-1]["result"]["sessionId"]}))
        [asked] = [m for m in session["result"]["messages"] if m["toolCalls"]]
        [answered] = [m for m in session["result"]["messages"] if m["role"] == "tool"]
        # Not "[REDACTED]": an id must still pair the call with its result.
        assert asked["toolCalls"][0]["id"] == answered["toolCallId"] and MARK not in answered["toolCallId"]
    finally:
        client.kill()


# -- keys no header can carry ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "named"),
    [
        (KEY[:20] + "\r\n" + KEY[20:], "a line break"),
        (KEY + "\n", "a line break"),
        (KEY[:20] + "é" + KEY[20:], "outside ASCII"),
        (KEY[:20] + " " + KEY[20:], "a space"),
        (KEY[:20] + "\x1b" + KEY[20:], "a control character"),
    ],
)
def test_a_key_no_header_can_carry_is_refused_by_name_without_echoing_it(daemon_env, stub, key, named):
    client = RawClient({**daemon_env, "IMPRINT_CHAT_API_KEY": key})
    try:
        client.initialize()
        error = client.response(client.request("imprint/chat", {"text": "hi", "persist": False}))["error"]
        # Before the fix: httpx's "Illegal header value b'Bearer sk-…'" (-32803), or -32603.
        assert error["code"] == -32803
        assert API_KEY_ENV in error["message"] and named in error["message"]
        assert "printable ASCII" in error["message"]
        assert stub.requests == []  # nothing was sent with it
        client.request("shutdown")
        client.notify("exit")
        client.wait()
        for part in (KEY[:20], KEY[20:]):
            assert part not in error["message"] and part not in client.stderr_text()
    finally:
        client.kill()


def test_a_usable_key_passes_unchanged():
    assert usable_api_key(KEY) == KEY
    assert usable_api_key("") is None and usable_api_key(None) is None
    with pytest.raises(ModelUnavailable):
        usable_api_key("\t" + KEY)


# -- a password in chat.base_url ---------------------------------------------------------------


def with_password(url: str) -> str:
    return url.replace("http://", f"http://reader:{PASSWORD}@")


def test_a_password_in_the_base_url_stays_out_of_a_failed_replys_answer(daemon_env, stub):
    # A 429 is retried three times (at once: Retry-After 0), then the reply fails naming it.
    stub.queue(*[StubReply(status=429, body='{"error": {"message": "slow down"}}', headers={"Retry-After": "0"})] * 4)
    client = RawClient({**daemon_env, "IMPRINT_CHAT_BASE_URL": with_password(stub.base_url)})
    try:
        client.initialize()
        error = client.response(client.request("imprint/chat", {"text": "hi", "persist": False}))["error"]
        assert error["code"] == -32803 and "429" in error["message"]
        assert PASSWORD not in error["message"] and f"reader:{MARK}@" in error["message"]  # before: the password
        assert PASSWORD not in client.stderr_text()
    finally:
        client.kill()


def test_a_password_in_the_base_url_stays_out_of_a_refused_connection(daemon_env):
    client = RawClient({**daemon_env, "IMPRINT_CHAT_BASE_URL": f"http://reader:{PASSWORD}@127.0.0.1:9/v1"})
    try:
        client.initialize()
        error = client.response(client.request("imprint/chat", {"text": "hi", "persist": False}))["error"]
        assert error["code"] == -32803 and "refused" in error["message"]
        assert PASSWORD not in error["message"]
    finally:
        client.kill()


@pytest.mark.parametrize(
    "url",
    [f"http://reader:{PASSWORD}@[::1/v1", f"ftp://reader:{PASSWORD}@host/v1", f"http://reader:{PASSWORD}@h:99999"],
)
def test_a_refused_base_url_is_named_without_its_password(url):
    resolved = settings.load(environ={"IMPRINT_CHAT_BASE_URL": url})
    [error] = resolved.errors
    assert "chat.base_url" in error and PASSWORD not in error and f"reader:{MARK}@" in error


def test_a_refused_base_url_over_the_wire_shows_no_password(daemon_env):
    client = RawClient(daemon_env)
    try:
        client.initialize()
        client.notify(
            "workspace/didChangeConfiguration", {"settings": {"chat": {"base_url": f"ftp://u:{PASSWORD}@h/v1"}}}
        )
        client.request("shutdown")
        shown = []
        while (message := client.next()) is not None and "method" in message:
            shown.append(message)
        assert any("chat.base_url" in json.dumps(m) for m in shown), shown
        assert PASSWORD not in json.dumps(shown)
    finally:
        client.kill()


def test_the_kept_base_url_is_named_without_its_password():
    kept = settings.load(environ={"IMPRINT_CHAT_BASE_URL": with_password("http://127.0.0.1:8080/v1")})
    refused = kept.apply({"chat.base_url": "nope"}, "editor")
    [error] = refused.errors
    assert "keeping" in error and PASSWORD not in error
    assert PASSWORD not in settings.describe(kept)
