"""Which model a configuration means, by name, as clients show it (``initialize``'s
``capabilities.experimental.imprint`` and ``imprint/modelChanged``; protocol.md).

``model`` is the remote model's name, or the GGUF file's name (the embedded one's included);
``name`` is how to show it, the same name ``imprint/models`` gives that file
(``on_disk.display_name``: Ollama's ``model:tag``, Hugging Face's ``org/repo/file``, else the
file's name), so a picker and a status bar never name one model two ways. Light on purpose:
``initialize`` asks for it, and nothing here imports a provider, loads weights or opens a
connection (``models/factory.py`` builds the model itself).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from imprintd.models.embedded import find_embedded_model
from imprintd.models.on_disk import display_name
from imprintd.settings import ChatSettings


class ModelIdentity(msgspec.Struct, frozen=True, kw_only=True):
    provider: str
    #: The remote model's name or the GGUF file's name; "" when there is none (nothing configured
    #: for a remote provider, or no embedded model installed).
    model: str
    #: How clients show the model: the remote model's name, or ``on_disk.display_name`` of the
    #: GGUF (the name its ``imprint/models`` entry has); "" when ``model`` is.
    name: str = ""
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
        path = Path(chat.model).expanduser() if chat.model else find_embedded_model()
        model = path.name if path is not None else ""
        shown = display_name(path) if path is not None else ""
    else:
        model = shown = chat.model
    return ModelIdentity(provider=chat.provider, model=model, name=shown, n_ctx=chat.n_ctx)
