"""GGUF chat models already on this machine (``imprint/models``, ``imprintd models``, the ACP picker).

People keep models where their other tools put them. This finds ``.gguf`` files in:

- ``chat.models_dir`` (a folder the user names; searched first, to any depth);
- LM Studio's models folder (``~/.lmstudio/models``, older ``~/.cache/lm-studio/models``);
- the Hugging Face hub cache's snapshots (``$HF_HUB_CACHE``, ``$HF_HOME/hub``, else
  ``~/.cache/huggingface/hub``: ``models--org--name/snapshots/<rev>/*.gguf``);
- Ollama's blobs, named through its manifests (``$OLLAMA_MODELS``, else ``~/.ollama/models``:
  ``manifests/<registry>/<namespace>/<model>/<tag>`` names the blob of the model layer);
- llama.cpp's download cache (``$LLAMA_CACHE``, else ``~/.cache/llama.cpp``).

Each file is described from its GGUF header only (the metadata before the tensors; nothing is
loaded): architecture, size, quantization, trained context length, and whether it has a chat
template and the chat format that template writes (``templates.template_format``: the name the
model reports once in use, so the two never disagree). A file that is not a chat model (no chat template,
an embedding architecture, not a GGUF at all, a damaged header, a broken link, not a regular
file) is listed with the reason and ``chat: false``, so an editor can show it without offering it.

A model's ``name`` is the one ``display_name`` gives its path, which is also the name the model
in use goes by (``models.identity``): Ollama's ``model:tag``, Hugging Face's ``org/repo/file``,
else the file's name. The header's own ``general.name`` is not used: it is often a training
run's label, and two quantizations of one model share it.

Whatever a disk holds, a listing ends and never fails as a whole: each place is walked and each
file judged on its own (an error there is a reason on that file, or a place skipped and
logged), and the work is bounded: ``ENTRY_LIMIT`` folder entries and ``DEPTH_LIMIT`` levels per
place, each real folder visited once (symbolic links to folders seen before are not followed
again), each file read once (hard and symbolic links to one file are one model), ``FILE_LIMIT``
files read per place, a header within ``gguf_header``'s bounds,
``MANIFEST_LIMIT`` bytes per Ollama manifest. A split model (``name-00001-of-00003.gguf`` …) is
one entry: its first part, with the size of the parts found; the later parts are not listed.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from imprintd.models.bounded_json import TooDeep, loads_bounded
from imprintd.models.gguf_header import HEADER_LIMIT, NotGguf, kind_of, read_header
from imprintd.models.templates import template_format

logger = logging.getLogger(__name__)

#: At most this many files are read per place, and the listing keeps this many, chat models first.
#: Per place, so that thousands of files in one folder cannot crowd out another tool's models.
FILE_LIMIT = 500
#: A place's walk looks at this many folder entries at most, and goes this deep.
ENTRY_LIMIT = 20_000
DEPTH_LIMIT = 6
#: An Ollama manifest (about a kilobyte) is read up to this size and this nesting.
MANIFEST_LIMIT = 1 << 20
MANIFEST_NESTING = 16

#: llama.cpp's ``general.file_type`` numbers (``LLAMA_FTYPE_*``).
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
}  # fmt: skip
#: Architectures that embed or rerank rather than chat.
EMBEDDING_ARCHITECTURES = frozenset({"bert", "nomic-bert", "jina-bert-v2", "t5encoder", "xlm-roberta", "modern-bert"})
#: A part of a model split by llama.cpp's ``gguf-split``: ``<stem>-00001-of-00003.gguf``.
SPLIT_PART = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class FoundModel:
    #: How the model is shown (``display_name``): the same name the model in use goes by.
    name: str
    path: str
    #: Where it was found: ``models_dir``, ``lm-studio``, ``huggingface``, ``ollama``, ``llama.cpp``.
    source: str
    #: Bytes on disk: of every part found, for a split model.
    size: int
    architecture: str | None
    quantization: str | None
    context_length: int | None
    has_chat_template: bool
    #: The chat format its template writes (``hermes``, ``qwen-xml``, …, ``json-fallback``: the
    #: names of ``chat_formats/table.py``); None without a template.
    chat_format: str | None
    chat: bool
    #: Why it is not offered as a chat model; "" when it is.
    reason: str = ""


def _typed(meta: dict[str, Any], key: str, kind: type) -> Any:
    """``meta[key]`` when absent or of ``kind``; NotGguf naming the key otherwise."""
    value = meta.get(key)
    if value is None or (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
        return value
    found = "an array" if isinstance(value, list) else f"a {type(value).__name__}"
    wanted = {str: "a string", int: "an integer"}[kind]
    raise NotGguf(f"a damaged header: {key} is {found}, not {wanted}")


def describe(path: Path, source: str, name: str | None = None) -> FoundModel:
    """``path`` described from its header (or as not a chat model, with the reason), named ``name``
    (else ``display_name``). Never raises for what the file is: a broken link, a loop, a FIFO, an
    unreadable file, a damaged header each give a reason."""
    shown = name or display_name(path)

    def refused(reason: str, size: int = 0) -> FoundModel:
        return FoundModel(shown, str(path), source, size, None, None, None, False, None, False, reason)

    try:
        info = path.stat()
    except OSError as error:
        return refused(_unreachable(path, error))
    if not stat.S_ISREG(info.st_mode):
        return refused(f"not a regular file ({kind_of(info.st_mode)})")
    try:
        # Non-blocking: were the file swapped for a FIFO since the stat, opening it must not hang.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        return refused(_unreachable(path, error), info.st_size)
    with os.fdopen(fd, "rb") as handle:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            return refused(f"not a regular file ({kind_of(opened.st_mode)})")
        try:
            meta = read_header(handle, opened.st_size, HEADER_LIMIT)
            architecture = _typed(meta, "general.architecture", str)
            file_type = _typed(meta, "general.file_type", int)
            template = _typed(meta, "tokenizer.chat_template", str) or ""
            length = _typed(meta, f"{architecture}.context_length", int) if architecture else None
        except NotGguf as error:
            return refused(str(error), opened.st_size)
        except OSError as error:
            return refused(f"cannot be read: {error.strerror or error}", opened.st_size)
    has_template = bool(template.strip())
    chat_format = template_format(template).name if has_template else None
    quantization = FILE_TYPES.get(file_type if file_type is not None else -1) or _quantization_in(path.name)
    reason = ""
    if architecture in EMBEDDING_ARCHITECTURES:
        reason = f"an embedding model ({architecture}), not a chat model"
    elif not has_template:
        reason = "no chat template in the file: a base model or not a chat model"
    return FoundModel(
        name=shown,
        path=str(path),
        source=source,
        size=opened.st_size,
        architecture=architecture,
        quantization=quantization,
        context_length=length,
        has_chat_template=has_template,
        chat_format=chat_format,
        chat=not reason,
        reason=reason,
    )


def _unreachable(path: Path, error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return "a symbolic link loop: it never reaches a file"
    if error.errno == errno.ENOENT and path.is_symlink():
        return "a broken link: the file it points to is missing (a deleted or unfinished download)"
    return f"cannot be read: {error.strerror or error}"


def _quantization_in(file_name: str) -> str | None:
    upper = file_name.upper()
    return next((q for q in sorted(FILE_TYPES.values(), key=len, reverse=True) if q in upper), None)


# --- names ------------------------------------------------------------------------------------


def display_name(path: Path, ollama_names: dict[Path, dict[Path, str]] | None = None) -> str:
    """How a model file is shown, in listings and as the model in use: Ollama's ``model:tag`` for
    one of its blobs, ``org/repo/file.gguf`` for a Hugging Face snapshot's file, else the file's
    name. Reads only Ollama's manifests (bounded as a listing is), and only for a file in a
    ``blobs`` folder; ``ollama_names`` keeps what was read, by Ollama folder, for the next file."""
    repo = _hugging_face_repo(path)
    if repo is not None:
        return f"{repo}/{path.name}"
    if path.parent.name != "blobs":
        return path.name
    folder = path.parent.parent
    names = ollama_names.get(folder) if ollama_names is not None else None
    if names is None:
        names = {}
        try:
            for blob, name in _ollama(folder, _Budget()):
                names.setdefault(blob, name)  # the first tag in order, as a listing names it
        except (OSError, ValueError) as error:
            logger.info("Ollama's manifests in %s could not be read for a name: %s", folder, error)
        if ollama_names is not None:
            ollama_names[folder] = names
    return names.get(path, path.name)


def _hugging_face_repo(path: Path) -> str | None:
    """``org/name`` for a file under ``models--org--name/snapshots/<revision>/``; else None."""
    parts = path.parts
    for index in range(len(parts) - 3, 0, -1):
        if parts[index] == "snapshots" and parts[index - 1].startswith("models--"):
            return parts[index - 1].removeprefix("models--").replace("--", "/")
    return None


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
    return [(source, folder) for source, folder in candidates if folder is not None and _is_folder(folder)]


def _is_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.stat().st_mode)
    except OSError:  # missing, unsearchable, a loop
        return False


def find_models(models_dir: str = "", env: dict[str, str] | None = None, home: Path | None = None) -> list[FoundModel]:
    """Every GGUF found where ``places`` says, described from its header; chat models first, by
    name, at most ``FILE_LIMIT``. Never raises: a place that cannot be walked is logged and skipped."""
    found: list[FoundModel] = []
    seen: set[tuple[int, int] | str] = set()  # (st_dev, st_ino) of each file read; its path when stat fails
    for source, folder in places(models_dir, env, home):
        try:
            found += _from_place(source, folder, seen)
        except Exception as error:  # noqa: BLE001 (one place's failure must not end the listing)
            logger.warning("models in %s (%s) could not be listed: %s: %s", folder, source, type(error).__name__, error)
    found.sort(key=lambda m: (not m.chat, m.name.lower(), m.path))
    return found[:FILE_LIMIT]


def _from_place(source: str, folder: Path, seen: set[tuple[int, int] | str]) -> list[FoundModel]:
    budget = _Budget()
    ollama_names: dict[Path, dict[Path, str]] = {}
    candidates = list(_files(source, folder, budget))
    parts = _split_parts(path for path, _ in candidates)
    described: list[FoundModel] = []
    for path, name in candidates:
        if len(described) >= FILE_LIMIT:
            logger.info("models in %s: only the first %d files were read", folder, FILE_LIMIT)
            break
        split = SPLIT_PART.match(path.name)
        if split and int(split["part"]) != 1:
            continue  # a later part of a split model: its first part stands for the whole
        key = _file_key(path)
        if key in seen:
            continue
        seen.add(key)
        try:
            model = describe(path, source, name or display_name(path, ollama_names))
        except Exception as error:  # noqa: BLE001 (one file's failure must not end the listing)
            logger.warning("the model file %s could not be described: %s: %s", path, type(error).__name__, error)
            reason = f"cannot be read: {type(error).__name__}"
            model = FoundModel(name or path.name, str(path), source, 0, None, None, None, False, None, False, reason)
        if split:
            model = _whole_split(model, path, split, parts)
        described.append(model)
    return described


def _file_key(path: Path) -> tuple[int, int] | str:
    """One key for every name of one file (hard links, symbolic links): its device and inode."""
    try:
        info = path.stat()
    except OSError:
        return str(path)
    return (info.st_dev, info.st_ino)


def _split_parts(paths: Iterator[Path]) -> dict[tuple[Path, str, str], dict[int, Path]]:
    """The parts of each split model among ``paths``: (folder, stem, total) → {part number: path}."""
    parts: dict[tuple[Path, str, str], dict[int, Path]] = {}
    for path in paths:
        match = SPLIT_PART.match(path.name)
        if match:
            parts.setdefault((path.parent, match["stem"], match["total"]), {})[int(match["part"])] = path
    return parts


def _whole_split(model: FoundModel, path: Path, split: re.Match, parts: dict) -> FoundModel:
    """The first part of a split model described as the whole: every part's size, and not offered
    while a part is missing (llama.cpp would not load it)."""
    total = int(split["total"])
    size, present = model.size, {1}
    for number, part in parts.get((path.parent, split["stem"], split["total"]), {}).items():
        if 1 < number <= total:
            try:
                size += part.stat().st_size
            except OSError:  # a broken link: as good as missing
                continue
            present.add(number)
    missing = total - len(present)
    if not model.chat or not missing:
        return replace(model, size=size)
    return replace(model, size=size, chat=False, reason=f"a model split in {total} parts, {missing} of them missing")


class _Budget:
    """How many folder entries one place's walk may still look at (``ENTRY_LIMIT``)."""

    def __init__(self) -> None:
        self.left = ENTRY_LIMIT
        self.folders: set[tuple[int, int]] = set()  # (st_dev, st_ino) of each folder walked

    def first_visit(self, folder: Path) -> bool:
        try:
            info = folder.stat()
        except OSError:
            return False
        key = (info.st_dev, info.st_ino)
        if key in self.folders:
            return False
        self.folders.add(key)
        return True


