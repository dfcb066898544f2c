"""The workspace index: text files chunked into SQLite FTS5 (docs/architecture.md, "Storage").

Search runs over an index of the workspace's text files, incremental by mtime and size,
skipping binaries, ignored and secret-bearing files, and returns structured hits (ADR
0127 builds notes from them). The index is rebuildable, so it lives in its own database in
the cache dir (``settings.cache_dir()``), apart from the conversations in the data dir: a
session with persistence off can search the workspace and still leave the data dir
untouched. ``WorkspaceIndex`` opens its own apsw connections so an update can run in a
worker thread while WAL lets other requests keep reading.

Layout: ``workspace_files`` has one row per file seen (``indexed`` = 0 for a file skipped as
binary or too large, so it is not reread until it changes) and the rowid range of its
chunks (``first_chunk``..``last_chunk``). ``workspace_chunks`` is FTS5; a file's chunks get
consecutive rowids, so a changed file's chunks are deleted by one rowid range, which FTS5
answers without scanning the table. (Dense rowids rather than ``file_id << 20 | n``: the
gaps cost 12% more index and as much more insert time in FTS5's delta-encoded doclists.)
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import apsw
import msgspec

from imprintd.private import private_database
from imprintd.store.sqlite import BUSY_TIMEOUT_MS, StoreError, immediate, switch_to_wal
from imprintd.tools.base import Hit, ToolError
from imprintd.tools.paths import OWN_FILES, is_secret_name, is_shown_name, open_regular_file

#: Files larger than this are recorded but not read (generated data, logs, dumps).
MAX_FILE_BYTES = 1 << 20
#: A NUL byte in this many leading bytes marks a binary file (as git and grep decide); a
#: NUL anywhere in what is read does too, so no NUL ever reaches the model as text.
BINARY_PROBE_BYTES = 8192
CHUNK_LINES = 40
CHUNK_OVERLAP = 5
#: Files per write transaction: small enough that readers and the store's writers wait
#: briefly, large enough that commits do not dominate.
BATCH_FILES = 500
EXCERPT_CHARS = 600
#: Words of a query sent to FTS5; the rest only slow the OR query down.
MAX_QUERY_WORDS = 32


#: Folders never indexed: tool caches, dependencies and build output, rebuilt or fetched
#: rather than written, and large enough to drown the user's own files in search.
IGNORED_DIRS: frozenset[str] = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".jj",
        "node_modules",
        "bower_components",
        ".venv",
        "venv",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
        ".eggs",
        "dist",
        "build",
        "target",
        ".next",
        ".nuxt",
        ".svelte-kit",
        ".gradle",
        ".cache",
        ".parcel-cache",
        ".terraform",
        ".idea",
        "coverage",
        "htmlcov",
    }
)

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS workspace_files (
    id        INTEGER PRIMARY KEY,
    workspace TEXT NOT NULL,
    path      TEXT NOT NULL,
    mtime_ns  INTEGER NOT NULL,
    size      INTEGER NOT NULL,
    indexed   INTEGER NOT NULL CHECK (indexed IN (0, 1)),
    first_chunk INTEGER,  -- rowids of its chunks in workspace_chunks; NULL: none
    last_chunk  INTEGER,
    UNIQUE (workspace, path)
) STRICT;

-- path is indexed too (weighted low in bm25) so "billing config" finds src/billing/config.py;
-- workspace and the line numbers are only carried.
CREATE VIRTUAL TABLE IF NOT EXISTS workspace_chunks USING fts5(
    workspace UNINDEXED,
    path,
    start_line UNINDEXED,
    end_line UNINDEXED,
    text,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
"""

#: The table's persistent ``rank``: bm25 with column weights in table order (workspace,
#: path, start_line, end_line, text). Set as ``rank`` rather than called in the query so
#: ``ORDER BY rank`` takes FTS5's own fast path.
RANK_SQL = "INSERT INTO workspace_chunks (workspace_chunks, rank) VALUES ('rank', 'bm25(0.0, 0.5, 0.0, 0.0, 1.0)')"


