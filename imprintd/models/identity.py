"""Which model a configuration means, by name, as clients show it (``initialize``'s
``capabilities.experimental.imprint`` and ``imprint/modelChanged``; protocol.md).

The remote model's name, or the GGUF file's name (the embedded one's included). Light on
purpose: ``initialize`` asks for it, and nothing here imports a provider, loads weights or
opens a connection (``models/factory.py`` builds the model itself).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from imprintd.models.embedded import find_embedded_model
from imprintd.settings import ChatSettings


class ModelIdentity(msgspec.Struct, frozen=True, kw_only=True):
    provider: str
    #: The remote model's name or the GGUF file's name; "" when there is none (nothing configured
    #: for a remote provider, or no embedded model installed).
    model: str
    n_ctx: int
    #: Where ``n_ctx`` comes from, and the server's own window (``Chat.model_identity`` fills them
    #: in from a served model once its server said or showed it).
    n_ctx_source: str = "chat.n_ctx"
    server_n_ctx: int | None = None
    #: The model's chat format (``Model.chat_format``) and whether it reasons (``Model.reasons``),
    #: filled in by ``Chat.model_identity`` from the model built for these settings; None while
    #: it cannot be told (nothing configured, a GGUF that is missing or unreadable).
    chat_format: str | None = None
    reasons: bool = False


def identify_model(chat: ChatSettings) -> ModelIdentity:
    if chat.provider == "local":
        path = Path(chat.model) if chat.model else find_embedded_model()
        name = path.name if path is not None else ""
    else:
        name = chat.model
    return ModelIdentity(provider=chat.provider, model=name, n_ctx=chat.n_ctx)
