"""Fixtures for end-to-end tests: an LSP client of the real daemon under each editor's captured
capabilities (the scripted model and the daemon's environment are in ``tests/conftest.py``)."""

from __future__ import annotations

import sys

import pytest_asyncio
from lsprotocol import types
from pytest_lsp import ClientServerConfig, client_capabilities

from imprintd import protocol as wire

CLIENTS = ["neovim", "visual-studio-code"]


@pytest_asyncio.fixture(params=CLIENTS)
async def client(request, daemon_env, tmp_path):
    """A pytest-lsp client, initialized with captured Neovim or VS Code capabilities."""
    config = ClientServerConfig(
        server_command=[sys.executable, "-m", "imprintd", "serve", "--stdio"], server_env=daemon_env
    )
    lsp = await config.start()
    lsp.notifications = []
    for method in wire.NOTIFICATIONS:
        lsp.feature(method)(lambda params, method=method: lsp.notifications.append((method, params)))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    await lsp.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities(request.param),
            workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name="workspace")],
        )
    )
    yield lsp
    await lsp.shutdown_session()
    await lsp.stop()
