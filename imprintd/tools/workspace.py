"""The workspace tools the coordinator may call: ``search`` and ``read_file``.

docs/architecture.md, "tools/: what a reply may look at": built for one reply from that reply's workspace, search over
the FTS5 index returning structured hits, and a bounded read by path and line range, every
path through ``paths.resolve_in_workspace``. Results carry structure (hits, sources,
evidence) for research notes; ``text`` is only what the model reads.
"""

from __future__ import annotations

import codecs
import errno
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import msgspec

from imprintd.offload import in_worker
from imprintd.tools.base import Hit, Source, Tool, ToolError, ToolResult, parse_arguments, tool_spec
from imprintd.tools.index import WorkspaceIndex
from imprintd.tools.paths import (
    OWN_FILE_REFUSAL,
    OWN_FILES,
    NotRegularFile,
    normalized,
    open_regular_file,
    resolve_in_workspace,
)

#: Characters of file text one read_file call returns.
READ_LIMIT = 4_000
#: Bytes of a file read_file looks at (for its lines and its line count); lines past them
#: are out of its reach. Bounds the work and memory of a read whatever the file's size.
READ_SCAN_BYTES = 8 * 1024 * 1024
#: Bytes of one line kept; the rest of a longer line is read past, and the line shown cut.
MAX_LINE_BYTES = 64 * 1024
SEARCH_LIMIT = 8


def format_hits(hits: Sequence[Hit]) -> str:
    """The search result as the model reads it: per hit ``[hit ID] path:START-END`` and the excerpt.

    Scores and hashes stay out: the model needs where a passage is, not how it ranked.
    A test pins this format.
    """
    return "\n\n".join(f"[hit {hit.id}] {hit.path}:{hit.start_line}-{hit.end_line}\n{hit.excerpt}" for hit in hits)


class SearchArguments(msgspec.Struct, frozen=True, kw_only=True):
    query: Annotated[str, msgspec.Meta(description='Words to look for, e.g. "billing port config".')]


class SearchTool:
    """``search``: full-text search of the workspace's indexed text files."""

    spec = tool_spec(
        "search",
        "Search the workspace's text files for passages about the query. Returns the best "
        "passages with their file path and line range; use read_file to read more around one.",
        SearchArguments,
    )

    def __init__(self, index: WorkspaceIndex, limit: int = SEARCH_LIMIT) -> None:
        self.index = index
        self.limit = limit

    def title(self, arguments: Mapping[str, Any]) -> str:
        return f"Searching the workspace for “{arguments.get('query', '')}”"

    async def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        query = parse_arguments("search", arguments, SearchArguments).query.strip()
        if not query:
            raise ToolError(f"search: query must be the words to look for, not {arguments['query']!r}")
        # SQLite work off the event loop: other replies and short requests keep being served.
        hits = await in_worker(self.index.search, query, self.limit)
        if not hits:
            return ToolResult(text=f"No results for “{query}” in the workspace.", subject=query)
        return ToolResult(
            text=format_hits(hits),
            subject=query,
            evidence=tuple(hit.id for hit in hits),
            hits=tuple(hits),
        )

    async def definition(self, name: str) -> Hit | None:
        """The line of the workspace binding the constant ``name`` (``WorkspaceIndex.definition``)."""
        return await in_worker(self.index.definition, name)


class ReadFileArguments(msgspec.Struct, frozen=True, kw_only=True):
    path: Annotated[str, msgspec.Meta(description='Path relative to the workspace root, e.g. "src/app.py".')]
    start_line: Annotated[int, msgspec.Meta(ge=1, description="First line to read (default 1).")] = 1
    end_line: (
        msgspec.UnsetType | Annotated[int, msgspec.Meta(ge=1, description="Last line to read (default: the end).")]
    ) = msgspec.UNSET

    @classmethod
    def parse(cls, arguments: Mapping[str, Any]) -> ReadFileArguments:
        """Models write null for "not given" and 2.0 for a line number: both are taken as meant."""
        lenient = {
            name: int(value) if isinstance(value, float) and value.is_integer() else value
            for name, value in arguments.items()
            if value is not None
        }
        return parse_arguments("read_file", lenient, cls)


