"""The repository explains itself: its docs link only to what ships, and docs/decisions.md's numbers are the code's.

Every table headed ``| Number | Value | In the code |`` in docs/decisions.md names a constant as a
path under ``imprintd`` (``context.sections.WORKER_TIMEOUT_S``, ``settings.DEFAULTS.chat.n_ctx``);
the first number of its Value cell must equal that constant.

The README's benchmark table gives each benchmark's last figure in one line; docs/benchmarks.md
holds every figure: each figure and date of a README row must be there, beside the row's
benchmark, and every benchmark in ``bench/`` and every command it gives must exist.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "protocol.md", *sorted((ROOT / "docs").glob("*.md"))]
DECISIONS = ROOT / "docs" / "decisions.md"

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_NUMBERS_HEADER = "| Number | Value | In the code |"
_FIRST_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation out, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in path.read_text("utf-8").splitlines() if line.startswith("#")}


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text("utf-8"), flags=re.DOTALL)  # code blocks hold no links
    return [target for target in _LINK.findall(text) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_stay_in_the_repository_and_resolve(doc):
    for target in _links(doc):
        file_part, _, anchor = target.partition("#")
        linked = (doc.parent / file_part).resolve() if file_part else doc
        assert linked.is_relative_to(ROOT), f"{doc.name} links {target}, outside the repository"
        assert linked.exists(), f"{doc.name} links {target}, which does not exist"
        if anchor:
            assert anchor in _anchors(linked), f"{doc.name} links {target}: {linked.name} has no such heading"


def _resolve(path: str):
    """``imprintd.<path>``: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module("imprintd." + ".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            value = getattr(value, name)
        return value
    raise AssertionError(f"no module of imprintd.{path}")


def _number_rows() -> list[tuple[str, str, str]]:
    rows, in_table = [], False
    for line in DECISIONS.read_text("utf-8").splitlines():
        if line.strip() == _NUMBERS_HEADER:
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        if in_table and not line.startswith("| ---"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            assert len(cells) == 3 and re.fullmatch(r"`[\w.]+`", cells[2]), f"malformed numbers row: {line}"
            rows.append((cells[0], cells[1], cells[2].strip("`")))
    return rows


ROWS = _number_rows()


def test_every_rule_has_its_numbers_table():
    tables = DECISIONS.read_text("utf-8").count(_NUMBERS_HEADER)
    assert tables >= 6 and len(ROWS) >= tables


@pytest.mark.parametrize(("meaning", "value", "path"), ROWS, ids=[row[2] for row in ROWS])
def test_decisions_numbers_are_the_codes(meaning, value, path):
    found = _FIRST_NUMBER.search(value)
    assert found, f"{meaning!r}: no number in {value!r}"
    stated = float(found.group().replace(",", ""))
    actual = _resolve(path)
    assert isinstance(actual, (int, float)) and not isinstance(actual, bool), f"{path} is {actual!r}, not a number"
    assert stated == actual, f"docs/decisions.md says {meaning} is {value}; imprintd.{path} is {actual}"


def _settings_rows(path: Path) -> dict[str, tuple[str, str]]:
    """The Settings table of ``path``: key → (default cell, accepted cell)."""
    rows = {}
    for line in path.read_text("utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`chat."):
            rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


def _default_cell(value) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str | tuple):
        return f"`{value}`" if value else "empty"
    return str(value) if isinstance(value, int) else f"{value:g}"  # 268435456, not 2.68435e+08


@pytest.mark.parametrize("doc", [ROOT / "README.md", ROOT / "protocol.md"], ids=lambda p: p.name)
def test_the_settings_tables_say_what_the_settings_struct_declares(doc):
    from imprintd import settings

    rows = _settings_rows(doc)
    assert list(rows) == list(settings.KEYS), f"{doc.name}'s settings table names other keys"
    lines = doc.read_text("utf-8").splitlines()
    at = [n for n, line in enumerate(lines) if line.startswith("| `chat.")]
    assert at == list(range(at[0], at[0] + len(at))), f"{doc.name}'s settings table is cut (a line between rows)"
    for name, key in settings.KEYS.items():
        default, accepted = rows[name]
        assert default == _default_cell(settings.DEFAULTS.get(name)), f"{doc.name}: {name} default"
        if key.type in (str, bool) and key.bounds:
            assert accepted == ", ".join(f"`{value}`" for value in key.bounds.split(", ")), f"{doc.name}: {name}"
        elif key.bounds:
            unit = " s" if key.type is float else ""
            assert accepted == key.bounds + unit, f"{doc.name}: {name} accepts {key.accepted}"


def _readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text("utf-8")
    after = readme.split("Run the tests:", 1)[1]
    return after.split("```sh\n", 1)[1].split("\n```", 1)[0].strip()


def test_ci_runs_the_readme_test_command_verbatim():
    command = _readme_test_command()
    assert "npm ci --prefix clients/vscode" in command, "the README's one command must install the node modules"
    lines = (ROOT / ".ci" / "run").read_text("utf-8").splitlines()
    assert lines[-1] == command, ".ci/run's last line must be the README's test command"


BENCHMARKS = ROOT / "docs" / "benchmarks.md"
_BENCH_HEADER = "| What (`bench/`) | Baseline | Target | Last measured |"
_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
_SCRIPT = re.compile(r"`(\w+\.(?:py|ts))")


def _readme_benchmark_rows() -> list[list[str]]:
    lines = (ROOT / "README.md").read_text("utf-8").split("\n")
    start = lines.index(_BENCH_HEADER) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


BENCH_ROWS = _readme_benchmark_rows()


def test_the_readme_benchmark_table_has_one_short_line_a_benchmark():
    assert len(BENCH_ROWS) >= 30
    for row in BENCH_ROWS:
        line = "| " + " | ".join(row) + " |"
        assert len(row) == 4 and len(line) <= 220, f"not one short line of four cells: {line}"
        assert _SCRIPT.search(row[0]), f"names no benchmark: {row[0]}"
        assert _DATE.search(row[3]), f"no date for its last figure: {row[3]}"


def _figure_units() -> list[str]:
    """docs/benchmarks.md in the pieces a figure belongs to: each table row, each paragraph."""
    units = []
    for block in BENCHMARKS.read_text("utf-8").split("\n\n"):
        rows = block.strip().splitlines()
        units += rows if rows and rows[0].startswith("|") else [" ".join(rows)]
    return units


@pytest.mark.parametrize("row", BENCH_ROWS, ids=[row[0][:60] for row in BENCH_ROWS])
def test_each_readme_benchmark_figure_is_in_docs_benchmarks(row):
    """A README figure is one docs/benchmarks.md records, on a line naming the same benchmark."""
    script = _SCRIPT.search(row[0]).group(1)
    lines = [unit for unit in _figure_units() if script in unit]
    assert lines, f"docs/benchmarks.md has no figure of {script}"
    last = row[3]
    for date in _DATE.findall(last):
        assert any(date in line for line in lines), f"{script}: {date} is in no figure of docs/benchmarks.md"
    for number in _FIRST_NUMBER.findall(_DATE.sub("", last)):
        assert any(number in line for line in lines), f"{script}: {number} ({last}) is not in docs/benchmarks.md"


def test_every_benchmark_is_described_and_every_command_runs_a_file_that_exists():
    text = BENCHMARKS.read_text("utf-8")
    for script in sorted((ROOT / "bench").glob("*.py")):
        if script.name != "history_adr0141.py":  # the replaced search, a module the benches import
            assert script.name in text, f"docs/benchmarks.md does not describe bench/{script.name}"
    commands = re.findall(r"^(?:python|npm) [^#\n]*", text, flags=re.MULTILINE)
    assert len(commands) >= 20
    for command in commands:
        for path in re.findall(r"\b((?:bench|clients)/[\w/.-]+\.(?:py|ts))", command):
            assert (ROOT / path).exists(), f"docs/benchmarks.md runs {command.strip()!r}: {path} does not exist"
