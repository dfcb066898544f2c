"""Paths that are not paths, at the LSP-framed front door: an ``imprint/chat`` ``workspace``,
and an ``initialize`` ``rootUri`` or ``workspaceFolders`` entry, that is too long for the
system, holds a NUL, is a symbolic link loop or does not parse. A chat's is -32602 naming
``workspace``; the editor's is reported once (``window/showMessage``) and ignored, so later
chats work. And a question longer than a reply can read is refused before it is stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.rawclient import RawClient, show_messages_until_response

LONG = "/" + "a" * 5000  # past PATH_MAX: ENAMETOOLONG


def bad_folder(tmp_path: Path, kind: str) -> tuple[str, str]:
    """(the folder, a word its refusal must say)."""
    if kind == "too long":
        return LONG, "too long"
    if kind == "NUL":
        return f"{tmp_path}/a\x00b", "NUL"
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    return str(loop), "symbolic link loop"


def sessions(raw: RawClient) -> list[dict]:
    return raw.response(raw.request("imprint/sessions", {}))["result"]["sessions"]


KINDS = ["too long", "NUL", "symlink loop"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_chat_workspace_that_is_not_a_path_is_32602_naming_it_and_stores_nothing(raw, stub, tmp_path, kind):
    folder, named = bad_folder(tmp_path, kind)
    raw.initialize()
    error = raw.response(raw.request("imprint/chat", {"text": "Which port?", "workspace": folder}))["error"]
    assert error["code"] == -32602, error
    assert error["message"].startswith("workspace:") and named in error["message"], error
    assert len(error["message"]) < 400  # the 5,000 characters are not echoed back
    assert sessions(raw) == [] and stub.requests == []
    assert "Traceback" not in raw.stderr_text()


URIS = {
    "too long": "file://" + LONG,
    "NUL": "file:///tmp/a%00b",
    "unparsable": "file://[::1/ws",
    "not a file URI": "https://example.com/ws",
}


@pytest.mark.parametrize("field", ["rootUri", "workspaceFolders"])
@pytest.mark.parametrize("kind", [*KINDS, "unparsable", "not a file URI"])
def test_a_bad_editor_folder_is_reported_once_and_later_chats_work(raw, stub, tmp_path, workspace, kind, field):
    uri = Path(bad_folder(tmp_path, kind)[0]).as_uri() if kind == "symlink loop" else URIS[kind]
    params = {"rootUri": uri} if field == "rootUri" else {"workspaceFolders": [{"uri": uri, "name": "ws"}]}
    request_id = raw.request("initialize", {"processId": None, "capabilities": {}, **params})
    shown, answer = show_messages_until_response(raw, request_id)
    assert "result" in answer, answer
    [warning] = shown
    assert f"initialize {field}" in warning and "ignores it" in warning and len(warning) < 500, warning
    raw.notify("initialized", {})
    for question in ("Which port?", "And the other one?"):
        stub.queue("It is 8101.")
        shown, answer = show_messages_until_response(raw, raw.request("imprint/chat", {"text": question}))
        assert answer["result"]["text"] == "It is 8101.", answer
        assert shown == []  # reported once, not on every chat
    stub.queue("Found it.")
    answer = raw.response(raw.request("imprint/chat", {"text": "Look", "workspace": str(workspace)}))
    assert answer["result"]["text"] == "Found it."
    assert "Traceback" not in raw.stderr_text()


def test_a_question_longer_than_a_reply_can_read_is_refused_before_it_is_stored(raw, stub):
    raw.initialize()
    error = raw.response(raw.request("imprint/chat", {"text": "x" * 1_000_001}))["error"]
    assert error["code"] == -32602 and error["message"].startswith("text:"), error
    assert "1,000,001 characters" in error["message"] and "1,000,000" in error["message"]
    assert sessions(raw) == [] and stub.requests == []