class _Read:
    """The outcome of one bounded read, before it is worded."""

    def __init__(self, lines: list[str], start: int, total: int, cut_line: bool, complete: bool = True) -> None:
        self.lines = lines
        self.start = start
        self.total = total  # lines seen; all of the file's lines only when ``complete``
        self.cut_line = cut_line  # the only line shown was longer than the limit
        self.complete = complete  # False: the file goes on past READ_SCAN_BYTES

    @property
    def end(self) -> int:
        return self.start + len(self.lines) - 1


def read_lines(
    handle: BinaryIO, start: int, end: int | None, limit: int = READ_LIMIT, max_bytes: int | None = None
) -> _Read:
    """Whole lines ``start..end`` of a text file within ``limit`` characters, and its line count.

    Bounded in memory and work whatever the file: at most ``max_bytes`` of it are read (the
    count of a longer file is "at least"), at most ``MAX_LINE_BYTES`` of any line are kept.
    Raises ToolError for a file with a NUL byte anywhere in what is read (binary; a sparse
    file's holes are NULs) or a line that is not UTF-8.
    """
    kept: list[str] = []
    used = total = 0
    full = cut_line = False
    budget = READ_SCAN_BYTES if max_bytes is None else max_bytes
    for raw, whole in _bounded_lines(handle, budget):
        total += 1
        if full or total < start or (end is not None and total > end):
            continue
        line = _decode_line(raw, total, whole)
        cost = len(line) + (1 if kept else 0)
        if used + cost > limit:
            if not kept:  # one line longer than the limit: show its start, marked as cut
                kept.append(line[: limit - 1] + "…")
                cut_line = True
            full = True
            continue
        kept.append(line)
        used += cost
    complete = handle.read(1) == b""
    return _Read(kept, start, total, cut_line, complete)


def _bounded_lines(handle: BinaryIO, budget: int) -> Iterator[tuple[bytes, bool]]:
    """The file's lines as bytes, within ``budget`` bytes: (at most ``MAX_LINE_BYTES`` of
    the line, whether that is the whole line)."""
    while budget > 0:
        raw = handle.readline(min(MAX_LINE_BYTES, budget))
        if not raw:
            return
        budget -= len(raw)
        _refuse_nul(raw)
        whole = True
        if not raw.endswith(b"\n"):
            budget, whole = _skip_rest_of_line(handle, budget)
        yield raw, whole


def _skip_rest_of_line(handle: BinaryIO, budget: int) -> tuple[int, bool]:
    """Read past the rest of an overlong line without keeping it: (budget left, whether
    there was nothing to skip)."""
    nothing = True
    while budget > 0:
        piece = handle.readline(min(1 << 16, budget))
        if not piece:
            break
        nothing = False
        budget -= len(piece)
        _refuse_nul(piece)
        if piece.endswith(b"\n"):
            break
    return budget, nothing


def _refuse_nul(data: bytes) -> None:
    if b"\x00" in data:
        raise ToolError("it is a binary file (it holds NUL bytes), not text")


def _decode_line(raw: bytes, number: int, whole: bool) -> str:
    # An overlong line was cut at a byte count, perhaps inside a character: the incremental
    # decoder leaves such an incomplete tail out instead of calling the line undecodable.
    decoder = codecs.getincrementaldecoder("utf-8-sig" if number == 1 else "utf-8")()
    try:
        return decoder.decode(raw, final=whole).rstrip("\r\n")
    except UnicodeDecodeError:
        raise ToolError(f"line {number} is not UTF-8 text; it is not a text file") from None


