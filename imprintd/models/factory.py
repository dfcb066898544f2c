"""Which model a configuration means: ``create_model`` builds it, ``describe_model`` says it.

* ``chat.provider = "local"`` with ``chat.model`` a GGUF path: that file through llama.cpp.
* ``chat.provider = "local"`` with ``chat.model`` empty: the embedded SmolLM2 GGUF.
* A local model keeps per-session state within ``chat.state_cache_memory`` bytes and, in
  ``model-states/`` under the cache dir, ``chat.state_cache_disk`` bytes.
* ``chat.provider = "openai"``: the OpenAI-compatible server at ``chat.base_url`` serving
  ``chat.model``, with the API key from ``IMPRINT_CHAT_API_KEY``.

Nothing here loads weights or opens a connection: a local model loads on first use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from imprintd.models.base import Model, ModelUnavailable
from imprintd.models.embedded import EMBEDDED_NAME, embedded_model_path
from imprintd.models.local import LocalModel, check_gguf
from imprintd.models.state_cache import states_folder
from imprintd.settings import ChatSettings, cache_dir

if TYPE_CHECKING:  # imported where used: httpx loads only for provider openai
    from imprintd.models.remote import RemoteModel


def create_model(chat: ChatSettings, environ: Mapping[str, str] | None = None) -> Model:
    """The model ``chat`` configures.

    Raises ``ModelUnavailable`` when no model can be built from it: no model configured and the
    embedded one not installed (the message says how to get one), or provider ``openai`` without
    ``chat.model``. A configured GGUF path is checked on first use, not here.
    """
    environ = os.environ if environ is None else environ
    if chat.provider == "openai":
        from imprintd.models.remote import API_KEY_ENV, RemoteModel  # loads httpx: only for a remote provider

        if not chat.model:
            raise ModelUnavailable(
                "chat.provider is openai but chat.model is empty: "
                "set chat.model to the model name the server at chat.base_url serves"
            )
        return RemoteModel(
            chat.base_url,
            chat.model,
            n_ctx=chat.n_ctx,
            api_key=environ.get(API_KEY_ENV) or None,
            parallel=chat.remote_parallel,
        )
    if chat.provider != "local":
        raise ModelUnavailable(f'chat.provider {chat.provider!r} is not known: use "local" or "openai"')
    path, name = (Path(chat.model), None) if chat.model else (embedded_model_path(), EMBEDDED_NAME)
    return LocalModel(
        path,
        n_ctx=chat.n_ctx,
        name=name,
        state_cache_memory=chat.state_cache_memory,
        state_cache_disk=chat.state_cache_disk,
        state_folder=states_folder(cache_dir()),
        reasoning=chat.reasoning,
    )


def _served_window(model: RemoteModel) -> str:
    """The window in use and where it comes from, the server asked now (a few seconds at most)."""

    async def ask() -> None:
        try:
            await model.learn_window()
        finally:
            await model.aclose_connections()

    anyio.run(ask)
    server = model.server_n_ctx
    if model.window_source != "chat.n_ctx":
        return f"n_ctx {model.n_ctx} from the server ({model.window_source}; chat.n_ctx {model.configured_n_ctx})"
    if server is not None:
        return f"n_ctx {model.n_ctx} (chat.n_ctx; the server's window is {server})"
    return f"n_ctx {model.n_ctx} (chat.n_ctx; the server does not say its window)"


def describe_model(chat: ChatSettings, environ: Mapping[str, str] | None = None) -> str:
    """One line for ``imprintd config``: the model in use, or what is wrong. Loads nothing; a
    served model's server is asked for its window (``server_window.probe``, short)."""
    from imprintd.models.api_key import API_KEY_ENV
    from imprintd.models.remote import RemoteModel

    environ = os.environ if environ is None else environ
    try:
        model = create_model(chat, environ)
    except ModelUnavailable as error:
        return f"unavailable: {error}"
    if isinstance(model, RemoteModel):
        key = "with an API key" if environ.get(API_KEY_ENV) else f"without an API key ({API_KEY_ENV} unset)"
        return f"remote {model.model!r} at {model.shown_url} (OpenAI-compatible, {key}; {_served_window(model)})"
    assert isinstance(model, LocalModel)
    try:
        check_gguf(model.model_path)
    except ModelUnavailable as error:
        return f"unavailable: {error}"
    if not chat.model:
        return f"embedded {EMBEDDED_NAME} ({model.model_path}; n_ctx {chat.n_ctx})"
    return f"local GGUF {model.model_path} (n_ctx {chat.n_ctx})"
