"""Fixtures for the adversarial tests: the end-to-end ones (a real daemon over stdio, the
scripted OpenAI-compatible server on loopback) plus helpers to watch what the daemon sends."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import daemon_env, raw, stub  # noqa: F401 (fixtures)
from tests.e2e.rawclient import RawClient


def next_matching(client: RawClient, predicate, limit: int = 200) -> dict:
    """The next message the daemon sends that ``predicate`` accepts (others are passed over)."""
    for _ in range(limit):
        message = client.next()
        assert message is not None, f"the daemon closed its output; stderr:\n{client.stderr_text()}"
        if predicate(message):
            return message
    raise AssertionError(f"no matching message among the next {limit}")


def show_messages_until_response(client: RawClient, request_id: int) -> tuple[list[str], dict]:
    """``window/showMessage`` texts sent before the response to ``request_id``, and the response."""
    shown = []
    while True:
        message = client.next()
        assert message is not None, f"the daemon closed its output; stderr:\n{client.stderr_text()}"
        if message.get("method") == "window/showMessage":
            shown.append(message["params"]["message"])
        elif "method" not in message and message.get("id") == request_id:
            return shown, message


@pytest.fixture
def workspace(tmp_path):
    folder = tmp_path / "workspace"
    folder.mkdir()
    return folder
