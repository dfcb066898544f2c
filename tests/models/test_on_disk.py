"""GGUF models found on this machine, read from their headers (imprintd/models/on_disk.py)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from imprintd.models.chat_formats.table import BY_NAME
from imprintd.models.embedded import find_embedded_model
from imprintd.models.gguf_header import read_metadata
from imprintd.models.local import LocalModel
from imprintd.models.on_disk import describe, find_models, places
from tests.models.chat_formats.families import FAMILIES

EMBEDDED = find_embedded_model()
needs_embedded = pytest.mark.skipif(EMBEDDED is None, reason="the embedded model (imprintd[embedded]) is not installed")


def gguf(path: Path, metadata: dict[str, object]) -> Path:
    """A GGUF v3 header with ``metadata`` (strings, ints, a string array) and no tensors."""

    def string(text: str) -> bytes:
        data = text.encode()
        return struct.pack("<Q", len(data)) + data

    body = b"GGUF" + struct.pack("<IQQ", 3, 0, len(metadata))
    for key, value in metadata.items():
        body += string(key)
        if isinstance(value, str):
            body += struct.pack("<I", 8) + string(value)
        elif isinstance(value, list):
            body += struct.pack("<IIQ", 9, 8, len(value)) + b"".join(string(v) for v in value)
        else:
            body += struct.pack("<IQ", 10, value)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body + b"\0" * 64)
    return path


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "imprintd", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )


CHAT = {
    "general.architecture": "qwen2",
    "general.name": "Qwen2.5 0.5B Instruct",
    "general.file_type": 15,
    "qwen2.context_length": 32768,
    "tokenizer.ggml.tokens": ["a", "b", "c"],
    "tokenizer.chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}",
}


def test_a_chat_gguf_is_described_from_its_header(tmp_path):
    found = describe(gguf(tmp_path / "qwen.gguf", CHAT), "models_dir")
    assert (found.name, found.architecture, found.quantization, found.context_length) == (
        "qwen.gguf",  # the file's name (display_name), not the header's general.name
        "qwen2",
        "Q4_K_M",
        32768,
    )
    # A template with no tool syntax of its own that shows no tools: JSON in text.
    assert found.has_chat_template and found.chat_format == "json-fallback" and found.chat and found.reason == ""


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_listed_gguf_has_the_chat_format_the_model_reports_once_in_use(tmp_path, family):
    path = gguf(tmp_path / f"{family.name}.gguf", {**CHAT, "tokenizer.chat_template": family.source})
    listed = describe(path, "models_dir").chat_format
    assert listed == LocalModel(str(path)).chat_format == family.format  # one vocabulary, the table's names
    assert listed in BY_NAME


def test_a_template_that_does_not_parse_is_listed_as_the_model_reports_it(tmp_path):
    path = gguf(tmp_path / "broken.gguf", {**CHAT, "tokenizer.chat_template": "<tool_call>{% for %}"})
    assert describe(path, "models_dir").chat_format == LocalModel(str(path)).chat_format == "json-fallback"


@needs_embedded
def test_the_embedded_model_reads_as_a_chat_model_without_loading_it():
    found = describe(EMBEDDED, "models_dir")
    assert found.architecture == "llama" and found.quantization == "Q4_1" and found.context_length == 8192
    assert found.chat and found.chat_format == "json-fallback" and found.size == EMBEDDED.stat().st_size
    assert read_metadata(EMBEDDED)["tokenizer.ggml.tokens"] == [49152]  # an array read as its length only


def test_a_vocabulary_is_skipped_across_the_reads_whatever_its_strings_sizes(tmp_path):
    # Strings of every small size run over the 1 MiB reads, one is longer than a read (skipped
    # by seeking), and the keys after them still read right; a file ending inside one is damaged.
    words = [("w" * (n % 23)) for n in range(100_000)]
    words[80_000] = "x" * (2 << 20)
    path = gguf(tmp_path / "vocab.gguf", {"tokenizer.ggml.tokens": words, "tokenizer.chat_template": "{{ x }}"})

    metadata = read_metadata(path)

    assert metadata["tokenizer.ggml.tokens"] == [100_000]
    assert metadata["tokenizer.chat_template"] == "{{ x }}"
    whole = path.read_bytes()
    for end in (len(whole) // 3, whole.index(b"x" * 64) + (1 << 20), len(whole) - 200):
        path.write_bytes(whole[:end])
        with pytest.raises(ValueError, match="the file ends inside its header"):
            read_metadata(path)


def test_files_that_are_not_chat_models_say_why(tmp_path):
    base = describe(
        gguf(tmp_path / "base.gguf", {k: v for k, v in CHAT.items() if k != "tokenizer.chat_template"}), "x"
    )
    embed = describe(gguf(tmp_path / "e.gguf", {**CHAT, "general.architecture": "nomic-bert"}), "x")
    (tmp_path / "junk.gguf").write_bytes(b"PK\3\4 not a model")
    junk = describe(tmp_path / "junk.gguf", "x")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(gguf(tmp_path / "whole.gguf", CHAT).read_bytes()[:40])
    assert [(m.chat, m.reason) for m in (base, embed, junk, describe(cut, "x"))] == [
        (False, "no chat template in the file: a base model or not a chat model"),
        (False, "an embedding model (nomic-bert), not a chat model"),
        (False, "not a GGUF file (it does not start with GGUF)"),
        (False, "the file ends inside its header"),
    ]


def test_models_are_found_where_each_tool_keeps_them_and_named_as_it_names_them(tmp_path):
    home = tmp_path / "home"
    gguf(tmp_path / "mine" / "deep" / "a" / "Mine-Q8_0.gguf", {**CHAT, "general.name": "Mine"})
    gguf(home / ".lmstudio" / "models" / "org" / "repo" / "lm.gguf", {**CHAT, "general.name": "LM"})
    gguf(home / ".lmstudio" / "models" / "org" / "repo" / "mmproj-lm.gguf", CHAT)  # a vision projector: skipped
    hub = home / ".cache" / "huggingface" / "hub" / "models--Qwen--Qwen2.5-GGUF" / "snapshots" / "abc"
    gguf(hub / "qwen-q4.gguf", CHAT)
    ollama = home / ".ollama" / "models"
    blob = gguf(ollama / "blobs" / "sha256-1234", {**CHAT, "general.name": "whatever"})
    manifest = ollama / "manifests" / "registry.ollama.ai" / "library" / "qwen2.5" / "0.5b"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(
        json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:1234"}]})
    )
    gguf(home / ".cache" / "llama.cpp" / "base.gguf", {k: v for k, v in CHAT.items() if k != "tokenizer.chat_template"})

    found = find_models(str(tmp_path / "mine"), env={}, home=home)
    assert [(m.source, m.name, m.chat) for m in found] == [
        ("lm-studio", "lm.gguf", True),
        ("models_dir", "Mine-Q8_0.gguf", True),
        ("huggingface", "Qwen/Qwen2.5-GGUF/qwen-q4.gguf", True),
        ("ollama", "qwen2.5:0.5b", True),
        ("llama.cpp", "base.gguf", False),
    ]
    assert found[3].path == str(blob)
    assert [source for source, _ in places("", env={}, home=tmp_path / "nobody")] == []


def test_environment_variables_move_the_caches(tmp_path):
    gguf(tmp_path / "hf" / "hub" / "models--a--b" / "snapshots" / "r" / "m.gguf", CHAT)
    gguf(tmp_path / "llama" / "m2.gguf", CHAT)
    env = {"HF_HOME": str(tmp_path / "hf"), "LLAMA_CACHE": str(tmp_path / "llama")}
    found = find_models("", env=env, home=tmp_path / "nobody")
    assert sorted(m.source for m in found) == ["huggingface", "llama.cpp"]


@needs_embedded
def test_cli_and_stdio_list_the_models_dir(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(EMBEDDED, folder / "smol.gguf")
    (folder / "notes.gguf").write_bytes(b"hello")
    env = {"IMPRINT_CHAT_MODELS_DIR": str(folder), "HOME": str(tmp_path / "home")}
    printed = run("models", env=env)
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert "(Q4_1, 94 MiB, 8,192 ctx, json-fallback, models_dir)" in lines[0] and lines[1].strip() == str(
        folder / "smol.gguf"
    )
    assert lines[2].startswith("not a chat model: notes") and "not a GGUF file" in lines[2]
    listed = json.loads(run("models", "--json", env=env).stdout)
    assert [(m["path"], m["chat"]) for m in listed] == [
        (str(folder / "smol.gguf"), True),
        (str(folder / "notes.gguf"), False),
    ]
    assert listed[0]["contextLength"] == 8192 and listed[0]["hasChatTemplate"] is True


# --- what real disks hold: each odd file judged on its own --------------------------------


def raw_gguf(path: Path, entries: list[tuple[str, bytes]]) -> Path:
    """A GGUF v3 header of ``(key, type and value bytes)`` entries, for values ``gguf`` cannot write."""
    body = b"GGUF" + struct.pack("<IQQ", 3, 0, len(entries))
    for key, value in entries:
        body += struct.pack("<Q", len(key)) + key.encode() + value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body + b"\0" * 64)
    return path


def string_value(text: str) -> bytes:
    return struct.pack("<IQ", 8, len(text.encode())) + text.encode()


def nested_arrays(depth: int) -> bytes:
    """An array of arrays ``depth`` deep, the innermost empty (12 bytes a level)."""
    return struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * (depth - 1) + struct.pack("<IQ", 4, 0)


TEMPLATE = ("tokenizer.chat_template", string_value("<|im_start|>{{ m }}"))


def test_broken_links_loops_and_fifos_are_listed_with_why_and_the_rest_still_found(tmp_path):
    home = tmp_path / "home"
    snapshot = home / ".cache" / "huggingface" / "hub" / "models--org--repo" / "snapshots" / "rev"
    snapshot.mkdir(parents=True)
    # An interrupted download: the snapshot's link to a blob that was deleted.
    (snapshot / "gone-Q4_K_M.gguf").symlink_to(snapshot.parent.parent / "blobs" / "deleted")
    gguf(snapshot / "kept.gguf", CHAT)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "loop.gguf").symlink_to(mine / "loop.gguf")
    os.mkfifo(mine / "pipe.gguf")
    gguf(mine / "good.gguf", CHAT)

    found = {m.name: m for m in find_models(str(mine), env={}, home=home)}

    assert found["good.gguf"].chat and found["org/repo/kept.gguf"].chat
    assert [(m.chat, m.size, m.reason) for m in (found[n] for n in ("org/repo/gone-Q4_K_M.gguf", "loop.gguf"))] == [
        (False, 0, "a broken link: the file it points to is missing (a deleted or unfinished download)"),
        (False, 0, "a symbolic link loop: it never reaches a file"),
    ]
    assert found["pipe.gguf"].reason == "not a regular file (a FIFO)" and not found["pipe.gguf"].chat


def test_a_damaged_header_is_listed_not_offered(tmp_path):
    architecture = ("general.architecture", struct.pack("<IIQ", 9, 8, 1) + struct.pack("<Q", 5) + b"llama")
    raw_gguf(tmp_path / "arch.gguf", [architecture, TEMPLATE])
    raw_gguf(
        tmp_path / "ftype.gguf",
        [
            ("general.architecture", string_value("llama")),
            ("general.file_type", struct.pack("<IIQ", 9, 4, 0)),
            TEMPLATE,
        ],
    )
    raw_gguf(tmp_path / "deep.gguf", [("general.architecture", string_value("llama")), ("x", nested_arrays(200_000))])
    raw_gguf(tmp_path / "ok.gguf", [("general.architecture", string_value("llama")), TEMPLATE])

    found = {m.name: (m.chat, m.reason) for m in find_models(str(tmp_path), env={}, home=tmp_path / "nobody")}

    assert found == {
        "ok.gguf": (True, ""),
        "arch.gguf": (False, "a damaged header: general.architecture is an array, not a string"),
        "ftype.gguf": (False, "a damaged header: general.file_type is an array, not an integer"),
        "deep.gguf": (False, "a damaged header: arrays nested more than 8 deep"),
    }


def test_files_and_folders_whose_stat_is_refused_are_listed_or_skipped(tmp_path, monkeypatch):
    # As root a mode denies nothing, so EACCES comes from the stat itself (a folder that is
    # listable but not searchable; /proc/1/cwd under chat.models_dir = /).
    gguf(tmp_path / "good.gguf", CHAT)
    gguf(tmp_path / "locked.gguf", CHAT)
    (tmp_path / "cwd").mkdir()
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if Path(path).name in {"locked.gguf", "cwd"}:
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    found = {m.name: (m.chat, m.reason) for m in find_models(str(tmp_path), env={}, home=tmp_path / "nobody")}
    assert found == {"good.gguf": (True, ""), "locked.gguf": (False, "cannot be read: Permission denied")}


def test_a_split_model_is_one_entry_the_size_of_its_parts(tmp_path):
    first = gguf(tmp_path / "big" / "qwen-Q4_K_M-00001-of-00003.gguf", CHAT)
    for part in (2, 3):
        (tmp_path / "big" / f"qwen-Q4_K_M-0000{part}-of-00003.gguf").write_bytes(b"\0" * 1000 * part)
    gguf(tmp_path / "cut" / "llama-00001-of-00002.gguf", CHAT)  # its part 2 was never downloaded

    found = find_models(str(tmp_path), env={}, home=tmp_path / "nobody")

    assert [(m.name, m.size, m.chat, m.reason) for m in found] == [
        ("qwen-Q4_K_M-00001-of-00003.gguf", first.stat().st_size + 5000, True, ""),
        ("llama-00001-of-00002.gguf", first.stat().st_size, False, "a model split in 2 parts, 1 of them missing"),
    ]


def test_an_ollama_digest_names_only_a_blob_and_a_deep_manifest_is_skipped(tmp_path):
    ollama = tmp_path / "ollama"
    gguf(ollama / "blobs" / "sha256-abcd", CHAT)
    outside = gguf(tmp_path / "private" / "secret.gguf", CHAT)
    manifests = ollama / "manifests" / "registry.ollama.ai" / "library"

    def manifest(model: str, text: str) -> None:
        (manifests / model).mkdir(parents=True)
        (manifests / model / "latest").write_text(text)

    def layer(digest: str) -> str:
        return json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": digest}]})

    manifest("good", layer("sha256:abcd"))
    manifest("absolute", layer(str(outside)))
    manifest("climbing", layer("sha256:../../private/secret.gguf"))
    manifest("deep", "[" * 200_000 + "]" * 200_000)
    (manifests / "piped").mkdir()
    os.mkfifo(manifests / "piped" / "latest")  # never opened for a blocking read

    found = find_models("", env={"OLLAMA_MODELS": str(ollama)}, home=tmp_path / "nobody")
    assert [(m.name, m.path) for m in found] == [("good:latest", str(ollama / "blobs" / "sha256-abcd"))]


def test_hard_links_and_folder_links_are_read_once(tmp_path, monkeypatch):
    folder = tmp_path / "models"
    gguf(folder / "one.gguf", CHAT)
    for number in range(3):
        os.link(folder / "one.gguf", folder / f"link{number}.gguf")
        (folder / f"self{number}").symlink_to(folder)  # a folder link back to itself
    listed: list[str] = []
    for name in ("scandir", "listdir"):
        original = getattr(os, name)

        def counting(path=".", _original=original):
            listed.append(str(path))
            return _original(path)

        monkeypatch.setattr(os, name, counting)
    found = find_models(str(folder), env={}, home=tmp_path / "nobody")
    assert [m.name for m in found] == ["link0.gguf"]  # one file, under the first of its names
    assert listed == [str(folder)]  # the folder, not once per link to it (3 ** 6 times)


def test_each_place_reads_its_own_files_so_a_crowded_folder_hides_no_other_tools_models(tmp_path, monkeypatch):
    monkeypatch.setattr("imprintd.models.on_disk.FILE_LIMIT", 5)
    for number in range(20):
        (tmp_path / "crowded" / f"junk{number:02}.gguf").parent.mkdir(exist_ok=True)
        (tmp_path / "crowded" / f"junk{number:02}.gguf").write_bytes(b"not a model")
    home = tmp_path / "home"
    gguf(home / ".lmstudio" / "models" / "org" / "real.gguf", CHAT)
    found = find_models(str(tmp_path / "crowded"), env={}, home=home)
    assert found[0].name == "real.gguf" and found[0].chat  # chat models first, then up to the limit
    assert len(found) == 5 and all(m.source == "models_dir" for m in found[1:])