def _files(source: str, folder: Path, budget: _Budget) -> Iterator[tuple[Path, str | None]]:
    if source == "ollama":
        yield from _ollama(folder, budget)
    elif source == "huggingface":
        for repo_dir in _entries(folder, budget):
            if not repo_dir.name.startswith("models--"):
                continue
            repo = repo_dir.name.removeprefix("models--").replace("--", "/")
            for snapshot in _entries(repo_dir / "snapshots", budget):
                for path in _walk(snapshot, 0, budget, models=True):
                    yield path, f"{repo}/{path.name}"
    else:
        yield from ((path, None) for path in _walk(folder, 0, budget, models=True))


def _entries(folder: Path, budget: _Budget) -> list[Path]:
    """The folder's entries, sorted, counted against the budget; [] when it cannot be listed."""
    if budget.left <= 0 or not budget.first_visit(folder):
        return []
    try:
        with os.scandir(folder) as listing:
            names = []
            for entry in listing:
                if budget.left <= 0:
                    logger.info("model folders: stopped after %d entries (at %s)", ENTRY_LIMIT, folder)
                    break
                budget.left -= 1
                names.append(entry.name)
    except OSError as error:
        logger.info("the folder %s cannot be listed: %s", folder, error.strerror or error)
        return []
    return [folder / name for name in sorted(names)]


