"""Fixtures for the adversarial tests; the real daemon's environment, the scripted
OpenAI-compatible server and the raw client are ``tests/conftest.py``'s, and the helpers to
watch what the daemon sends are in ``tests/e2e/rawclient.py``."""

from __future__ import annotations

import pytest


@pytest.fixture
def workspace(tmp_path):
    folder = tmp_path / "workspace"
    folder.mkdir()
    return folder
