"""Shared fixtures: an isolated data and config dir for every test, the stand-in model, a small
workspace, and for tests of the real daemon the scripted OpenAI-compatible model on loopback,
the daemon's environment and a raw JSON-RPC client. Shared helpers that are not fixtures are in
``tests/helpers.py``; test modules never import one another."""

from __future__ import annotations

import compileall
import os
from pathlib import Path

import pytest

import imprintd
from tests.e2e.rawclient import RawClient
from tests.openai_stub import OpenAIStub
from tests.standin import StandInModel


@pytest.fixture(scope="session", autouse=True)
def compiled_daemon():
    """The daemon's modules compiled once, as an installed package has them, so each of the many
    daemons the tests start reads bytecode instead of compiling every module again: with
    PYTHONDONTWRITEBYTECODE set (as on the CI machine) a source checkout is never cached."""
    compileall.compile_dir(Path(imprintd.__file__).parent, quiet=1)


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path, monkeypatch):
    """No test reads or writes the user's real data or config."""
    data = tmp_path / "data"
    monkeypatch.setenv("IMPRINT_DATA_DIR", str(data))
    monkeypatch.setenv("IMPRINT_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setenv("IMPRINT_CACHE_DIR", str(tmp_path / "cache"))
    for name in list(os.environ):
        if name.startswith("IMPRINT_CHAT_"):
            monkeypatch.delenv(name)
    return data


@pytest.fixture
def model() -> StandInModel:
    return StandInModel()


@pytest.fixture
def workspace(tmp_path):
    """A small shop workspace: a billing service on port 8101 and a deploy doc."""
    root = tmp_path / "shop"
    (root / "services").mkdir(parents=True)
    (root / "services" / "billing.yaml").write_text(
        "name: billing\nimage: shop/billing:2.3\nport: 8101\nreplicas: 2\n", encoding="utf-8"
    )
    (root / "docs").mkdir()
    (root / "docs" / "deploy.md").write_text(
        "# Deploying\n\nThe billing service is deployed behind the gateway.\nRollouts take 5 minutes.\n",
        encoding="utf-8",
    )
    return root


@pytest.fixture
def stub():
    with OpenAIStub() as server:
        yield server


@pytest.fixture
def daemon_env(tmp_path, stub) -> dict[str, str]:
    """Environment for a daemon answering through the scripted model, with its own data dir."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("IMPRINT_")}
    env.update(
        {
            "IMPRINT_DATA_DIR": str(tmp_path / "data"),
            "IMPRINT_CONFIG": str(tmp_path / "config.toml"),
            "IMPRINT_CACHE_DIR": str(tmp_path / "cache"),
            "IMPRINT_CHAT_PROVIDER": "openai",
            "IMPRINT_CHAT_BASE_URL": stub.base_url,
            "IMPRINT_CHAT_MODEL": "stub",
            "IMPRINT_CHAT_N_CTX": "8192",
            # On for users; off here, where tests script the model's rounds one by one. The
            # first look's own tests turn it on.
            "IMPRINT_CHAT_FIRST_LOOK": "false",
        }
    )
    return env


@pytest.fixture
def raw(daemon_env):
    client = RawClient(daemon_env)
    yield client
    client.kill()
