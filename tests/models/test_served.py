"""The models an OpenAI-compatible server lists (imprintd/models/served.py, issue 34)."""

from __future__ import annotations

import socket

import pytest

from imprintd.models.base import ModelError
from imprintd.models.served import served_models


def test_the_servers_model_ids_with_the_key_in_the_header(stub, monkeypatch):
    monkeypatch.setenv("IMPRINT_CHAT_API_KEY", "sk-test")
    assert served_models(stub.base_url) == ["stub"]


def test_a_server_that_cannot_be_reached_is_named_never_the_key(monkeypatch):
    monkeypatch.setenv("IMPRINT_CHAT_API_KEY", "sk-secret")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(ModelError) as error:
        served_models(f"http://127.0.0.1:{port}/v1")
    assert f"127.0.0.1:{port}" in str(error.value) and "could not be asked" in str(error.value)
    assert "sk-secret" not in str(error.value)