def migrate_workspace_index(conn: apsw.Connection) -> None:
    """Create the index tables on ``conn`` if they are missing; does not commit.

    Idempotent: every connection ``open_index_db`` makes calls it, and on an existing schema
    it writes nothing.
    """
    exists = conn.execute("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'workspace_chunks'").get
    conn.execute(SCHEMA_SQL)
    if not exists:
        conn.execute(RANK_SQL)


@dataclass(frozen=True)
class IndexLimits:
    """How much of a workspace one index holds, and how long one update may take.

    A folder such as ``/`` or a home folder holds hundreds of thousands of files: the index
    keeps the first ``max_files`` the walk finds (shallow folders first) and stops adding
    files once their sizes reach ``max_bytes``, which also bounds the walk. Past ``deadline``
    (a ``time.monotonic()`` value) an update stops between batches of files read, keeping
    what it wrote; it always writes one batch, so the next update goes on from there even
    when the walk alone took the time.
    """

    max_files: int
    max_bytes: int
    deadline: float | None = None


#: Why an update did not cover the whole workspace (``IndexStats.limited_by``).
LIMITED_BY_FILES, LIMITED_BY_BYTES, LIMITED_BY_TIME = "files", "bytes", "time"


class IndexStats(msgspec.Struct, frozen=True, kw_only=True):
    """What one ``update`` did."""

    scanned: int  # candidate files found on disk
    indexed: int  # files (re)chunked this run
    skipped: int  # changed files recorded but not chunked: binary, undecodable, too large
    unchanged: int  # same mtime and size as indexed before
    removed: int  # gone from disk (or now ignored) and dropped from the index
    chunks: int  # chunks written this run
    limited_by: str = ""  # "files", "bytes" or "time" when the update stopped at a limit


@dataclass(frozen=True)
class _Seen:
    path: str
    mtime_ns: int
    size: int


@dataclass(frozen=True)
class _Chunk:
    start_line: int
    end_line: int
    text: str


ProgressCallback = Callable[[int, int], None]
ConnectionFactory = Callable[[], apsw.Connection]


# --- what to index --------------------------------------------------------------------------


class IgnoreRules:
    """The root ``.gitignore``'s simple patterns plus ``IGNORED_DIRS``.

    Deliberately not a gitignore engine: one file (the root's), no negation (``!``), no
    escaping, no nested ``.gitignore`` files. Supported: comments, blank lines, ``name``
    and globs matched against every path component, ``dir/`` matching folders only, and
    patterns containing ``/`` matched against the whole relative path from the root
    (``fnmatch``'s ``*`` also crosses ``/``, which makes ``a/**/b`` work roughly). Missing
    a rule only means a file is indexed that git ignores; secrets are refused separately.
    """

    def __init__(self, patterns: Sequence[str] = ()) -> None:
        self.names: list[str] = []  # matched against any component
        self.dir_names: list[str] = []  # matched against folder components only
        self.anchored: list[str] = []  # matched against the relative path
        self.anchored_dirs: list[str] = []
        for raw in patterns:
            line = raw.rstrip("\n\r").rstrip()
            if not line or line.startswith(("#", "!")):
                continue
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            if not line:
                continue
            if "/" in line:
                target = self.anchored_dirs if dir_only else self.anchored
                target.append(line.lstrip("/"))
            else:
                (self.dir_names if dir_only else self.names).append(line)

    @classmethod
    def for_root(cls, root: Path) -> IgnoreRules:
        try:
            with open_regular_file(root, ".gitignore") as handle:  # a FIFO here must not hang the scan
                text = handle.read(MAX_FILE_BYTES).decode("utf-8", errors="replace")
        except OSError:
            return cls()
        return cls(text.splitlines())

    def ignores_dir(self, relative: str, name: str) -> bool:
        if name in IGNORED_DIRS or name.endswith(".egg-info"):
            return True
        return self._matches(relative, name, self.names + self.dir_names, self.anchored + self.anchored_dirs)

    def ignores_file(self, relative: str, name: str) -> bool:
        return self._matches(relative, name, self.names, self.anchored)

    @staticmethod
    def _matches(relative: str, name: str, names: list[str], anchored: list[str]) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in names) or any(
            fnmatch.fnmatchcase(relative, p) for p in anchored
        )


