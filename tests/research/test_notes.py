"""The final answer is written from deduplicated, cited research notes.

Validation list: repeated hits merge, rank first and keep their number; a read is one note
named by its place; earlier replies, empty reads, errors and calls not run add no notes; the
user's own analyzed message gives notes; long notes end at a word; the digest keeps whole notes
within its size; an answer cut off after a whole sentence gets the
cut-short note and findings without an ellipsis; no answer gives four findings; the final
request holds the question with notes and no tool messages.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from imprintd.context.sections import Analysis, WorkerNotes
from imprintd.messages import Message, assistant, tool_result, user
from imprintd.research.citations import Numbering, Passage, cited_numbers
from imprintd.research.notes import (
    Note,
    ToolStepRecord,
    build_notes,
    clip_at_word,
    cut_short,
    digest,
    final_request,
    findings_only,
)
from imprintd.tools.base import Hit, Quote, Source, ToolResult
from imprintd.tools.index import WorkspaceIndex
from imprintd.tools.workspace import ReadFileTool, SearchTool, format_hits
from tests.standin import call


def hit(hit_id: str, path: str, excerpt: str, score: float = 1.0, start: int = 1, end: int = 5) -> Hit:
    return Hit(id=hit_id, path=path, start_line=start, end_line=end, score=score, excerpt=excerpt)


def search_step(query: str, *hits: Hit, call_id: str = "c") -> ToolStepRecord:
    result = ToolResult(
        text=format_hits(hits) if hits else f"No results for “{query}” in the workspace.",
        subject=query,
        evidence=tuple(h.id for h in hits),
        hits=tuple(hits),
    )
    return ToolStepRecord(call=call("search", call_id, query=query), result=result)


def read_step(path: str, text: str, start: int = 1, end: int = 3) -> ToolStepRecord:
    result = ToolResult(
        text=text,
        subject=path,
        evidence=(f"{path}:{start}-{end}",),
        sources=(Source(path=path, start_line=start, end_line=end),),
    )
    return ToolStepRecord(call=call("read_file", path=path), result=result)


GATEWAY = hit("a1b2c3d4e5", "src/billing/config.py", "GATEWAY_PORT = 8443", score=3.0, start=55, end=58)
RETRY = hit("f6a7b8c9d0", "src/billing/retry.py", "MAX_RETRIES = 5", score=4.0)
README = hit("0011223344", "README.md", "The gateway routes payments.", score=2.0)


# --- building notes -----------------------------------------------------------------------------


def test_repeated_hits_merge_rank_first_and_keep_the_number_they_were_shown_under():
    steps = [
        search_step("retry policy", RETRY, GATEWAY),
        search_step("gateway port", README, GATEWAY),
    ]
    notes = build_notes(steps)
    assert [n.text for n in notes] == ["GATEWAY_PORT = 8443", "MAX_RETRIES = 5", "The gateway routes payments."]
    first = notes[0]
    # Ranked first, found by both searches, under the number the first search showed it with.
    assert first.number == 2 and first.times == 2
    assert first.label == "src/billing/config.py:55–58"
    assert (first.passage.path, first.passage.start_line, first.passage.end_line) == ("src/billing/config.py", 55, 58)
    for note in notes:
        assert "a1b2c3d4e5" not in note.text and "[hit" not in note.text
        assert "3.0" not in note.text and "src/" not in note.text
    assert [n.number for n in notes] == [2, 1, 3]


def test_notes_keep_the_numbers_the_coordinator_saw():
    numbering = Numbering()
    steps = [search_step("gateway port", README), read_step("src/app.py", "x = 1")]
    shown = [numbering.result(step.call, step.result)[0] for step in steps]
    assert shown[0].startswith("[1] README.md:1–5\n") and shown[1] == "[2] src/app.py:1–3\nx = 1"
    later = search_step("retry", RETRY, README)  # README again: still [1]
    assert numbering.result(later.call, later.result)[0].split("\n\n")[1].startswith("[1] README.md")
    notes = build_notes([*steps, later], numbering)
    assert {n.number: n.text for n in notes} == {1: README.excerpt, 2: "x = 1", 3: RETRY.excerpt}


def test_hits_of_one_search_keep_score_order_and_earlier_searches_come_first():
    low = hit("low0000000", "a.py", "low", score=1.0)
    high = hit("high000000", "b.py", "high", score=9.0)
    later = hit("later00000", "c.py", "later", score=99.0)
    notes = build_notes([search_step("q1", high, low), search_step("q2", later)])
    assert [n.text for n in notes] == ["high", "low", "later"]


def test_other_tools_become_one_note_named_by_their_subject():
    continuation = "… continues at line 4 of 90: call read_file with start_line 4"
    step = read_step("src/app.py", "def main():\n    run()\n" + continuation)
    step = msgspec.structs.replace(step, result=msgspec.structs.replace(step.result, continuation=continuation))
    notes = build_notes([step])
    assert len(notes) == 1
    note = notes[0]
    assert note.label == "src/app.py:1–3" and note.passage.kind == "file" and note.passage.read
    # The continuation hint is tool protocol: it must not invite a tools-free turn to call tools.
    assert note.text == "def main():\n    run()"


def test_an_identical_read_twice_is_one_note():
    notes = build_notes([read_step("src/app.py", "x = 1"), read_step("src/app.py", "x = 1")])
    assert len(notes) == 1 and notes[0].times == 2


def test_an_earlier_message_read_is_a_note_of_that_message():
    text = "#12 user, characters 0–26 of 26:\nearlier: the port was 8443\n(end of message #12)"
    result = ToolResult(text=text, evidence=("history:12:0",), quotes=(Quote(message=12, text=text),))
    record = ToolStepRecord(call=call("conversation_history", message=12), result=result)
    [note] = build_notes([record])
    assert note.label == "message #12" and (note.passage.kind, note.passage.message) == ("message", 12)


def test_the_analysis_of_the_users_own_message_gives_notes_of_that_message():
    analysis = Analysis(
        source_id="s1",
        kind="user",
        label="user message",
        total_chars=9000,
        sections=((0, 4000), (3936, 6000)),
        workers=(
            WorkerNotes(worker=1, sections=(1,), notes="PORT=8101"),
            WorkerNotes(worker=2, sections=(2,), notes="x"),
        ),
        planned=3,
        cut="token_budget",
    )
    notes = build_notes([], question=analysis, question_seq=5)
    assert [(n.number, n.label) for n in notes] == [
        (1, "notes on section 1 of 3 of message #5"),
        (2, "notes on section 2 of 3 of message #5"),
    ]
    assert all(n.passage.kind == "section" and n.passage.message == 5 for n in notes)
    assert notes[0].text.startswith("PORT=8101\n(characters 6000–9000 of this source were not read")


def test_empty_reads_errors_and_calls_not_run_add_no_notes():
    steps = [
        search_step("nothing"),  # no hits
        ToolStepRecord(
            call=call("read_file", path="empty.txt"), result=ToolResult(text="empty.txt is empty.", subject="empty.txt")
        ),
        ToolStepRecord(
            call=call("read_file", path=".env"),
            result=ToolResult(text="refused path '.env': secret", ok=False, subject=".env"),
        ),
        ToolStepRecord(call=call("search", query="never run"), result=None),
        ToolStepRecord(
            call=call("read_file", path="blank.txt"),
            result=ToolResult(text="   ", subject="blank.txt", evidence=("blank.txt:1-1",)),
        ),
    ]
    assert build_notes(steps) == []


async def test_notes_from_the_real_workspace_tools(tmp_path: Path):
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "gateway.py").write_text("# the transaction gateway\nGATEWAY_PORT = 8443\n")
    (root / "src" / "empty.py").write_text("")
    (root / "long.txt").write_text("".join(f"row {n}\n" for n in range(2000)))
    index = WorkspaceIndex(tmp_path / "index.sqlite3", root)
    index.update()
    search, read = SearchTool(index), ReadFileTool(root)
    steps = []
    for arguments in ({"query": "gateway port"}, {"query": "transaction gateway"}):
        steps.append(ToolStepRecord(call=call("search", **arguments), result=await search.run(arguments)))
    for path in ("src/gateway.py", "src/empty.py", "long.txt"):
        steps.append(ToolStepRecord(call=call("read_file", path=path), result=await read.run({"path": path})))
    index.close()
    notes = build_notes(steps)
    assert [(n.label, n.times) for n in notes][:2] == [("src/gateway.py:1–2", 2), ("src/gateway.py:1–2", 1)]
    assert notes[2].label.startswith("long.txt:1–")
    assert notes[0].text == "# the transaction gateway\nGATEWAY_PORT = 8443"
    assert "continues at line" in steps[-1].result.text
    last_row = notes[2].passage.end_line - 1  # file line n holds "row n-1"
    assert notes[2].text.endswith(f"row {last_row}") and "read_file" not in notes[2].text


# --- the digest -------------------------------------------------------------------------------


def words(count: int) -> str:
    return " ".join(f"word{n}" for n in range(count))


def note(number: int, text: str, path: str = "src/a.py") -> Note:
    label = f"{path}:{number}–{number + 9}"
    passage = Passage(
        number=number, kind="file", label=label, text=text, path=path, start_line=number, end_line=number + 9
    )
    return Note(number=number, label=label, text=text, passage=passage)


def test_long_notes_end_at_a_word():
    text = words(300)  # about 2,400 characters
    clipped = clip_at_word(text, 700)
    assert len(clipped) <= 700 and clipped.endswith("…")
    kept = clipped[:-1]
    assert text.startswith(kept) and text[len(kept)] == " "  # cut between words
    line = digest([note(1, text)])[0]
    assert line == f"[1] src/a.py:1–10: {clipped}"


def test_short_notes_are_not_marked():
    assert clip_at_word("short text", 700) == "short text"
    exact = "x" * 700
    assert clip_at_word(exact, 700) == exact


def test_a_single_giant_word_is_cut_hard():
    clipped = clip_at_word("y" * 2000, 700)
    assert len(clipped) == 700 and clipped.endswith("…")


def test_the_digest_keeps_whole_notes_within_its_size():
    notes = [note(n, words(200), f"src/file{n}.py") for n in range(1, 13)]
    text, included = digest(notes)
    assert len(text) <= 6000
    lines = text.split("\n")
    assert len(lines) == len(included) < len(notes)
    assert [n.number for n in included] == list(range(1, len(included) + 1))
    for line, kept in zip(lines, included, strict=False):
        assert line.startswith(f"[{kept.number}] {kept.label}: ")
        assert len(line.split(": ", 1)[1]) <= 700
    # The next note would not have fitted whole.
    following = len(included) + 1
    next_line = f"[{following}] src/file{following}.py:{following}–{following + 9}: " + clip_at_word(words(200), 700)
    assert len(text) + 1 + len(next_line) > 6000


def test_the_digest_of_nothing_is_empty():
    assert digest([]) == ("", [])


# --- the final request -----------------------------------------------------------------------


def conversation() -> list[Message]:
    asked = call("search", query="old")
    messages: list[Message] = []
    for n in range(1, 6):
        messages += [
            user(f"question {n}", seq=4 * n - 3),
            assistant("", tool_calls=(asked,), seq=4 * n - 2),
            tool_result(asked, f"tool output {n}", seq=4 * n - 1),
            assistant(f"answer {n}", seq=4 * n),
        ]
    return messages


def test_final_request_holds_question_notes_and_no_tool_messages():
    notes_text, _ = digest([note(1, "GATEWAY_PORT = 8443"), note(2, "MAX_RETRIES = 5", "src/b.py")])
    question = "what port does the gateway use?"
    earlier = [*conversation(), user(question, seq=21)]  # the stored question comes along
    messages = final_request(
        system_prompt="You are Imprint.",
        earlier=earlier,
        summary_block="Summary of earlier conversation: ports were discussed.",
        question=question,
        digest_text=notes_text,
    )
    assert messages[0].role == "system"
    assert messages[0].content == "You are Imprint.\n\nSummary of earlier conversation: ports were discussed."
    middle, last = messages[1:-1], messages[-1]
    assert len(middle) <= 6
    assert all(m.role in ("user", "assistant") and not m.tool_calls for m in messages[1:])
    assert all("tool output" not in m.content for m in messages)
    assert middle[0].role == "user"
    assert [m.content for m in middle] == ["question 3", "answer 3", "question 4", "answer 4", "question 5", "answer 5"]
    assert last.role == "user" and last.content.startswith(question)
    assert last.content.count(question) == 1 and sum(m.content == question for m in messages) == 0
    assert "[1] src/a.py:1–10: GATEWAY_PORT = 8443" in last.content
    assert "[2] src/b.py:2–11: MAX_RETRIES = 5" in last.content
    for asked_for in ("direct answer", "short list", "[n]", "leave open", "250 words"):
        assert asked_for in last.content


def test_assistant_text_that_also_called_tools_keeps_its_text():
    asked = call("search", query="x")
    earlier = [user("hi"), assistant("Let me look.", tool_calls=(asked,)), tool_result(asked, "out")]
    messages = final_request(system_prompt="S", earlier=earlier, summary_block=None, question="q", digest_text="")
    assert [(m.role, m.content, m.tool_calls) for m in messages[1:-1]] == [
        ("user", "hi", ()),
        ("assistant", "Let me look.", ()),
    ]
    assert "(The research found nothing to note.)" in messages[-1].content


def test_spoken_final_request_asks_for_plain_sentences():
    messages = final_request(
        system_prompt="S",
        earlier=[],
        summary_block=None,
        question="q",
        digest_text="[1] from a.py (file): x",
        style="spoken",
    )
    assert messages[0].content == "S"
    assert len(messages) == 2
    body = messages[-1].content
    assert "two or three plain sentences" in body and "no citations" in body
    assert "[n]" not in body and "short list" not in body


# --- fallbacks --------------------------------------------------------------------------------

FINDINGS = [note(n, f"finding number {n}. " + words(80), f"src/f{n}.py") for n in range(1, 6)]


def test_cut_short_after_a_whole_sentence_has_no_ellipsis():
    written = "The gateway listens on port 8443 [1]."
    reply = cut_short(written, FINDINGS)
    head, _, rest = reply.partition("\n\n")
    assert head == written
    assert "cut short" in rest and "…" not in head
    findings = [line for line in rest.split("\n") if line.startswith("- ")]
    assert len(findings) == 3
    assert findings[0].startswith("- src/f1.py:1–10: finding number 1.") and findings[0].endswith("[1]")
    assert "src/f4.py" not in reply
    assert cited_numbers(reply) == [1, 2, 3]


@pytest.mark.parametrize("written", ["It is set in", "Port 8443 [1]. Also the", "- first point"])
def test_cut_short_mid_sentence_ends_the_partial_sentence_with_an_ellipsis(written):
    reply = cut_short(written, FINDINGS)
    assert reply.startswith(written + "…\n\n")


@pytest.mark.parametrize("written", ['He said "done."', "Is it? [2]", "It works (mostly).", "End!  \n"])
def test_sentence_endings_are_recognised(written):
    assert cut_short(written, FINDINGS).startswith(written.rstrip() + "\n\n")


def test_no_answer_gives_the_four_strongest_findings():
    reply = findings_only(FINDINGS)
    findings = [line for line in reply.split("\n") if line.startswith("- ")]
    assert len(findings) == 4 and "src/f5.py" not in reply
    assert all(len(line) < 400 for line in findings)
    assert cut_short("   ", FINDINGS) == reply


def test_fallbacks_without_notes():
    assert "nothing" in findings_only([])
    assert cut_short("Half a", []) == "Half a…\n\n(The answer was cut short.)"


def test_spoken_fallbacks_are_plain_short_sentences():
    spoken = findings_only(FINDINGS, style="spoken")
    assert spoken == (
        "I couldn't finish an answer. The research found relevant material in "
        "src/f1.py, src/f2.py, src/f3.py and src/f4.py."
    )
    cut = cut_short("The port is", FINDINGS, style="spoken")
    assert cut.startswith("The port is… I had to stop there.")
    assert "src/f3.py." in cut and "src/f4.py" not in cut
    for text in (spoken, cut):
        assert "\n" not in text and "[" not in text and "- " not in text
