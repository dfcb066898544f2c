"""Numbered results and the sources of an answer (docs/decisions.md, "Numbered results and sources").

Validation list: numbers are given once per place and kept on repeats; results render with
their numbers; invalid citations go from the text, also while streaming (whatever the chunk
boundaries); code indexing is not a citation; sources are cited in order, else the places
read, not cited; the check flags a source that shares nothing with its sentence and passes one
that shares a number, an identifier, a quoted string or (without those) a word.
"""

from __future__ import annotations

import random

import pytest

from imprintd.context.sections import Analysis, WorkerNotes
from imprintd.research.citations import (
    CitationFilter,
    Numbering,
    Passage,
    check,
    cited_numbers,
    claims,
    keep_valid,
    sources,
    sources_block,
    strip_citations,
)
from imprintd.tools.base import Hit, Quote, Source, ToolResult
from tests.standin import call


def search_result(*hits: Hit) -> ToolResult:
    return ToolResult(text="(the tool's own text)", subject="q", evidence=tuple(h.id for h in hits), hits=hits)


def read_result(path: str, start: int, end: int, text: str, continuation: str = "") -> ToolResult:
    return ToolResult(
        text=text + (f"\n{continuation}" if continuation else ""),
        subject=path,
        evidence=(f"{path}:{start}-{end}",),
        sources=(Source(path=path, start_line=start, end_line=end),),
        continuation=continuation,
    )


PORT = Hit(id="h1", path="deploy/billing.yaml", start_line=10, end_line=14, score=2.0, excerpt="  port: 8101")
TIMEOUT = Hit(id="h2", path="src/billing/client.py", start_line=40, end_line=44, score=1.0, excerpt="TIMEOUT = 7.5")


def test_each_place_gets_the_next_number_once_and_keeps_it():
    numbering = Numbering()
    shown, passages = numbering.result(call("search", query="billing"), search_result(PORT, TIMEOUT))
    assert shown == "[1] deploy/billing.yaml:10–14\n  port: 8101\n\n[2] src/billing/client.py:40–44\nTIMEOUT = 7.5"
    assert [(p.number, p.kind, p.label, p.read) for p in passages] == [
        (1, "file", "deploy/billing.yaml:10–14", False),
        (2, "file", "src/billing/client.py:40–44", False),
    ]
    # Another search returning the timeout hit again shows it under its first number.
    again, _ = numbering.result(call("search", query="timeout"), search_result(TIMEOUT))
    assert again.startswith("[2] src/billing/client.py:40–44\n")
    read = read_result("src/billing/client.py", 1, 3, "a\nb\nc", "… continues at line 4 of 9: call read_file")
    shown, [passage] = numbering.result(call("read_file", path="src/billing/client.py"), read)
    assert shown == "[3] src/billing/client.py:1–3\na\nb\nc\n… continues at line 4 of 9: call read_file"
    assert passage.text == "a\nb\nc" and passage.read  # the continuation is tool protocol
    assert len(numbering) == 3


def test_a_preview_numbers_without_giving_numbers_away():
    numbering = Numbering()
    shown, _ = numbering.preview().result(call("search", query="billing"), search_result(PORT))
    assert shown.startswith("[1] ") and len(numbering) == 0
    assert numbering.result(call("search", query="billing"), search_result(PORT))[0] == shown


def test_earlier_messages_are_numbered_by_their_seq():
    numbering = Numbering()
    found = ToolResult(
        text="…",
        evidence=("history:4:0",),
        quotes=(Quote(message=4, text="#4 user: the port is 8101"), Quote(message=5, text="#5 assistant: noted")),
        preface="Earlier in this conversation, for “port”:",
    )
    shown, passages = numbering.result(call("conversation_history", query="port"), found)
    assert shown == (
        "Earlier in this conversation, for “port”:\n\n[1] #4 user: the port is 8101\n\n[2] #5 assistant: noted"
    )
    assert [(p.kind, p.label, p.message, p.read) for p in passages] == [
        ("message", "message #4", 4, False),
        ("message", "message #5", 5, False),
    ]
    read = ToolResult(
        text="#4 user, all:\nthe port is 8101", quotes=(Quote(message=4, text="#4 user, all:\nthe port is 8101"),)
    )
    shown, [passage] = numbering.result(call("conversation_history", message=4), read)
    assert shown.startswith("[1] #4 user, all:") and passage.read  # read now, still [1]


def test_failed_and_empty_results_have_no_number():
    numbering = Numbering()
    failed = ToolResult(ok=False, text="Error: no file x.py in the workspace")
    empty = ToolResult(text="No results for “x” in the workspace.", subject="x")
    assert numbering.result(call("read_file", path="x.py"), failed) == (failed.text, [])
    assert numbering.result(call("search", query="x"), empty) == (empty.text, [])
    assert len(numbering) == 0