def scan_workspace(root: Path, rules: IgnoreRules | None = None) -> Iterator[_Seen]:
    """Every candidate file under ``root``: not ignored, not secret, not a symlink, not a
    name with control characters or undecodable bytes.

    Symlinks are never followed: a link may lead outside the workspace (its content would
    then reach search results) or loop. A name with a newline would forge lines of the
    search result (``[hit …] path:lines``); ``read_file`` refuses such names too.
    """
    rules = rules or IgnoreRules.for_root(root)
    # Breadth first: when the index is bounded, the files it keeps are the shallow ones.
    pending: deque[tuple[str, str]] = deque([(str(root), "")])
    while pending:
        directory, prefix = pending.popleft()
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)  # the same first files each time
        except OSError:
            continue  # unreadable folder: skip it rather than fail the whole update
        for entry in entries:
            relative = f"{prefix}{entry.name}"
            # Only the entry's own name: its folders were checked on the way down, so this
            # is ``is_secret_path(relative)`` without rechecking every parent.
            if entry.is_symlink() or is_secret_name(entry.name) or not is_shown_name(entry.name):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not rules.ignores_dir(relative, entry.name):
                        pending.append((entry.path, relative + "/"))
                elif entry.is_file(follow_symlinks=False):
                    if not rules.ignores_file(relative, entry.name):
                        stat = entry.stat(follow_symlinks=False)
                        yield _Seen(relative, stat.st_mtime_ns, stat.st_size)
            except OSError:
                continue


def read_text_file(
    root: Path,
    relative: str,
    size: int,
    mtime_ns: int | None = None,
    own: frozenset[tuple[int, int]] = frozenset(),
) -> str | None:
    """The text of the workspace file ``relative``, or None for a binary, undecodable or
    oversized file, one that is no longer the regular file the scan saw, or one of the
    daemon's own files (``own``: their device and inode, ``paths.OWN_FILES``).

    Opened with ``paths.open_regular_file`` (no symlink followed, a FIFO refused without
    waiting); a file whose size or mtime differ from the scan's is left for the next update,
    which will see the change.
    """
    if size > MAX_FILE_BYTES:
        return None
    try:
        with open_regular_file(root, relative) as handle:
            opened = os.fstat(handle.fileno())
            if opened.st_size != size or mtime_ns is not None and opened.st_mtime_ns != mtime_ns:
                return None
            if (opened.st_dev, opened.st_ino) in own:
                return None
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_FILE_BYTES or b"\x00" in data:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def split_lines(text: str) -> list[str]:
    """Lines as editors number them: split on ``\\n`` only, ``\\r`` of CRLF dropped.

    ``str.splitlines`` would also split on form feeds and Unicode separators and so put
    hits on the wrong lines.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if "\r" not in text:
        return lines
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def chunk_lines(lines: Sequence[str], size: int = CHUNK_LINES, overlap: int = CHUNK_OVERLAP) -> list[_Chunk]:
    """Chunks of ``size`` lines, each starting ``size - overlap`` lines after the last.

    The overlap keeps a passage that straddles a boundary whole in at least one chunk.
    Blank-only chunks are left out; they can never match.
    """
    step = max(1, size - overlap)
    chunks: list[_Chunk] = []
    start = 0
    while start < len(lines):
        end = min(start + size, len(lines))
        text = "\n".join(lines[start:end])
        if text.strip():
            chunks.append(_Chunk(start + 1, end, text))
        if end == len(lines):
            break
        start += step
    return chunks


# --- search helpers -------------------------------------------------------------------------

_WORD = re.compile(r"\w+", re.UNICODE)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Chunks holding a name that ``definition`` looks through for the line binding it.
DEFINITION_CHUNKS = 200
_OPEN, _CLOSE = "\x02", "\x03"


def match_expression(query: str) -> str:
    """An FTS5 MATCH expression for free text: every word quoted, joined with OR.

    Quoting makes FTS5 syntax in the query (``AND``, ``NEAR``, ``*``, ``:``, quotes) plain
    words; OR lets bm25 rank chunks by how many of the words they hold.
    """
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))[:MAX_QUERY_WORDS]
    if not words:
        raise ToolError(f"the query {query!r} has no words to search for")
    return " OR ".join(f'"{word}"' for word in words)


def binding_of(name: str) -> str:
    """A regular expression for a line's start binding ``name``: ``NAME = …``, ``NAME: type = …``."""
    return rf"{re.escape(name)}[ \t]*(?::[^=\n]*)?=(?!=)"


