"""Citation handling never alters code, and stays live on any input (docs/decisions.md,
"Numbered results and sources").

Validation list: a corpus of answers with code (Python, JSON, TOML, shell, Markdown tables, an
indented block, inline spans, prose with bracketed numbers) passes byte for byte through the
text filter, whole and streamed a character at a time, and none of it is a citation or a
source; dangling citations in prose still go; the stream holds back at most a few characters
of a possible marker at every step, and reads each character a bounded number of times; a
number too long for ``int`` is text, never a crash.
"""

from __future__ import annotations

import random

import pytest

from imprintd.research import citations
from imprintd.research.citations import (
    MAX_HELD_CHARS,
    CitationFilter,
    Passage,
    cited_numbers,
    keep_valid,
    sources,
)
from tests.helpers import ask, make_chat

#: Results 1 and 2 exist; every other number names nothing.
VALID = {1, 2}.__contains__

CODE_ANSWERS = {
    "python fence": (
        "The ports are set in `config.py` [1]:\n\n```python\nPORTS = [80, 443]\nweights = [1, 2, 3]\n"
        "limits = [100]\nfirst = items [0]\nmatrix = [[1, 2], [3, 4]]\nprint(x [3])\n```\n"
    ),
    "json fence": '```json\n{"retries": [3], "ids": [7, 9], "pair": [1, 2]}\n```\n',
    "toml tilde fence": "~~~toml\n[tool.ruff]\nselect = [1]\nlimits = [ 100 ]\nports = [80, 443]\n~~~\n",
    "shell fence with info": "```bash title=run.sh\necho [3] [12]\nls [9]\ntest [ 1 -eq 1 ] && echo ok [2]\n```",
    "indented block": "Run this:\n\n    weights = [1, 2, 3]\n    echo [7]\n\nThat is all.",
    "inline spans": "Set `PORTS = [80, 443]` and ``x [9]`` or `limits [100]`, then `[3]` [1].",
    "markdown table": "| name | value |\n| --- | --- |\n| ports | [80, 443] |\n| weights | [1, 2, 3] |\n",
    "prose with brackets": (
        "The list [0] element comes first; PORTS = [80, 443] and weights = [1, 2, 3] in prose, "
        'and {"retries": [3]}, limits = [100], x[7], f(y)[8], a [note] and [ 4 ] stay.'
    ),
    "a long fence": "````markdown\n```python\nx = [5]\n```\nstill code [9]\n````\n",
    "an unclosed fence": "```\nPORTS = [80, 443]\nnever closed [9]",
    "a 5,000-digit number": "The value [" + "7" * 5000 + "] is long; so is [" + "1" * 4301 + ", 2].",
    "reference definitions": "[1]: https://example.com\n[3](https://example.com/three)\n",
}


def streamed(text: str, valid=VALID) -> tuple[str, list[int]]:
    out: list[str] = []
    held: list[int] = []
    stream = CitationFilter(valid, out.append)
    for char in text:
        stream(char)
        held.append(stream.held)
    stream.close()
    return "".join(out), held


@pytest.mark.parametrize("name", CODE_ANSWERS)
def test_code_and_brackets_out_of_citation_position_pass_byte_for_byte(name):
    text = CODE_ANSWERS[name]
    assert keep_valid(text, VALID) == text
    assert streamed(text)[0] == text
    if not cited_numbers(text):
        assert citations.strip_citations(text) == text  # a spoken answer keeps its code too


#: Answers whose prose cites a real result besides their code.
CITING = {"python fence": [1], "inline spans": [1]}


@pytest.mark.parametrize("name", [n for n in CODE_ANSWERS if n not in CITING])
def test_nothing_in_code_is_a_citation_or_a_source(name):
    text = CODE_ANSWERS[name]
    assert cited_numbers(text) == []
    passage = Passage(number=1, kind="file", label="a.py:1", text="PORTS = [80, 443]", path="a.py", read=True)
    refs = sources(text, {1: passage, 2: passage}, [passage])
    assert all(not ref.cited for ref in refs)


