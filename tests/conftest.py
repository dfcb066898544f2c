"""Shared fixtures: an isolated data and config dir for every test, the stand-in model, and a
small workspace. Shared helpers that are not fixtures are in ``tests/helpers.py``; test modules
never import one another."""

from __future__ import annotations

import pytest

from tests.standin import StandInModel


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path, monkeypatch):
    """No test reads or writes the user's real data or config."""
    data = tmp_path / "data"
    monkeypatch.setenv("IMPRINT_DATA_DIR", str(data))
    monkeypatch.setenv("IMPRINT_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setenv("IMPRINT_CACHE_DIR", str(tmp_path / "cache"))
    for name in list(__import__("os").environ):
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
        "name: billing\nimage: shop/billing:2.3\nport: 8101\nreplicas: 2\n", encoding="utf-8")
    (root / "docs").mkdir()
    (root / "docs" / "deploy.md").write_text(
        "# Deploying\n\nThe billing service is deployed behind the gateway.\nRollouts take 5 minutes.\n",
        encoding="utf-8")
    return root
