"""``imprintd ask --workspace`` and a follow-up, end to end, with each family's chat template.

Each family's template is written into a copy of the embedded model's GGUF (``gguf_copy.py``);
the daemon's command then answers a question about a small workspace (the first look makes a
call, the research round is rendered and counted, and the final answer is written from the notes)
and a follow-up in the same session. What the embedded model writes is not judged: that every
prompt of both replies renders through the real template, that both replies are stored, and
that no call markup, slip, stray marker or reasoning marker reaches the answer.

Kept cheap, and how: every family runs in one process (``ask_families.py``, started once for the
module, each ask the command's own ``main``), so Python, llama.cpp and the daemon's imports load
once rather than twice a family; the workspace's file makes the first look big enough that the
research round's prompt passes the least research token budget, so the round is rendered and
counted but never evaluated (before, the time budget cut it after a first 512-token batch, or
later, as the machine's load had it) and each reply evaluates one prompt of about 490 tokens,
the final answer's; each turn writes at most 16 tokens (the least ``chat.max_tokens`` takes).
By default one family per call syntax that renders differently runs (``DEFAULT``);
``IMPRINT_CONFORMANCE_FAMILIES=all`` runs every family, or a comma-separated list of names those.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from imprintd.models.chat_formats import BY_NAME, detect_reasoning
from imprintd.store import Store
from tests.models.chat_formats.ask_families import FOLLOW_UP, QUESTION
from tests.models.chat_formats.families import FAMILIES
from tests.models.real_model import needs_real_model

ROOT = Path(__file__).resolve().parents[3]
#: The families run by default: the strictest templates and the most distinct syntaxes, and
#: Phi-4-mini's (a reconstruction: a template that renders no tools, in a format of its own).
DEFAULT = {"qwen3.5", "mistral-nemo", "ministral3", "gemma4", "llama3.2", "gemma2", "phi4-mini"}
CHOSEN = {name.strip() for name in os.environ.get("IMPRINT_CONFORMANCE_FAMILIES", "").split(",") if name.strip()}
ASKED = [f for f in FAMILIES if "all" in CHOSEN or f.name in (CHOSEN or DEFAULT)]


@pytest.fixture(scope="module")
def asked(embedded_gguf, tmp_path_factory) -> tuple[dict[str, dict], Path]:
    """What ``imprintd ask`` and its follow-up gave for every family asked, from one process, and
    the folder holding each family's data folder."""
    folder = tmp_path_factory.mktemp("families")
    out = folder / "asked.json"
    env = {name: value for name, value in os.environ.items() if not name.startswith("IMPRINT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-m", "tests.models.chat_formats.ask_families", str(embedded_gguf), str(folder), str(out)]
        + [family.name for family in ASKED],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300 + 60 * len(ASKED),
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return json.loads(out.read_text(encoding="utf-8")), folder


@needs_real_model
@pytest.mark.parametrize("family", ASKED, ids=lambda f: f.name)
def test_ask_and_a_follow_up_run_with_the_familys_template(family, asked):
    results, folder = asked
    assert "error" not in results[family.name], results[family.name].get("error")
    first, second = results[family.name]["first"], results[family.name]["second"]
    assert first["returncode"] == 0, first["stderr"]
    session = [line for line in first["stderr"].splitlines() if line.startswith("session ")][-1].split()[1]
    assert second is not None and second["returncode"] == 0, second and second["stderr"]

    syntax = BY_NAME[family.format].syntax
    markers = {*syntax.markup, *syntax.stray}
    reasoning = detect_reasoning(family.source)
    if reasoning is not None:
        markers |= {reasoning.open, reasoning.close}
    for answer in (first["stdout"], second["stdout"]):
        assert answer.strip(), "no answer printed"
        assert not [marker for marker in markers if marker in answer], answer

    # The follow-up went on in the same session, its earlier exchange rendered into its prompts,
    # and both exchanges are stored there.
    assert f"session {session}" in second["stderr"]
    store = Store.open(folder / family.name / "data" / "imprint.sqlite3")
    try:
        stored = [(m.role, m.content) for m in store.messages(session) if m.role in ("user", "assistant")]
    finally:
        store.close()
    assert [content for role, content in stored if role == "user"] == [QUESTION, FOLLOW_UP]
    assert stored[-1][0] == "assistant" and [role for role, _ in stored].count("assistant") >= 2
