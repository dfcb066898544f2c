"""GGUF chat models already on this machine (``imprint/models``, ``imprintd models``; issue 34).

People keep models where their other tools put them. This finds ``.gguf`` files in:

- ``chat.models_dir`` (a folder the user names; searched first, to any depth);
- LM Studio's models folder (``~/.lmstudio/models``, older ``~/.cache/lm-studio/models``);
- the Hugging Face hub cache's snapshots (``$HF_HUB_CACHE``, ``$HF_HOME/hub``, else
  ``~/.cache/huggingface/hub``: ``models--org--name/snapshots/<rev>/*.gguf``);
- Ollama's blobs, named through its manifests (``$OLLAMA_MODELS``, else ``~/.ollama/models``:
  ``manifests/<registry>/<namespace>/<model>/<tag>`` names the blob of the model layer);
- llama.cpp's download cache (``$LLAMA_CACHE``, else ``~/.cache/llama.cpp``).

Each file is described from its GGUF header only (the metadata before the tensors; nothing is
loaded): name, architecture, size, quantization, trained context length, and whether it has a
chat template and which family that template is. A file that is not a chat model (no chat
template, an embedding architecture, not a GGUF at all) is listed with the reason and
``chat: false``, so an editor can show it without offering it.
"""

from __future__ import annotations

import io
import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

#: A header is read up to this many bytes (tokenizer vocabularies included); past it, the file is
#: described from what was read.
HEADER_LIMIT = 64 << 20
#: At most this many files are described in one listing, and a folder is walked this deep.
FILE_LIMIT = 500
DEPTH_LIMIT = 6

#: llama.cpp's ``general.file_type`` numbers (``LLAMA_FTYPE_*``).
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
}  # fmt: skip
#: Architectures that embed or rerank rather than chat.
EMBEDDING_ARCHITECTURES = frozenset({"bert", "nomic-bert", "jina-bert-v2", "t5encoder", "xlm-roberta", "modern-bert"})
#: A chat template's family, by a marker it writes.
TEMPLATE_FAMILIES = (
    ("<|im_start|>", "chatml"),
    ("<|start_header_id|>", "llama-3"),
    ("<start_of_turn>", "gemma"),
    ("[INST]", "mistral"),
    ("<|user|>", "phi"),
    ("<｜User｜>", "deepseek"),
)


class NotGguf(ValueError):
    """The file is not a GGUF this reader understands; the message says why."""


@dataclass(frozen=True)
class FoundModel:
    name: str
    path: str
    #: Where it was found: ``models_dir``, ``lm-studio``, ``huggingface``, ``ollama``, ``llama.cpp``.
    source: str
    size: int
    architecture: str | None
    quantization: str | None
    context_length: int | None
    has_chat_template: bool
    #: The chat template's family (``chatml``, ``llama-3``, …, ``other``); None without a template.
    chat_format: str | None
    chat: bool
    #: Why it is not offered as a chat model; "" when it is.
    reason: str = ""


# --- the header ---------------------------------------------------------------------------

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def read_metadata(path: Path, limit: int = HEADER_LIMIT) -> dict[str, Any]:
    """The GGUF's metadata keys and values (arrays as their length only, to stay small). NotGguf."""
    with path.open("rb") as raw:
        stream = io.BufferedReader(raw, buffer_size=1 << 20)
        reader = _Reader(stream, limit)
        if reader.take(4) != b"GGUF":
            raise NotGguf("not a GGUF file (it does not start with GGUF)")
        version = reader.unpack("<I")
        if version not in (2, 3):
            raise NotGguf(f"GGUF version {version}; this reader knows versions 2 and 3")
        reader.unpack("<Q")  # tensors
        count = reader.unpack("<Q")
        metadata: dict[str, Any] = {}
        for _ in range(count):
            key = reader.string()
            kind = reader.unpack("<I")
            metadata[key] = reader.value(kind)
        return metadata


class _Reader:
    def __init__(self, stream: BinaryIO, limit: int) -> None:
        self._stream, self._left = stream, limit

    def take(self, size: int) -> bytes:
        if size > self._left:
            raise NotGguf(f"the header is longer than {HEADER_LIMIT >> 20} MiB, or damaged")
        data = self._stream.read(size)
        if len(data) < size:
            raise NotGguf("the file ends inside its header")
        self._left -= size
        return data

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.take(self.unpack("<Q")).decode("utf-8", "replace")

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.unpack("<I"), self.unpack("<Q")
            if item in _SCALARS:
                self.take(struct.calcsize(_SCALARS[item]) * count)
            else:
                for _ in range(count):
                    self.value(item)
            return [count]  # the length only: vocabularies are not needed here
        raise NotGguf(f"an unknown metadata type {kind}")