# --- citations in the text --------------------------------------------------------------------


def test_invalid_numbers_are_removed_and_code_indexing_is_left_alone():
    valid = {1, 2}.__contains__
    text = "Port 8101 [1]. Made up [9]. Both [2, 9]. items[0] and f(x)[1] stay; so does [x]."
    assert keep_valid(text, valid) == "Port 8101 [1]. Made up. Both [2]. items[0] and f(x)[1] stay; so does [x]."
    assert cited_numbers(text) == [1, 9, 2]
    assert strip_citations("Port 8101 [1], see [2, 3].") == "Port 8101, see."


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 100])
def test_the_stream_filter_emits_what_keep_valid_gives_whatever_the_chunks(size):
    text = "It listens on 8101 [1] and [12] waits [3, 1].  Odd [ 7 ] and [9]\nnext [2] items[7] f(x)[8]"
    valid = {1, 2, 3}.__contains__
    out: list[str] = []
    stream = CitationFilter(valid, out.append)
    for start in range(0, len(text), size):
        stream(text[start : start + size])
    stream.close()
    assert (
        "".join(out)
        == keep_valid(text, valid)
        == ("It listens on 8101 [1] and waits [3, 1].  Odd [ 7 ] and\nnext [2] items[7] f(x)[8]")
    )


def test_a_citation_binds_to_the_claim_it_closes_also_on_the_next_line():
    text = "Retries are 3.\n[1] See [2]. The timeout is 5 [1] and retries 3 [2][1].\n```python\nTIMEOUT = 5\n```\n[3]"
    assert [(c.numbers, claim) for c, claim in claims(text)] == [
        ([1], "Retries are 3."),  # on its own line after the sentence
        ([2], "See"),
        ([1], "The timeout is 5"),
        ([2], "and retries 3"),
        ([1], "and retries 3"),  # right after another citation: the same claim
        ([3], "```python\nTIMEOUT = 5\n```"),  # after a code block: the block
    ]
    assert claims("[4] Nothing came before.")[0][1] == ""


# --- the check -------------------------------------------------------------------------------


def passage(text: str, number: int = 1) -> Passage:
    return Passage(number=number, kind="file", label="a.py:1–2", text=text, path="a.py", start_line=1, end_line=2)


@pytest.mark.parametrize(
    ("sentence", "source"),
    [
        ("Billing listens on 8,101 [1].", "port: 8101"),  # a number, however it is written
        ("The client waits TIMEOUT_SECONDS [1].", "TIMEOUT_SECONDS = 7.5"),  # snake_case
        ("It is a BillingClient attribute [1].", "class BillingClient:"),  # CamelCase
        ("It is set in billing.yaml [1].", "# deploy/billing.yaml"),  # a dotted name
        ('The header is "X-Request-Id" [1].', 'headers = {"X-Request-Id": rid}'),  # a quoted string
        ("Dunning sends reminder mails [1].", "Dunning: reminder mails for failed payments"),  # words
        ("DEFAULT_TIMEOUT_CONFIG is 5 seconds [1].", "DEFAULT_TIMEOUT_CONFIG = Timeout(timeout=5.0)"),
        ("trust_env defaults to True [1].", "def f(trust_env: bool = True):"),
        ("The retries are 3, over 20 redirects [1].", "retries: 3\nMAX_REDIRECTS = 20"),
    ],
)
def test_a_source_sharing_something_with_its_sentence_is_supported(sentence, source):
    assert check(passage(source), [sentence]) == (True, "")


@pytest.mark.parametrize("sentence", ["See [1].", "[1]", "As shown in [1]."])
def test_a_citation_with_no_claim_beside_it_gets_no_verdict(sentence):
    supported, reason = check(passage("anything at all"), [sentence])
    assert supported is None
    assert reason.startswith("No claim stands beside the citation")


@pytest.mark.parametrize(
    ("sentence", "source", "name", "value"),
    [
        (
            "The default is DEFAULT_TIMEOUT_CONFIG, which is 60 seconds [1].",
            "DEFAULT_TIMEOUT_CONFIG = Timeout(timeout=5.0)\nmax_redirects = 60",
            "DEFAULT_TIMEOUT_CONFIG",
            "5.0",
        ),
        ("The default timeout is 60 seconds [1].", "Timeout(timeout=5.0)", "timeout", "5.0"),
        ("trust_env defaults to False [1].", "def f(trust_env: bool = True):", "trust_env", "True"),
        (
            "The header is `X-Id`, set in HEADER_NAME [1].",
            'HEADER_NAME = "X-Request-Id"',
            "HEADER_NAME",
            '"X-Request-Id"',
        ),
        ("Billing listens on port 8080 [1].", "port: 8101", "port", "8101"),
    ],
)
def test_a_value_the_source_contradicts_for_the_same_name_is_unsupported(sentence, source, name, value):
    """One shared number or name is not enough when the source sets that name to another value."""
    supported, reason = check(passage(source), [sentence])
    assert supported is False
    assert reason.startswith(f"The cited text sets {name} to {value}, which the sentence citing it does not say")


