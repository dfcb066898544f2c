"""A flaky model server, a key it echoes, and
secrets redacted whole."""

from __future__ import annotations

import json
import logging

import pytest

from imprintd import cli, settings
from imprintd.models import remote
from imprintd.models.base import ModelError
from imprintd.redact import MARK, redact
from tests.e2e.rawclient import RawClient
from tests.openai_stub import RETRY_AT_ONCE, StubReply

KEY = "sk-test-1f2e3d4c5b6a7988abcdef0123456789"

# -- every malformed stream chunk is a named ModelError ------------------------------

MALFORMED_CHUNKS = [
    ('{"choices":"nope"}', "choices"),
    ('{"choices":[5]}', "choices[0]"),
    ('{"choices":[{"delta":"x"}]}', "choices[0].delta"),
    ('{"choices":[{"delta":{"content":5}}]}', "choices[0].delta.content"),
    ('{"choices":[{"delta":{"tool_calls":"x"}}]}', "choices[0].delta.tool_calls"),
    ('{"choices":[{"delta":{"tool_calls":[{"function":"f"}]}}]}', "function"),
    ('{"choices":[{"delta":{"tool_calls":[{"index":"0"}]}}]}', "index"),
    ('{"choices":[{"index":"0","delta":{}}]}', "index"),
    ('{"choices":[{"finish_reason":7}]}', "finish_reason"),
    ('{"choices":[{"delta":{"content":"a\\udc80"}}]}', "lone surrogate"),
    ("[1, 2]", "unexpected stream chunk"),
    ('"text"', "unexpected stream chunk"),
    ("{nope", "not JSON"),
    ("[" * 5000 + "]" * 5000, "not JSON"),
]


@pytest.mark.parametrize(("data", "named"), MALFORMED_CHUNKS)
def test_a_malformed_chunk_is_a_model_error_naming_the_cause(data, named):
    with pytest.raises(ModelError) as error:
        remote.parse_chunk(data)  # the one parser of stream payloads
    assert named in str(error.value)


def test_well_formed_variants_still_parse():
    for data in (
        '{"choices":[]}',
        '{"choices":null,"usage":{"prompt_tokens":3}}',
        '{"id":"x"}',
        '{"choices":[{"delta":{"content":null,"tool_calls":null},"finish_reason":null}]}',
        '{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":{"q":1}}}]}}]}',
        '{"choices":[{"delta":{"content":"\\ud83d\\ude00"}}],"usage":"n/a"}',
    ):
        remote.parse_chunk(data)


@pytest.mark.parametrize("data", ['{"choices":"nope"}', '{"choices":[{"delta":{"content":["x"]}}]}'])
def test_a_malformed_chunk_mid_reply_answers_32803_and_stores_no_reply(raw, stub, data):
    ok = json.dumps({"choices": [{"index": 0, "delta": {"content": "Half"}}]})
    stub.queue(StubReply(raw_events=[ok, data, "[DONE]"]))
    raw.initialize()
    error = raw.response(raw.request("imprint/chat", {"text": "Which port?"}))["error"]
    assert error["code"] == -32803 and "malformed stream chunk" in error["message"], error
    [session] = raw.response(raw.request("imprint/sessions", {}))["result"]["sessions"]
    assert session["messageCount"] == 1  # the question stays; no half reply was stored


# -- the API key echoed by the server is masked --------------------------------------


def test_a_401_body_echoing_the_key_reaches_neither_client_nor_log(daemon_env, stub):
    echo = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}. Check it."}})
    stub.queue(StubReply(status=401, body=echo))
    client = RawClient({**daemon_env, "IMPRINT_CHAT_API_KEY": KEY})
    try:
        client.initialize()
        error = client.response(client.request("imprint/chat", {"text": "hi", "persist": False}))["error"]
        assert stub.headers[0]["Authorization"] == f"Bearer {KEY}"  # the key was really sent
        assert error["code"] == -32803 and "401" in error["message"]
        assert KEY not in error["message"] and f"provided: {MARK}" in error["message"]
        client.request("shutdown")
        client.notify("exit")
        assert client.wait() == 0
        log = client.stderr_text()
        assert "401" in log and KEY not in log
    finally:
        client.kill()


@pytest.mark.parametrize("cuts", [[], [3], [3, 10, 11], list(range(1, 60))])
def test_the_key_written_into_the_reply_is_masked_even_split_across_pieces(cuts):
    text = f"Your key is {KEY}, and {KEY[:6]} is only its start. sk"
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    masker = remote._SecretMask(KEY)
    out = "".join(masker.feed(piece) for piece in pieces) + masker.finish()
    assert out == f"Your key is {MARK}, and {KEY[:6]} is only its start. sk"