class ReadFileTool:
    """``read_file``: a bounded read of one workspace file by path and line range."""

    spec = tool_spec(
        "read_file",
        f"Read a text file of the workspace by its relative path, optionally from start_line to "
        f"end_line (1-based, inclusive). Returns at most {READ_LIMIT:,} characters of whole "
        "lines and says where to continue.",
        ReadFileArguments,
    )

    def __init__(self, root: Path, limit: int = READ_LIMIT) -> None:
        self.root = Path(root)
        self.limit = limit

    def title(self, arguments: Mapping[str, Any]) -> str:
        path = arguments.get("path", "")
        start, end = arguments.get("start_line"), arguments.get("end_line")
        if start is not None and end is not None:
            return f"Reading {path} lines {start}–{end}"
        if start is not None:
            return f"Reading {path} from line {start}"
        if end is not None:
            return f"Reading {path} up to line {end}"
        return f"Reading {path}"

    async def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        return await in_worker(self._run, dict(arguments))

    def _run(self, arguments: Mapping[str, Any]) -> ToolResult:
        parsed = ReadFileArguments.parse(arguments)
        relative, start = parsed.path, parsed.start_line
        end = None if parsed.end_line is msgspec.UNSET else parsed.end_line
        if end is not None and end < start:
            raise ToolError(f"read_file: end_line {end} is before start_line {start}")
        resolved = resolve_in_workspace(self.root, relative)
        shown = normalized(relative)
        real_root = self.root.resolve()
        try:
            # The resolved path holds no symlink; one found on the way now was swapped in
            # since, and is refused rather than followed.
            with open_regular_file(real_root, resolved.relative_to(real_root).parts) as handle:
                # Asked of the open file: a link to one, or one swapped in, is the file read.
                own = OWN_FILES.holds(os.fstat(handle.fileno()))
                read = None if own else read_lines(handle, start, end, self.limit)
        except ToolError as error:
            raise ToolError(f"cannot read {shown}: {error}") from None
        except (FileNotFoundError, NotRegularFile):
            raise ToolError(f"no file {shown} in the workspace") from None
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise ToolError(
                    f"refused path {shown!r}: it changed while being opened (a symbolic link "
                    "or a file now stands on its way); links are not followed"
                ) from None
            raise ToolError(f"cannot read {shown}: {error.strerror or error}") from None
        if read is None:
            raise ToolError(f"refused path {shown!r}: {OWN_FILE_REFUSAL}")
        return self._result(shown, read, end)

    @staticmethod
    def _result(path: str, read: _Read, end: int | None) -> ToolResult:
        if read.total == 0 and read.complete:
            return ToolResult(text=f"{path} is empty.", subject=path)
        if not read.lines and read.complete:
            raise ToolError(f"{path} has {read.total} lines; start_line {read.start} is past its end")
        if not read.lines:
            raise ToolError(
                f"start_line {read.start} of {path} is past the first {_scan_size()} "
                f"({read.total} lines), which is all read_file reads of a file"
            )
        text = "\n".join(read.lines)
        last_wanted = min(end, read.total) if end is not None else read.total
        count = f"{read.total}" if read.complete else f"at least {read.total}"
        continuation = ""
        if read.end < last_wanted:
            following = read.end + 1
            continuation = f"… continues at line {following} of {count}: call read_file with start_line {following}"
            text += "\n" + continuation
        elif not read.complete and (end is None or end > read.end):
            text += f"\n(read_file reads only the first {_scan_size()} of a file; this is where they end.)"
        source = Source(path=path, start_line=read.start, end_line=read.end)
        return ToolResult(
            text=text,
            subject=path,
            evidence=(f"{path}:{read.start}-{read.end}",),
            sources=(source,),
            continuation=continuation,
        )


def _scan_size() -> str:
    mib = READ_SCAN_BYTES / (1024 * 1024)
    return f"{mib:g} MiB"


#: What the workspace tools offer the model, known without an index (``imprint/context``).
WORKSPACE_SPECS = (SearchTool.spec, ReadFileTool.spec)


def workspace_tools(index: WorkspaceIndex, root: Path) -> list[Tool]:
    """The workspace tools for one reply: search over ``index`` and reads inside ``root``."""
    return [SearchTool(index), ReadFileTool(root)]