@pytest.mark.parametrize(
    ("sentence", "source"),
    [
        ("Billing listens on 8101 [1].", "TIMEOUT_SECONDS = 7.5"),
        ("The client waits TIMEOUT_SECONDS [1].", "port: 8101"),
        ("Dunning sends reminder mails [1].", "A chargeback freezes the charge."),
    ],
)
def test_a_source_sharing_nothing_with_its_sentence_is_unsupported_with_the_reason(sentence, source):
    supported, reason = check(passage(source), [sentence])
    assert not supported
    assert reason.startswith("The cited text shares no number, name, quoted text or word with the sentence")
    assert sentence.replace(" [1]", "") in reason


def test_sources_are_the_cited_results_checked_in_order_of_first_citation():
    passages = {1: passage("port: 8101", 1), 2: passage("TIMEOUT = 7.5", 2)}
    answer = "The timeout is 7.5 s [2]. Billing listens on 8101 [2, 9]."
    refs = sources(answer, passages, passages.values())
    assert [(r.number, r.cited, r.supported) for r in refs] == [(2, True, False)]
    assert "Billing listens on 8101" in refs[0].reason
    assert sources_block(refs) == "Sources:\n[2] a.py:1-2 (unsupported)"


def test_an_answer_citing_nothing_lists_the_places_it_read_not_cited():
    found = passage("port: 8101", 1)
    read = Passage(number=2, kind="file", label="b.py:3", text="x", path="b.py", start_line=3, end_line=3, read=True)
    message = Passage(number=3, kind="message", label="message #4", text="y", message=4, read=True)
    refs = sources("Billing listens on 8101.", {1: found, 2: read, 3: message}, [found, read, message])
    assert [(r.number, r.kind, r.cited, r.supported, r.message) for r in refs] == [
        (2, "file", False, None, None),
        (3, "message", False, None, 4),
    ]
    assert sources_block(refs) == "Sources:\n[2] b.py:3 (read, not cited)\n[3] message #4 (read, not cited)"
    assert sources("Nothing read.", {1: found}, [found]) == []  # a search alone is not a read


def test_section_notes_and_rereads_are_named_by_their_place_in_words():
    numbering = Numbering()
    analysis = Analysis(
        source_id="src1",
        kind="tool:read_file",
        label="read_file result",
        total_chars=90_000,
        sections=((0, 45_000), (44_936, 90_000)),
        workers=(
            WorkerNotes(worker=1, sections=(1,), notes="FATAL at 03:12"),
            WorkerNotes(worker=2, sections=(2,), notes="ok"),
        ),
    )
    big = read_result("logs/app.log", 1, 900, "…")
    notes = numbering.analysis(analysis, result=big)
    assert [(p.number, p.kind, p.label, p.path, p.start_line, p.message) for p in notes] == [
        (1, "section", "notes on section 1 of 2 of logs/app.log:1–900", "logs/app.log", 1, None),
        (2, "section", "notes on section 2 of 2 of logs/app.log:1–900", "logs/app.log", 1, None),
    ]
    reread = ToolResult(
        text="FATAL at 03:12",
        subject="characters 10–24 of the analyzed read_file result",
        evidence=("section:src1:10:24",),
    )
    shown, [passage] = numbering.result(call("read_chat_section", source_id="src1", start=10, length=14), reread)
    assert shown == "[3] characters 10–24 of logs/app.log:1–900\nFATAL at 03:12"
    assert "read_file" not in passage.label and passage.read


def test_the_stream_filter_agrees_with_keep_valid_on_random_text_and_chunks():
    rng = random.Random(19)  # seeded: the same cases every run
    pieces = ["x", " ", "[", "1", "2", "]", ",", "(", ")", "a", "\n", ".", "  ", "[3", ", 9]"]
    valid = {1, 2, 3}.__contains__
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 20)))
        out: list[str] = []
        stream = CitationFilter(valid, out.append)
        at = 0
        while at < len(text):
            size = rng.randint(1, 4)
            stream(text[at : at + size])
            at += size
        stream.close()
        assert "".join(out) == keep_valid(text, valid), text
