"""Fixtures for end-to-end tests: a scripted OpenAI-compatible model and daemon environments."""

from __future__ import annotations

import os

import pytest

from tests.e2e.rawclient import RawClient
from tests.openai_stub import OpenAIStub


@pytest.fixture
def stub():
    with OpenAIStub() as server:
        yield server


@pytest.fixture
def daemon_env(tmp_path, stub) -> dict[str, str]:
    """Environment for a daemon answering through the scripted model, with its own data dir."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("IMPRINT_")}
    env.update({
        "IMPRINT_DATA_DIR": str(tmp_path / "data"),
        "IMPRINT_CONFIG": str(tmp_path / "config.toml"),
        "IMPRINT_CHAT_PROVIDER": "openai",
        "IMPRINT_CHAT_BASE_URL": stub.base_url,
        "IMPRINT_CHAT_MODEL": "stub",
        "IMPRINT_CHAT_N_CTX": "8192",
    })
    return env


@pytest.fixture
def raw(daemon_env):
    client = RawClient(daemon_env)
    yield client
    client.kill()
