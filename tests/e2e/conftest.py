"""Fixtures for end-to-end tests: a scripted OpenAI-compatible model and daemon environments."""

from __future__ import annotations

import os
import sys

import pytest
import pytest_asyncio
from lsprotocol import types
from pytest_lsp import ClientServerConfig, client_capabilities

from imprintd import protocol as wire

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
        "IMPRINT_CACHE_DIR": str(tmp_path / "cache"),
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


CLIENTS = ["neovim", "visual-studio-code"]


@pytest_asyncio.fixture(params=CLIENTS)
async def client(request, daemon_env, tmp_path):
    """A pytest-lsp client, initialized with captured Neovim or VS Code capabilities."""
    config = ClientServerConfig(server_command=[sys.executable, "-m", "imprintd", "serve", "--stdio"],
                                server_env=daemon_env)
    lsp = await config.start()
    lsp.notifications = []
    for method in wire.NOTIFICATIONS:
        lsp.feature(method)(lambda params, method=method: lsp.notifications.append((method, params)))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    await lsp.initialize_session(types.InitializeParams(
        capabilities=client_capabilities(request.param),
        workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name="workspace")],
    ))
    yield lsp
    await lsp.shutdown_session()
    await lsp.stop()
