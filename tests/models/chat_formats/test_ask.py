"""``imprintd ask --workspace`` and a follow-up, end to end, with each family's chat template.

Each family's template is written into a copy of the embedded model's GGUF (``gguf_copy.py``);
the daemon's command then answers a question about a small workspace (the first look makes a
call, a research round and the final answer follow) and a follow-up in the same session. What the
embedded model writes is not judged: that every prompt of both replies renders through the real
template, that both replies are stored, and that no call markup, slip, stray marker or reasoning
marker reaches the answer. Kept cheap: a 2,048-token context, 24 output tokens a turn, research
stopped after a second, so a family takes about 3–6 s on two cores (two ``imprintd ask``
processes, each loading the model). By default one family per chat format of
``chat_formats/table.py`` runs (eleven); ``IMPRINT_CONFORMANCE_FAMILIES=all`` runs every family,
or a comma-separated list of names those.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from imprintd.models.chat_formats.reasoning import detect_reasoning
from imprintd.models.chat_formats.table import BY_NAME
from imprintd.store import Store
from tests.models.chat_formats.families import FAMILIES, Family
from tests.models.chat_formats.gguf_copy import with_chat_template
from tests.models.real_model import needs_real_model

QUESTION = "Which port does the server listen on?"
FOLLOW_UP = "And which host?"
CHEAP = {
    "IMPRINT_CHAT_N_CTX": "2048",
    "IMPRINT_CHAT_MAX_TOKENS": "24",
    "IMPRINT_CHAT_ANALYSIS_WORKERS": "0",
    "IMPRINT_CHAT_RESEARCH_TOKEN_BUDGET": "1024",
    "IMPRINT_CHAT_RESEARCH_TIME_BUDGET": "1",
    "IMPRINT_CHAT_REASONING": "on",  # the thinking prompts are rendered too
}
#: The families run by default: one per chat format, the strictest template of each where a
#: format has several, and Phi-4-mini's (a reconstruction: a template that renders no tools, in a
#: format of its own).
DEFAULT = {
    "qwen3",  # hermes
    "qwen3.5",  # qwen-xml
    "llama3.2",  # llama3-json
    "granite3.3",  # granite
    "mistral-nemo",  # mistral
    "ministral3",  # mistral-args
    "gemma4",  # gemma4
    "gemma2",  # json-fallback
    "lfm2",  # lfm2
    "deepseek-r1-qwen",  # deepseek-r1
    "phi4-mini",  # phi4-mini
}
CHOSEN = {name.strip() for name in os.environ.get("IMPRINT_CONFORMANCE_FAMILIES", "").split(",") if name.strip()}
ASKED = [f for f in FAMILIES if "all" in CHOSEN or f.name in (CHOSEN or DEFAULT)]


@pytest.fixture(scope="session")
def family_ggufs(embedded_gguf, tmp_path_factory):
    """Where each family's GGUF is, built on first use (one at a time: 98 MB each)."""
    folder = tmp_path_factory.mktemp("family-ggufs")

    def build(family: Family) -> Path:
        for old in folder.glob("*.gguf"):
            old.unlink()
        return with_chat_template(embedded_gguf, folder / f"{family.name}.gguf", family.source)

    return build


def ask(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "imprintd", "ask", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **CHEAP, **env},
        timeout=300,
    )


def test_the_default_families_run_every_chat_format_once():
    formats = [family.format for family in FAMILIES if family.name in DEFAULT]
    assert len(formats) == len(DEFAULT) and sorted(formats) == sorted(BY_NAME)


@needs_real_model
@pytest.mark.parametrize("family", ASKED, ids=lambda f: f.name)
def test_ask_and_a_follow_up_run_with_the_familys_template(family, family_ggufs, isolated_dirs, tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "config.toml").write_text('[server]\nport = 8080\nhost = "0.0.0.0"\n', encoding="utf-8")
    env = {"IMPRINT_CHAT_MODEL": str(family_ggufs(family))}

    first = ask(QUESTION, "--workspace", str(workspace), env=env)
    assert first.returncode == 0, first.stderr
    session = [line for line in first.stderr.splitlines() if line.startswith("session ")][-1].split()[1]
    second = ask(FOLLOW_UP, "--workspace", str(workspace), "--session", session, env=env)
    assert second.returncode == 0, second.stderr

    syntax = BY_NAME[family.format].syntax
    markers = {*syntax.markup, *syntax.stray}
    reasoning = detect_reasoning(family.source)
    if reasoning is not None:
        markers |= {reasoning.open, reasoning.close}
    for answer in (first.stdout, second.stdout):
        assert not [marker for marker in markers if marker in answer], answer

    # The follow-up went on in the same session, its earlier exchange rendered into its prompts,
    # and both exchanges are stored there.
    assert f"session {session}" in second.stderr
    store = Store.open(isolated_dirs / "imprint.sqlite3")
    try:
        stored = [(m.role, m.content) for m in store.messages(session) if m.role in ("user", "assistant")]
    finally:
        store.close()
    assert [content for role, content in stored if role == "user"] == [QUESTION, FOLLOW_UP]
    assert stored[-1][0] == "assistant" and [role for role, _ in stored].count("assistant") >= 2