@pytest.mark.parametrize("name", CITING)
def test_an_answer_with_code_cites_only_its_prose_citations(name):
    assert cited_numbers(CODE_ANSWERS[name]) == CITING[name]


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("Port 8101 [1]. Made up [9].", "Port 8101 [1]. Made up."),
        ("Made up [9], and more [12].", "Made up, and more."),
        ("Retries are 3.[9] Next.", "Retries are 3. Next."),
        ("Retries are 3.\n[9]\nNext [2].", "Retries are 3.\n\nNext [2]."),
        ("Both [2, 9] and [1-3] and [3–4].", "Both [2] and [1, 2] and."),
        ("`code [9]` then prose [9].", "`code [9]` then prose."),
        ("```\nx = [9]\n```\nAfter the block [9].", "```\nx = [9]\n```\nAfter the block."),
        ("Twice [1][9] and [9] [2].", "Twice [1] and [2]."),
    ],
)
def test_dangling_citations_in_prose_still_go(text, kept):
    assert keep_valid(text, VALID) == kept
    assert streamed(text)[0] == kept


def test_a_bracket_flood_streams_live_with_a_bounded_hold_back():
    """100 KB of an open citation-like list, one character a chunk: what is held back never
    passes a possible marker's few characters, and everything comes out unchanged."""
    flood = "The numbers are [" + ", ".join(str(n % 9 + 1) for n in range(34_000))
    flood = flood[:100_000]
    out, held = streamed(flood)
    assert out == flood
    assert max(held) <= MAX_HELD_CHARS
    assert all(h <= MAX_HELD_CHARS for h in held)
    closed = "Cites " + "[9] " * 25_000  # 100 KB of closed, invalid citations
    out, held = streamed(closed)
    assert out == "Cites "
    assert max(held) <= MAX_HELD_CHARS


@pytest.mark.parametrize(
    "text",
    [
        "The numbers are [" + ", ".join("1" for _ in range(20_000)),
        "[" * 50_000,
        ("x [1, 2, 3, 4, 5, 6, 7, 8, 9, 1" + " " * 9) * 2_000,
        " [" + "9" * 50_000 + "]",
        "Cites " + "[9] " * 10_000,
    ],
)
def test_every_character_is_read_a_bounded_number_of_times(text, monkeypatch):
    """Linear time, counted rather than timed: a failed marker is read again, once."""
    steps = 0
    step = citations._Scanner._step

    def counting(self, char):
        nonlocal steps
        steps += 1
        step(self, char)

    monkeypatch.setattr(citations._Scanner, "_step", counting)
    keep_valid(text, VALID)
    assert steps <= 2 * len(text) + MAX_HELD_CHARS


def test_a_number_too_long_for_int_is_text_everywhere():
    text = "Pass [" + "5" * 5000 + "] here [1]. The value is " + "9" * 5000 + " [1]."
    passage = Passage(number=1, kind="file", label="a.py:1", text="x = 1", path="a.py")
    assert keep_valid(text, VALID) == text
    assert cited_numbers(text) == [1]
    [ref] = sources(text, {1: passage}, [passage])
    assert ref.supported is False


# --- through a whole reply: the stream, the stored answer and the sources ------------------


CODE_REPLY = (
    "Billing listens on port 8101 [1]. In code:\n\n```python\nPORTS = [80, 443]\nweights = [1, 2, 3]\n"
    'cfg = {"retries": [3]}\nlimits = [100]\n```\n\nThe list [0] element is the first; `x [2]` is code.'
)


async def test_a_reply_with_code_streams_and_stores_it_unchanged(model, workspace):
    chat = make_chat(model, **{"chat.first_look": True})
    model.queue(CODE_REPLY)
    outcome, events = await ask(chat, "Which port does billing use?", workspace=workspace)
    answer = CODE_REPLY + "\n\nSources:\n[1] services/billing.yaml:1-4"
    assert events.streamed == answer
    assert chat.session(outcome.session_id).messages[-1].content == answer
    assert [(s.number, s.cited, s.supported) for s in outcome.sources] == [(1, True, True)]


async def test_no_input_crashes_a_reply_a_5000_digit_bracket_is_text(model, workspace):
    chat = make_chat(model, **{"chat.first_look": True, "chat.max_tokens": 4096})
    rng = random.Random(35)  # digits that do not repeat: the repetition guard leaves them be
    digits = "".join(rng.choice("0123456789") for _ in range(5000))
    long, longer = f"[{digits[:5000]}]", f"[{digits[:4301]}, 7]"
    model.queue(f"Billing listens on port 8101 [1]. The value is {long} and {longer}.")
    outcome, events = await ask(chat, "Which port does billing use?", workspace=workspace)
    assert long in outcome.text and longer in outcome.text
    assert events.streamed == outcome.text
    assert [s.number for s in outcome.sources] == [1]