def _walk(folder: Path, depth: int, budget: _Budget, *, models: bool) -> Iterator[Path]:
    """Files under ``folder`` (``.gguf`` files that are not vision projectors when ``models``),
    anything but a folder: a broken link or a FIFO is yielded too, for ``describe`` to say so."""
    for entry in _entries(folder, budget):
        if _is_folder(entry):
            if depth < DEPTH_LIMIT:
                yield from _walk(entry, depth + 1, budget, models=models)
        elif not models or (entry.suffix.lower() == ".gguf" and "mmproj" not in entry.name.lower()):
            yield entry


_OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
#: An Ollama digest (``sha256:<hex>``); its blob is ``blobs/sha256-<hex>``. Nothing else names a blob.
_OLLAMA_DIGEST = re.compile(r"^(?P<algorithm>[a-z0-9]{1,16}):(?P<hex>[0-9a-f]{1,128})$")


def _ollama(folder: Path, budget: _Budget) -> Iterator[tuple[Path, str]]:
    """Ollama's model blobs, named ``model:tag`` (``namespace/model:tag`` outside ``library``).
    Only files in its ``blobs`` folder: a digest naming anything else is skipped."""
    manifests, blobs = folder / "manifests", folder / "blobs"
    for registry in _entries(manifests, budget):
        for namespace in _entries(registry, budget):
            for model in _entries(namespace, budget):
                for tag in _entries(model, budget):
                    for blob in _ollama_blobs(tag, blobs):
                        space = namespace.name
                        yield (
                            blob,
                            f"{model.name}:{tag.name}" if space == "library" else f"{space}/{model.name}:{tag.name}",
                        )


def _ollama_blobs(manifest: Path, blobs: Path) -> list[Path]:
    try:
        # Non-blocking, then checked: a FIFO in the manifests folder must not hang the listing.
        fd = os.open(manifest, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return []
            raw = handle.read(MANIFEST_LIMIT + 1)
    except OSError:
        return []
    if len(raw) > MANIFEST_LIMIT:
        logger.info("the Ollama manifest %s is over %d bytes: skipped", manifest, MANIFEST_LIMIT)
        return []
    try:
        document = loads_bounded(raw, max_nesting=MANIFEST_NESTING)
    except (TooDeep, ValueError) as error:
        logger.info("the Ollama manifest %s is not read: %s", manifest, error)
        return []
    layers = document.get("layers") if isinstance(document, dict) else None
    found = []
    for layer in layers if isinstance(layers, list) else []:
        if isinstance(layer, dict) and layer.get("mediaType") == _OLLAMA_MODEL_LAYER:
            digest = _OLLAMA_DIGEST.match(str(layer.get("digest", "")))
            if digest is None:
                logger.info("the Ollama manifest %s names a blob that is not a digest: skipped", manifest)
                continue
            found.append(blobs / f"{digest['algorithm']}-{digest['hex']}")
    return found