def test_the_key_echoed_in_a_streamed_reply_or_tool_call_reaches_neither_client_nor_store(daemon_env, stub, workspace):
    def chunk(delta):
        return json.dumps({"choices": [{"index": 0, "delta": delta}]})

    call = {"index": 0, "id": "c1", "function": {"name": "search", "arguments": json.dumps({"query": KEY})}}
    stub.queue(
        StubReply(
            raw_events=[
                chunk({"tool_calls": [call]}),
                json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
                "[DONE]",
            ]
        ),
        StubReply(
            raw_events=[chunk({"content": "The key is " + KEY[:9]}), chunk({"content": KEY[9:] + "."}), "[DONE]"]
        ),
    )
    client = RawClient({**daemon_env, "IMPRINT_CHAT_API_KEY": KEY})
    try:
        client.initialize()
        request_id = client.request("imprint/chat", {"text": "hi", "workspace": str(workspace)})
        seen = []
        while (message := client.next()) is not None:
            seen.append(message)
            if message.get("id") == request_id:
                break
        assert seen[-1]["result"]["text"] == f"The key is {MARK}."
        session = client.response(client.request("imprint/session", {"sessionId": seen[-1]["result"]["sessionId"]}))
        wire = json.dumps(seen, ensure_ascii=False) + json.dumps(session, ensure_ascii=False)
        assert KEY not in wire and KEY not in client.stderr_text()
        assert f"“{MARK}”" in wire  # the tool step's title, with the query masked
        assert stub.requests[1]["messages"][-2]["tool_calls"][0]["function"]["arguments"] == json.dumps({"query": MARK})
    finally:
        client.kill()


def test_the_log_filter_masks_the_key_in_messages_arguments_and_tracebacks():
    from imprintd.redact import MaskSecrets

    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "sent %s", (KEY,), None)
    try:
        raise RuntimeError(f"boom {KEY}")
    except RuntimeError as error:
        record.exc_info = (type(error), error, error.__traceback__)
    MaskSecrets([KEY]).filter(record)
    text = logging.Formatter().format(record)
    assert KEY not in text and text.count(MARK) == 2


def test_the_log_filter_masks_a_password_in_a_url():
    from imprintd.redact import MaskSecrets

    record = logging.LogRecord("x", logging.INFO, __file__, 1, "openai:%s#m", ("https://u:hunter2@h/v1",), None)
    MaskSecrets([]).filter(record)
    assert record.getMessage() == f"openai:https://u:{MARK}@h/v1#m"


def test_the_cli_masks_the_key_named_by_the_remote_provider():
    assert getattr(cli, "API_KEY_ENV", None) == remote.API_KEY_ENV


# -- a URL httpx cannot parse is refused as a setting -------------------------------


@pytest.mark.parametrize(
    "url", ["http://[::1", "http://", "https://exa mple.com/v1", "http://h:99999/v1", "ftp://h/v1", "localhost:8080"]
)
def test_a_base_url_that_cannot_be_used_is_refused_naming_key_and_value(url):
    resolved = settings.load(environ={"IMPRINT_CHAT_BASE_URL": url})
    assert resolved.settings.chat.base_url == settings.DEFAULTS.chat.base_url
    [error] = resolved.errors
    assert "chat.base_url" in error and repr(url) in error


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/v1", "https://api.openai.com/v1", "http://[::1]:8000/v1"])
def test_usable_base_urls_are_accepted(url):
    assert settings.load(environ={"IMPRINT_CHAT_BASE_URL": url}).settings.chat.base_url == url


@pytest.mark.parametrize("values", [5, "x", [1], True])
def test_settings_that_are_not_an_object_are_refused_as_a_whole(values):
    resolved = settings.Resolved(settings.DEFAULTS, {}).apply(values, "editor")
    assert resolved.settings == settings.DEFAULTS
    [error] = resolved.errors
    assert "settings from editor must be an object" in error and repr(values) in error


# -- a secret value is redacted whole ------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PASSWORD: Tr0ub4dor&3x", f"PASSWORD: {MARK}"),
        ("password: Tr0ub4dor&3x and more", f"password: {MARK} and more"),
        ("DB_PASS=hunter2&x", f"DB_PASS={MARK}"),
        ("export SMTP_PASS='s3 cr3t'", f"export SMTP_PASS='{MARK}'"),
        ("db_pass: s3cret", f"db_pass: {MARK}"),
        ("dbPass = 'x&y'", f"dbPass = '{MARK}'"),
        ("AWS_SECRET=abc&def", f"AWS_SECRET={MARK}"),
        ("CLIENT_SECRET: a&b", f"CLIENT_SECRET: {MARK}"),
        ("GITHUB_TOKEN=gh0&1", f"GITHUB_TOKEN={MARK}"),
        ('{"api_token": "a&b"}', f'{{"api_token": "{MARK}"}}'),
        ("https://h/cb?token=abc&user=me", f"https://h/cb?token={MARK}&user=me"),
    ],
)
def test_secret_values_are_redacted_whole(text, expected):
    assert redact(text) == expected
    assert redact(expected) == expected


@pytest.mark.parametrize(
    "text",
    ["compass=north", "bypass=1", "passport: 12", "the pass rate is 5", "max_tokens = 1024", "password policy: strict"],
)
def test_names_that_only_contain_pass_are_not_secrets(text):
    assert redact(text) == text


# -- a model error body holding '%' is still answered --------------------------


def test_a_model_error_body_with_a_percent_sign_is_answered(raw, stub):
    quota = StubReply(
        status=429, body='{"error": {"message": "You have used 100% of your quota (%d left)"}}', headers=RETRY_AT_ONCE
    )
    stub.queue(*[quota] * 4)  # the first try and its three retries, each at once (not the 1+2+4 s backoff)
    raw.initialize()
    request_id = raw.request("imprint/chat", {"text": "Which port?", "persist": False})
    error = raw.response(request_id)["error"]  # before the fix: never answered
    assert error["code"] == -32803 and "429" in error["message"]
    assert "Traceback" not in raw.stderr_text() and "--- Logging error ---" not in raw.stderr_text()