def describe(path: Path, source: str, name: str | None = None) -> FoundModel:
    """``path`` described from its header (or as not a chat model, with the reason)."""
    size = path.stat().st_size
    try:
        meta = read_metadata(path)
    except (NotGguf, OSError) as error:
        reason = str(error) if isinstance(error, NotGguf) else f"cannot be read: {error.strerror or error}"
        return FoundModel(name or path.stem, str(path), source, size, None, None, None, False, None, False, reason)
    architecture = meta.get("general.architecture")
    found = meta.get("tokenizer.chat_template")
    template = found if isinstance(found, str) else ""
    has_template = bool(template.strip())
    family = next((fam for marker, fam in TEMPLATE_FAMILIES if marker in template), "other") if has_template else None
    length = meta.get(f"{architecture}.context_length") if architecture else None
    quantization = FILE_TYPES.get(meta.get("general.file_type", -1)) or _quantization_in(path.name)
    reason = ""
    if architecture in EMBEDDING_ARCHITECTURES:
        reason = f"an embedding model ({architecture}), not a chat model"
    elif not has_template:
        reason = "no chat template in the file: a base model or not a chat model"
    return FoundModel(
        name=name or str(meta.get("general.name") or path.stem),
        path=str(path),
        source=source,
        size=size,
        architecture=architecture,
        quantization=quantization,
        context_length=length if isinstance(length, int) else None,
        has_chat_template=has_template,
        chat_format=family,
        chat=not reason,
        reason=reason,
    )


def _quantization_in(file_name: str) -> str | None:
    upper = file_name.upper()
    return next((q for q in sorted(FILE_TYPES.values(), key=len, reverse=True) if q in upper), None)


# --- where models are kept -------------------------------------------------------------------


def places(models_dir: str = "", env: dict[str, str] | None = None, home: Path | None = None) -> list[tuple[str, Path]]:
    """Where to look, in order: ``(source, folder)``, existing folders only."""
    env = dict(os.environ) if env is None else env
    home = Path.home() if home is None else home
    hub = env.get("HF_HUB_CACHE") or (str(Path(env["HF_HOME"]) / "hub") if env.get("HF_HOME") else "")
    candidates = [
        ("models_dir", Path(models_dir).expanduser() if models_dir else None),
        ("lm-studio", home / ".lmstudio" / "models"),
        ("lm-studio", home / ".cache" / "lm-studio" / "models"),
        ("huggingface", Path(hub) if hub else home / ".cache" / "huggingface" / "hub"),
        ("ollama", Path(env["OLLAMA_MODELS"]) if env.get("OLLAMA_MODELS") else home / ".ollama" / "models"),
        ("llama.cpp", Path(env["LLAMA_CACHE"]) if env.get("LLAMA_CACHE") else home / ".cache" / "llama.cpp"),
    ]
    return [(source, folder) for source, folder in candidates if folder is not None and folder.is_dir()]


def find_models(models_dir: str = "", env: dict[str, str] | None = None, home: Path | None = None) -> list[FoundModel]:
    """Every GGUF found where ``places`` says, described from its header; chat models first, by name."""
    found: list[FoundModel] = []
    seen: set[Path] = set()
    for source, folder in places(models_dir, env, home):
        for path, name in _files(source, folder):
            real = path.resolve()
            if real in seen or len(found) >= FILE_LIMIT:
                continue
            seen.add(real)
            found.append(describe(path, source, name))
    return sorted(found, key=lambda m: (not m.chat, m.name.lower(), m.path))


def _files(source: str, folder: Path) -> Iterator[tuple[Path, str | None]]:
    if source == "ollama":
        yield from _ollama(folder)
    elif source == "huggingface":
        for snapshot in sorted(folder.glob("models--*/snapshots/*")):
            repo = snapshot.parent.parent.name.removeprefix("models--").replace("--", "/")
            for path in sorted(snapshot.rglob("*.gguf")):
                yield path, f"{repo}/{path.name}"
    else:
        yield from ((path, None) for path in _walk(folder, 0))


def _walk(folder: Path, depth: int) -> Iterator[Path]:
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.is_dir() and depth < DEPTH_LIMIT:
            yield from _walk(entry, depth + 1)
        elif entry.suffix.lower() == ".gguf" and entry.is_file() and "mmproj" not in entry.name.lower():
            yield entry


_OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"


def _ollama(folder: Path) -> Iterator[tuple[Path, str | None]]:
    """Ollama's model blobs, named ``model:tag`` (``namespace/model:tag`` outside ``library``)."""
    manifests = folder / "manifests"
    for manifest in sorted(p for p in manifests.rglob("*") if p.is_file()):
        parts = manifest.relative_to(manifests).parts
        if len(parts) != 4:
            continue
        _, namespace, model, tag = parts
        try:
            layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers", [])
        except (OSError, ValueError, AttributeError):
            continue
        for layer in layers:
            if isinstance(layer, dict) and layer.get("mediaType") == _OLLAMA_MODEL_LAYER:
                blob = folder / "blobs" / str(layer.get("digest", "")).replace(":", "-")
                if blob.is_file():
                    name = f"{model}:{tag}" if namespace == "library" else f"{namespace}/{model}:{tag}"
                    yield blob, name
