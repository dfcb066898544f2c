"""Shared fixtures: an isolated data and config dir for every test, and the stand-in model."""

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
