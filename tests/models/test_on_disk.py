"""GGUF models found on this machine, read from their headers (imprintd/models/on_disk.py, issue 34)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from imprintd.models.embedded import find_embedded_model
from imprintd.models.on_disk import describe, find_models, places, read_metadata

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
        "Qwen2.5 0.5B Instruct",
        "qwen2",
        "Q4_K_M",
        32768,
    )
    assert found.has_chat_template and found.chat_format == "chatml" and found.chat and found.reason == ""


@needs_embedded
def test_the_embedded_model_reads_as_a_chat_model_without_loading_it():
    found = describe(EMBEDDED, "models_dir")
    assert found.architecture == "llama" and found.quantization == "Q4_1" and found.context_length == 8192
    assert found.chat and found.chat_format == "chatml" and found.size == EMBEDDED.stat().st_size
    assert read_metadata(EMBEDDED)["tokenizer.ggml.tokens"] == [49152]  # an array read as its length only


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
        ("lm-studio", "LM", True),
        ("models_dir", "Mine", True),
        ("huggingface", "Qwen/Qwen2.5-GGUF/qwen-q4.gguf", True),
        ("ollama", "qwen2.5:0.5b", True),
        ("llama.cpp", "Qwen2.5 0.5B Instruct", False),
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
    assert "(Q4_1, 94 MiB, 8,192 ctx, chatml, models_dir)" in lines[0] and lines[1].strip() == str(folder / "smol.gguf")
    assert lines[2].startswith("not a chat model: notes") and "not a GGUF file" in lines[2]
    listed = json.loads(run("models", "--json", env=env).stdout)
    assert [(m["path"], m["chat"]) for m in listed] == [
        (str(folder / "smol.gguf"), True),
        (str(folder / "notes.gguf"), False),
    ]
    assert listed[0]["contextLength"] == 8192 and listed[0]["hasChatTemplate"] is True
