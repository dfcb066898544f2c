"""The workspace tools: ``search`` and ``read_file`` (docs/architecture.md, "tools/: what a reply may look at")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from imprintd.tools.base import Hit, Source, ToolError
from imprintd.tools.index import WorkspaceIndex
from imprintd.tools.workspace import (
    READ_LIMIT,
    ReadFileTool,
    SearchTool,
    format_hits,
    workspace_tools,
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("".join(f"line {n}: {'x' * 50}\n" for n in range(1, 341)))
    (root / "src" / "small.py").write_text("PORT = 8443\nHOST = 'gateway'\n")
    (root / "empty.txt").write_text("")
    (root / "blob.bin").write_bytes(b"abc\x00def")
    (root / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    (root / "wide.txt").write_text("w" * 9000 + "\nsecond line\n")
    return root


@pytest.fixture
def index(tmp_path: Path, root: Path):
    index = WorkspaceIndex(tmp_path / "index.sqlite3", root)
    index.update()
    yield index
    index.close()


async def test_search_returns_structured_hits_and_compact_text(index):
    tool = SearchTool(index)
    assert tool.spec.name == "search" and tool.spec.parameters["required"] == ["query"]
    assert tool.title({"query": "gateway port"}) == "Searching the workspace for “gateway port”"
    result = await tool.run({"query": "gateway port"})
    assert result.ok and result.subject == "gateway port"
    assert result.hits and result.hits[0].path == "src/small.py"
    assert result.evidence == tuple(hit.id for hit in result.hits)
    first = result.hits[0]
    assert result.text.startswith(f"[hit {first.id}] src/small.py:1-2\nPORT = 8443")
    assert str(first.score) not in result.text


def test_search_text_format_is_pinned():
    # The notes rest on it: a test pins the search tool's text format.
    hits = [
        Hit(id="abc1234567", path="src/a.py", start_line=3, end_line=5, score=2.5, excerpt="one\ntwo"),
        Hit(id="def7654321", path="b.md", start_line=1, end_line=1, score=1.0, excerpt="three"),
    ]
    assert format_hits(hits) == "[hit abc1234567] src/a.py:3-5\none\ntwo\n\n[hit def7654321] b.md:1-1\nthree"


async def test_search_without_hits_is_ok_and_adds_no_evidence(index):
    result = await SearchTool(index).run({"query": "nonexistentword"})
    assert result.ok and result.text == "No results for “nonexistentword” in the workspace."
    assert result.evidence == () and result.hits == ()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "search needs query (a string)"),
        ({"query": " "}, "search: query must be the words to look for, not ' '"),
        ({"query": 7}, "search: query must be a string, not 7"),
        ({"query": "?!"}, "the query '?!' has no words to search for"),
    ],
)
async def test_search_refuses_bad_queries(index, arguments, message):
    with pytest.raises(ToolError, match=re.escape(message)):
        await SearchTool(index).run(arguments)


async def test_read_whole_small_file(root):
    tool = ReadFileTool(root)
    assert tool.title({"path": "src/small.py"}) == "Reading src/small.py"
    result = await tool.run({"path": "./src/small.py"})
    assert result.text == "PORT = 8443\nHOST = 'gateway'"
    assert result.sources == (Source(path="src/small.py", start_line=1, end_line=2),)
    assert result.subject == "src/small.py" and result.evidence == ("src/small.py:1-2",)


async def test_read_is_bounded_to_whole_lines_and_says_where_to_continue(root):
    result = await ReadFileTool(root).run({"path": "src/app.py"})
    body, _, tail = result.text.rpartition("\n")
    assert len(body) <= READ_LIMIT
    shown = body.split("\n")
    assert all(line.startswith(f"line {n}: ") and line.endswith("x" * 50) for n, line in enumerate(shown, 1))
    following = len(shown) + 1
    assert tail == f"… continues at line {following} of 340: call read_file with start_line {following}"
    assert result.continuation == tail and result.content == body  # structure, for notes to leave it out
    assert result.sources == (Source(path="src/app.py", start_line=1, end_line=len(shown)),)

    again = await ReadFileTool(root).run({"path": "src/app.py", "start_line": following})
    assert again.text.startswith(f"line {following}: ")


async def test_read_a_line_range(root):
    tool = ReadFileTool(root)
    assert tool.title({"path": "src/app.py", "start_line": 10, "end_line": 12}) == "Reading src/app.py lines 10–12"
    result = await tool.run({"path": "src/app.py", "start_line": 10, "end_line": 12})
    assert [line.split(":")[0] for line in result.text.split("\n")] == ["line 10", "line 11", "line 12"]
    assert result.sources == (Source(path="src/app.py", start_line=10, end_line=12),)
    # An end past the file is clamped; nothing to continue.
    tail = await tool.run({"path": "src/app.py", "start_line": 339, "end_line": 999})
    assert tail.text.split("\n")[-1].startswith("line 340:")
    assert "continues" not in tail.text and tail.continuation == "" and tail.content == tail.text


async def test_a_line_longer_than_the_limit_is_cut_and_marked(root):
    result = await ReadFileTool(root).run({"path": "wide.txt"})
    first, tail = result.text.split("\n")
    assert len(first) == READ_LIMIT and first.endswith("…")
    assert tail == "… continues at line 2 of 2: call read_file with start_line 2"


async def test_empty_file_reads_as_empty_with_no_evidence(root):
    result = await ReadFileTool(root).run({"path": "empty.txt"})
    assert result.ok and result.text == "empty.txt is empty."
    assert result.sources == () and result.evidence == ()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"path": "src/missing.py"}, "no file src/missing.py in the workspace"),
        ({"path": "src"}, "no file src in the workspace"),
        ({"path": "blob.bin"}, "binary"),
        ({"path": "latin1.txt"}, "not UTF-8"),
        ({"path": "src/app.py", "start_line": 400}, "past its end"),
        ({"path": "src/app.py", "start_line": 0}, "read_file: start_line must be an integer, 1 or more, not 0"),
        ({"path": "src/app.py", "start_line": True}, "start_line must be an integer, 1 or more, not True"),
        ({"path": "src/app.py", "start_line": "3"}, "start_line must be an integer, 1 or more, not '3'"),
        ({"path": "src/app.py", "end_line": 2.5}, "end_line must be an integer, 1 or more, not 2.5"),
        ({"path": "src/app.py", "start_line": 5, "end_line": 4}, "before start_line"),
        ({"path": "../x"}, "'..'"),
        ({}, "read_file needs path (a string)"),
        ({"path": None}, "read_file needs path (a string)"),
        ({"path": 7}, "read_file: path must be a string, not 7"),
    ],
)
async def test_read_refusals(root, arguments, message):
    with pytest.raises(ToolError, match=re.escape(message)):
        await ReadFileTool(root).run(arguments)


async def test_float_line_numbers_that_are_whole_and_nulls_are_accepted(root):
    result = await ReadFileTool(root).run({"path": "src/app.py", "start_line": 2.0, "end_line": 2})
    assert result.text.startswith("line 2:") and "\n" not in result.text
    unbounded = await ReadFileTool(root).run({"path": "src/small.py", "start_line": None, "end_line": None})
    assert unbounded.text == "PORT = 8443\nHOST = 'gateway'"


def test_workspace_tools(index, root):
    tools = workspace_tools(index, root)
    assert [tool.spec.name for tool in tools] == ["search", "read_file"]
