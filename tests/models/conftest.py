"""Fixtures for the model tests: the embedded GGUF and one loaded local model. Whether the real
model is installed, and the marker for tests that need it, are in ``tests/models/real_model.py``."""

from __future__ import annotations

import pytest

from tests.models.real_model import EMBEDDED_GGUF, MISSING, missing_real_model


@pytest.fixture
def _real_model_or_fail() -> None:
    """What ``needs_real_model`` uses in CI when the real model is missing."""
    pytest.fail(f"a real-model test cannot run in CI: {MISSING}", pytrace=False)


@pytest.fixture(scope="session")
def embedded_gguf():
    if MISSING:
        missing_real_model()
    return EMBEDDED_GGUF


@pytest.fixture(scope="session")
def local_model(embedded_gguf):
    """One loaded SmolLM2 for the session (small context, greedy)."""
    from imprintd.models.local import LocalModel

    model = LocalModel(embedded_gguf, n_ctx=2048)
    model.load()
    return model
