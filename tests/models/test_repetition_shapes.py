"""The repetition guard leaves data alone and catches loops of every shape (docs/decisions.md,
"Repetition guard").

Validation list: a false-positive corpus (a hex dump and a table of a real installed file, zero
arrays, CSV with identical rows, DNA strings, ``====`` rules, a Markdown table with identical
rows) never trips the guard, fed whole lines or a character at a time; data runs far past any
answer (``DATA_LOOP_CHARS``) still stop; the loop shapes an adversarial run found (a line with
an incrementing counter, a 9-line paragraph, a ~390-character unit on one line, a
1,100-character line) each stop long before the output limit, and the cut keeps the first
occurrence.
"""

from __future__ import annotations

from pathlib import Path

import numpy
import pytest

from imprintd.models import repetition
from imprintd.models.repetition import RepetitionGuard, cut_before_loop


def fed(text: str, size: int) -> RepetitionGuard:
    guard = RepetitionGuard()
    for start in range(0, len(text), size):
        if guard.feed(text[start : start + size]):
            break
    return guard


def hex_dump(data: bytes) -> str:
    """``xxd``-style rows: offsets count up, and runs of zero bytes give identical data columns."""
    rows = []
    for at in range(0, len(data), 16):
        row = data[at : at + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        rows.append(f"{at:08x}: {row.hex(' ')}  {text}")
    return "\n".join(rows)


def _numpy_table() -> str:
    """The ``.. table::`` in the installed numpy's ``rollaxis`` docstring: border rows repeat."""
    source = (Path(numpy.__file__).parent / "_core" / "numeric.py").read_text(encoding="utf-8")
    lines = [line.strip() for line in source.splitlines() if line.strip().startswith(("+---", "+===", "| "))]
    start = next(i for i, line in enumerate(lines) if line.startswith("+-------------------+"))
    return "\n".join(lines[start : start + 19])


def _zero_region_dump() -> str:
    """A hex dump of the first 4 KB of a real installed binary: its ELF header and the zero
    padding after it (rows differ only in their offsets)."""
    import llama_cpp

    library = next(Path(llama_cpp.__file__).parent.glob("lib/*.so*"))
    return hex_dump(library.read_bytes()[:1024])


def corpus() -> dict[str, str]:
    zeros = ", ".join(["0x00"] * 64)
    return {
        "bytes of 64 zeros": f"The header is empty:\n\n```python\npayload = bytes([{zeros}])\n```\n\nThat is all.",
        "zero array on many lines": "```c\nstatic const uint8_t pad[256] = {\n"
        + "    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,\n" * 32
        + "};\n```\n",
        "a real hex dump": "The file starts:\n\n```\n" + _zero_region_dump() + "\n```\n",
        "csv with identical rows": "```csv\nid,status,amount\n" + "0,pending,0.00\n" * 40 + "```\n",
        "dna in a code block": "The sequence:\n\n```\n" + "ACGT" * 300 + "\n```\n",
        "dna in inline code": "It reads `" + "ACGTTGCA" * 60 + "` end to end.",
        "rules in code": "```\n" + ("=" * 72 + "\n") * 20 + "-" * 1200 + "\n```\n",
        "a table with identical rows": "| a | b |\n| --- | --- |\n" + "| 0 | none of the above |\n" * 12,
        "a real ascii table": "In numpy:\n\n```\n" + _numpy_table() + "\n```\n",
        "the same table as prose": _numpy_table() + "\n",
    }


CORPUS = corpus()


@pytest.mark.parametrize("name", CORPUS)
@pytest.mark.parametrize("size", [1, 7, 64])
def test_data_is_not_a_loop(name, size):
    assert not fed(CORPUS[name], size).looping


def test_data_running_far_past_what_an_answer_needs_is_a_loop():
    zeros = "```python\npayload = bytes([" + "0x00, " * 2000
    guard = fed(zeros, 5)
    assert guard.looping
    assert repetition.DATA_LOOP_CHARS <= len(guard.text) < repetition.DATA_LOOP_CHARS + 600
    rows = "| a | b |\n| --- | --- |\n" + "| 0 | none of the above |\n" * 400
    guard = fed(rows, 5)
    assert guard.looping and len(guard.text) < repetition.DATA_LOOP_CHARS + 200


# --- loops of other shapes ------------------------------------------------------------------


def test_a_line_with_an_incrementing_counter_is_a_loop():
    text = "Here is how it retries.\n" + "".join(
        f"Attempt {n} waits 5 seconds before it retries.\n" for n in range(1, 400)
    )
    guard = fed(text, 4)
    assert guard.looping
    assert len(guard.text) < 50 * repetition.COUNTER_REPEATS + 100
    assert (
        cut_before_loop(guard.text, guard.loop_start)
        == "Here is how it retries.\nAttempt 1 waits 5 seconds before it retries."
    )


def test_a_nine_line_paragraph_written_again_and_again_is_a_loop():
    paragraph = "".join(
        f"Line {word} of the paragraph says something about the {word} setting.\n"
        for word in ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth")
    )
    text = "The answer:\n\n" + (paragraph + "\n") * 30
    guard = fed(text, 6)
    assert guard.looping and len(guard.text) < len(paragraph) * 5 + 20
    assert cut_before_loop(guard.text, guard.loop_start) == "The answer:\n\n" + paragraph.strip()


def test_a_390_character_unit_repeated_on_one_line_is_a_loop():
    unit = (
        "The client sends the request through the transport, which opens a connection from the pool, "
        "writes the headers and the body, reads the status line and the headers of the response, and "
        "hands the stream back to the client, which reads the body when asked to, closes the stream, "
        "and returns the connection to the pool so that the next request can use it again without opening a new one. "
    )
    assert 380 <= len(unit) <= 400
    text = "In short: " + unit * 40
    guard = fed(text, 5)
    assert guard.looping and len(guard.text) < len(unit) * 6
    assert cut_before_loop(guard.text, guard.loop_start).count("The client sends") <= 1


def test_a_1100_character_line_written_again_and_again_is_a_loop():
    line = " ".join(f"setting_{n} is read from the environment" for n in range(30))
    line = line[:1100]
    assert len(line) == 1100
    text = "The settings:\n" + (line + "\n") * 30
    guard = fed(text, 8)
    assert guard.looping and len(guard.text) < len(line) * 5 + 20
    assert cut_before_loop(guard.text, guard.loop_start) == "The settings:\n" + line.rstrip()