def hit_id(path: str, start_line: int) -> str:
    """Stable for the same chunk across searches and re-indexing (research notes merge by it)."""
    return hashlib.blake2s(f"{path}\x00{start_line}".encode(), digest_size=5).hexdigest()


def excerpt_lines(text: str, highlighted: str, limit: int = EXCERPT_CHARS) -> tuple[int, int, str]:
    """The lines of a chunk worth showing: (first line offset, last line offset, text).

    Starts a couple of lines above the first matched token (``highlighted`` is the chunk
    with FTS5 ``highlight()`` markers) and takes whole lines up to ``limit`` characters; a
    single line longer than ``limit`` is cut around the match and marked with "…".
    """
    lines = text.split("\n")
    if len(text) <= limit:
        return 0, len(lines) - 1, text
    position = highlighted.find(_OPEN)
    match_line = text.count("\n", 0, position) if position >= 0 else 0
    first = max(0, match_line - 2)
    if len(lines[match_line]) > limit:
        return match_line, match_line, _cut_line(lines[match_line], highlighted, position, limit)
    last = first
    used = len(lines[first])
    while last + 1 < len(lines) and used + 1 + len(lines[last + 1]) <= limit:
        last += 1
        used += 1 + len(lines[last])
    while first > 0 and last < match_line:  # the leading context pushed the match out
        used -= len(lines[first]) + 1
        first += 1
        while last + 1 < len(lines) and used + 1 + len(lines[last + 1]) <= limit:
            last += 1
            used += 1 + len(lines[last])
    return first, last, "\n".join(lines[first : last + 1])


def _cut_line(line: str, highlighted: str, position: int, limit: int) -> str:
    line_start = highlighted.rfind("\n", 0, position) + 1
    column = max(0, position - line_start)
    begin = max(0, min(column - limit // 4, len(line) - limit + 2))
    piece = line[begin : begin + limit - 2]
    return ("…" if begin > 0 else "") + piece + ("…" if begin + len(piece) < len(line) else "")


# --- the index ------------------------------------------------------------------------------


def _drop_chunks(conn: apsw.Connection, ranges: Sequence[tuple[int, int]]) -> None:
    conn.executemany("DELETE FROM workspace_chunks WHERE rowid BETWEEN ? AND ?", ranges)


def open_index_db(path: Path | str) -> apsw.Connection:
    """A connection for the index on ``path``: WAL, busy timeout, schema present.

    Raises StoreError naming the file when it cannot be opened or used (a cache dir that is
    not a writable folder), so the client hears which file and why.
    """
    try:
        # It holds workspace text: 0600 whatever the umask (and so its -wal and -shm).
        private_database(Path(path))
        conn = apsw.Connection(str(path))
    except (apsw.Error, OSError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise StoreError(
            f"cannot open the workspace index {path}: {reason}. Set IMPRINT_CACHE_DIR to a folder this user can write."
        ) from None
    try:
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        switch_to_wal(conn, BUSY_TIMEOUT_MS)  # one cache file for every workspace and daemon
        # NORMAL, unlike the store's FULL: the index is a cache rebuilt from the files, so a
        # commit lost to power failure costs a re-read, not a message.
        conn.pragma("synchronous", "NORMAL")
        migrate_workspace_index(conn)
    except apsw.BusyError:
        conn.close()  # another daemon at work on it: deleting the cache would not help
        raise StoreError(
            f"the workspace index {path} is busy: another process kept it locked for more than "
            f"{BUSY_TIMEOUT_MS / 1000:g} s (another imprintd indexing?). Try again."
        ) from None
    except apsw.Error as error:
        conn.close()
        raise StoreError(
            f"cannot use the workspace index {path}: {error}. It is a cache: "
            "delete it, or set IMPRINT_CACHE_DIR to another folder."
        ) from None
    return conn


class WorkspaceIndex:
    """The FTS5 index of one workspace root.

    ``db`` is the database path or a factory of fresh connections (whose schema is already
    migrated). ``update`` opens a connection of its own for its run, so it can run in a
    worker thread while ``search`` uses another.
    """

    def __init__(self, db: Path | str | ConnectionFactory, root: Path) -> None:
        self.root = Path(root).resolve()
        self.workspace = str(self.root)
        self._factory: ConnectionFactory = db if callable(db) else (lambda: open_index_db(db))
        self._reader: apsw.Connection | None = None
        self._reader_lock = threading.Lock()
        self._own: frozenset[tuple[int, int]] = frozenset()
        #: Why the last update stopped short of the whole workspace ("" when it did not);
        #: set once the walk is done, before progress reports the first file.
        self.limited_by = ""

    # -- indexing --

    def update(self, progress: ProgressCallback | None = None, limits: IndexLimits | None = None) -> IndexStats:
        """Bring the index up to date with the files on disk; report (done, total) files.

        Only new files and files whose mtime or size changed are read and re-chunked;
        files gone from disk, or now ignored or secret, are dropped; so are files past
        ``limits.max_files`` or ``limits.max_bytes``. Past ``limits.deadline`` it stops
        between batches (``IndexStats.limited_by`` says which limit stopped it).
        """
        if not self.root.is_dir():
            # Refuse rather than scan nothing: an unmounted folder would empty the index.
            raise FileNotFoundError(f"the workspace folder {self.root} does not exist")
        conn = self._factory()
        try:
            return self._update(conn, progress, limits)
        finally:
            conn.close()

    def _within(self, scanned: Iterable[_Seen], limits: IndexLimits | None) -> dict[str, _Seen]:
        """The scanned files the index keeps, in walk order; sets ``limited_by``."""
        self.limited_by = ""
        kept: dict[str, _Seen] = {}
        total_bytes = 0
        for seen in scanned:
            if limits is not None:
                read_bytes = seen.size if seen.size <= MAX_FILE_BYTES else 0  # larger ones are not read
                if len(kept) >= limits.max_files:
                    self.limited_by = LIMITED_BY_FILES
                elif total_bytes + read_bytes > limits.max_bytes:
                    self.limited_by = LIMITED_BY_BYTES
                if self.limited_by:
                    break
                total_bytes += read_bytes
            kept[seen.path] = seen
        return kept

    def _update(
        self, conn: apsw.Connection, progress: ProgressCallback | None, limits: IndexLimits | None
    ) -> IndexStats:
        self._own = OWN_FILES.identities()  # asked once per update: the log may be new since
        on_disk = self._within(scan_workspace(self.root), limits)
        known = {
            path: (file_id, mtime_ns, size)
            for file_id, path, mtime_ns, size in conn.execute(
                "SELECT id, path, mtime_ns, size FROM workspace_files WHERE workspace = ?",
                (self.workspace,),
            )
        }
        changed = [
            seen
            for path, seen in sorted(on_disk.items())
            if known.get(path, (None, None, None))[1:] != (seen.mtime_ns, seen.size)
        ]
        # Files past a bound leave the index too: it stays bounded.
        gone = sorted(known.keys() - on_disk.keys())
        total = len(changed)
        if progress:
            progress(0, total)
        if gone:
            with immediate(conn):
                self._remove(conn, gone)
        indexed = skipped = chunks = done = 0
        deadline = limits.deadline if limits is not None else None
        for prepared in self._prepared_batches(changed, deadline):
            with immediate(conn):
                chunks += self._write_batch(conn, prepared)
            written = sum(file_chunks is not None for _, file_chunks in prepared)
            indexed += written
            skipped += len(prepared) - written
            done += len(prepared)
            if progress:
                progress(done, total)
        return IndexStats(
            scanned=len(on_disk),
            indexed=indexed,
            skipped=skipped,
            unchanged=len(on_disk) - total,
            removed=len(gone),
            chunks=chunks,
            limited_by=self.limited_by,
        )

    def _prepared_batches(
        self, changed: list[_Seen], deadline: float | None = None
    ) -> Iterator[list[tuple[_Seen, list[_Chunk] | None]]]:
        """Batches of changed files, read and chunked outside the write transaction so the
        write lock is held only to write; none started past ``deadline``.

        (Preparing the next batch in a helper thread while this one is written was measured
        on the bench and gained no wall time while costing CPU; so it is done in line.)
        """
        for start in range(0, len(changed), BATCH_FILES):
            if start and deadline is not None and time.monotonic() > deadline:
                self.limited_by = LIMITED_BY_TIME
                return
            yield self._prepare(changed[start : start + BATCH_FILES])

    def _prepare(self, batch: list[_Seen]) -> list[tuple[_Seen, list[_Chunk] | None]]:
        return [(seen, self._chunks_of(seen)) for seen in batch]

    def _chunks_of(self, seen: _Seen) -> list[_Chunk] | None:
        text = read_text_file(self.root, seen.path, seen.size, seen.mtime_ns, self._own)
        return None if text is None else chunk_lines(split_lines(text))

    # Statement order matters for speed. FTS5 flushes its pending in-memory index to a new
    # segment whenever SQLite opens a statement savepoint while it is in the transaction,
    # which any write to workspace_files does (it has a UNIQUE constraint). Interleaving the
    # two per file made one tiny segment per file (3x slower than raw FTS5 inserts); so
    # every workspace_files write of a batch comes first, then the FTS5 deletes and inserts.

    def _write_batch(self, conn: apsw.Connection, prepared: list[tuple[_Seen, list[_Chunk] | None]]) -> int:
        """Record a batch of changed files and replace their chunks; the chunk count written.

        Runs inside the batch's write transaction and rereads the batch's rows there: another
        update of the same workspace (a second reply, a second daemon on the same database)
        may have written them since this one scanned, and must not be duplicated.
        """
        current = {
            path: (file_id, mtime_ns, size, first, last)
            for file_id, path, mtime_ns, size, first, last in conn.execute(
                "SELECT id, path, mtime_ns, size, first_chunk, last_chunk FROM workspace_files "
                "WHERE workspace = ? AND path IN (SELECT value FROM json_each(?))",
                (self.workspace, json.dumps([seen.path for seen, _ in prepared])),
            )
        }
        # Ids and rowids are allocated here rather than read back one INSERT at a time; the
        # IMMEDIATE transaction holds the write lock, so no other writer can take them.
        next_id, next_chunk = conn.execute(  # an aggregate: always one row
            "SELECT coalesce(max(id), 0) + 1, coalesce(max(last_chunk), 0) + 1 FROM workspace_files"
        ).fetchone() or (1, 1)
        new_rows: list[tuple] = []
        updates: list[tuple] = []
        stale: list[tuple[int, int]] = []
        rows: list[tuple] = []
        for seen, file_chunks in prepared:
            existing = current.get(seen.path)
            if existing is not None and existing[1:3] == (seen.mtime_ns, seen.size):
                continue  # another update already indexed this very version
            chunks = file_chunks or []
            first, last = (next_chunk, next_chunk + len(chunks) - 1) if chunks else (None, None)
            rows += [
                (next_chunk + n, self.workspace, seen.path, c.start_line, c.end_line, c.text)
                for n, c in enumerate(chunks)
            ]
            next_chunk += len(chunks)
            fields = (seen.mtime_ns, seen.size, int(file_chunks is not None), first, last)
            if existing is None:
                new_rows.append((next_id, self.workspace, seen.path, *fields))
                next_id += 1
            else:
                updates.append((*fields, existing[0]))
                if existing[3] is not None:
                    stale.append((existing[3], existing[4]))
        conn.executemany(
            "INSERT INTO workspace_files (id, workspace, path, mtime_ns, size, indexed, first_chunk, last_chunk) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            new_rows,
        )
        conn.executemany(
            "UPDATE workspace_files SET mtime_ns = ?, size = ?, indexed = ?, first_chunk = ?, last_chunk = ? "
            "WHERE id = ?",
            updates,
        )
        _drop_chunks(conn, stale)
        conn.executemany(
            "INSERT INTO workspace_chunks (rowid, workspace, path, start_line, end_line, text) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
        return len(rows)

    def _remove(self, conn: apsw.Connection, paths: Sequence[str]) -> None:
        ranges = list(
            conn.execute(
                "DELETE FROM workspace_files WHERE workspace = ? AND path IN (SELECT value FROM json_each(?)) "
                "RETURNING first_chunk, last_chunk",
                (self.workspace, json.dumps(list(paths))),
            )
        )
        _drop_chunks(conn, [(first, last) for first, last in ranges if first is not None])

    # -- searching --

    def search(self, query: str, limit: int = 8) -> list[Hit]:
        """The best chunks for ``query`` by bm25, as hits with workspace-relative paths.

        Raises ToolError for a query without words.
        """
        expression = match_expression(query)
        rows = self._read(
            "SELECT path, start_line, end_line, text, rank, highlight(workspace_chunks, 4, ?, ?) "
            "FROM workspace_chunks WHERE workspace_chunks MATCH ? AND workspace = ? "
            "ORDER BY rank LIMIT ?",
            (_OPEN, _CLOSE, expression, self.workspace, max(1, int(limit))),
        )
        return [self._hit(*row) for row in rows]

    def definition(self, name: str) -> Hit | None:
        """The line that binds the constant ``name`` (``NAME = …``, ``NAME: type = …``), as a
        one-line hit (cut past ``EXCERPT_CHARS``), or None. The least indented binding wins
        (module level before a class's), then the first in path order; ``name`` is a single identifier.
        """
        if not _IDENTIFIER.fullmatch(name):
            raise ToolError(f"definition: {name!r} is not an identifier")
        binding = re.compile(rf"^([ \t]*){binding_of(name)}", re.MULTILINE)
        rows = self._read(
            "SELECT path, start_line, text FROM workspace_chunks WHERE workspace_chunks MATCH ? AND workspace = ? "
            "ORDER BY path, start_line LIMIT ?",
            (f'"{name.lower()}"', self.workspace, DEFINITION_CHUNKS),
        )
        best: tuple[int, Hit] | None = None
        for path, start_line, text in rows:
            for match in binding.finditer(text):
                number = start_line + text.count("\n", 0, match.start())
                end = text.find("\n", match.start())
                line = text[match.start() : None if end < 0 else end].strip()
                if len(line) > EXCERPT_CHARS:  # a minified file's line: the binding, not the file
                    line = line[: EXCERPT_CHARS - 1] + "…"
                if best is None or len(match.group(1)) < best[0]:
                    hit = Hit(
                        id=hit_id(path, number), path=path, start_line=number, end_line=number, score=0.0, excerpt=line
                    )
                    best = (len(match.group(1)), hit)
        return None if best is None else best[1]

    @staticmethod
    def _hit(path: str, start_line: int, end_line: int, text: str, bm25: float, highlighted: str) -> Hit:
        first, last, excerpt = excerpt_lines(text, highlighted)
        return Hit(
            id=hit_id(path, start_line),
            path=path,
            start_line=start_line + first,
            end_line=start_line + last,
            # bm25() is lower for better matches; a hit's score is higher for better ones.
            score=round(-bm25, 4),
            excerpt=excerpt,
        )

    def _read(self, sql: str, bindings: tuple) -> list[tuple]:
        with self._reader_lock:
            if self._reader is None:
                self._reader = self._factory()
            return list(self._reader.execute(sql, bindings))

    def close(self) -> None:
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
