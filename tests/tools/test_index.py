"""The FTS5 workspace index: incremental updates, what it skips, and the hits it returns."""

from __future__ import annotations

import os
from pathlib import Path

import apsw
import pytest

from imprintd.store import StoreError
from imprintd.store import sqlite as sqlite_mod
from imprintd.tools import index as index_mod
from imprintd.tools.base import ToolError
from imprintd.tools.index import (
    EXCERPT_CHARS,
    MAX_FILE_BYTES,
    IgnoreRules,
    WorkspaceIndex,
    chunk_lines,
    excerpt_lines,
    match_expression,
    migrate_workspace_index,
    open_index_db,
    split_lines,
)


def numbered(prefix: str, count: int, special: dict[int, str] | None = None) -> str:
    special = special or {}
    return "".join(f"{special.get(n, f'{prefix} line {n}')}\n" for n in range(1, count + 1))


def bump_mtime(path: Path) -> None:
    """A different mtime without sleeping: set it explicitly."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src" / "billing").mkdir(parents=True)
    (root / "src" / "billing" / "config.py").write_text(
        numbered("config", 100, {57: "GATEWAY_PORT = 8443  # the transaction gateway listens here"})
    )
    (root / "src" / "app.py").write_text(numbered("app", 30, {3: "from billing import config"}))
    (root / "README.md").write_text("# Demo\n\nThe zebra gateway routes payments.\n")
    return root


@pytest.fixture
def index(tmp_path: Path, root: Path) -> WorkspaceIndex:
    index = WorkspaceIndex(tmp_path / "index.sqlite3", root)
    yield index
    index.close()


def indexed_paths(index: WorkspaceIndex, db: Path) -> dict[str, int]:
    conn = apsw.Connection(str(db))
    try:
        return dict(conn.execute("SELECT path, indexed FROM workspace_files"))
    finally:
        conn.close()


def test_migration_creates_tables_and_is_idempotent(tmp_path):
    conn = apsw.Connection(str(tmp_path / "db.sqlite3"))
    with conn:
        migrate_workspace_index(conn)
    migrate_workspace_index(conn)
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_schema")}
    assert {"workspace_files", "workspace_chunks"} <= names
    conn.close()


def test_first_update_indexes_every_text_file_and_reports_progress(index):
    progress: list[tuple[int, int]] = []
    stats = index.update(lambda done, total: progress.append((done, total)))
    assert (stats.scanned, stats.indexed, stats.unchanged, stats.removed) == (3, 3, 0, 0)
    assert progress[0] == (0, 3) and progress[-1] == (3, 3)
    assert all(total == 3 for _, total in progress)
    assert [done for done, _ in progress] == sorted(done for done, _ in progress)


def test_unchanged_workspace_reindexes_nothing(index):
    index.update()
    progress: list[tuple[int, int]] = []
    stats = index.update(lambda done, total: progress.append((done, total)))
    assert (stats.indexed, stats.unchanged, stats.removed, stats.chunks) == (0, 3, 0, 0)
    assert progress == [(0, 0)]


def test_touching_one_file_reindexes_only_it(index, root):
    index.update()
    config = root / "src" / "billing" / "config.py"
    config.write_text(config.read_text().replace("8443", "9999"))  # same size …
    bump_mtime(config)  # … so only the mtime tells
    stats = index.update()
    assert (stats.indexed, stats.unchanged) == (1, 2)
    assert [hit.path for hit in index.search("9999")] == ["src/billing/config.py"]
    assert index.search("8443") == []


def test_size_change_alone_is_noticed(index, root):
    index.update()
    readme = root / "README.md"
    mtime = readme.stat().st_mtime_ns
    readme.write_text("# Demo\n\nThe okapi gateway.\n")
    os.utime(readme, ns=(mtime, mtime))
    assert index.update().indexed == 1
    assert index.search("okapi") and not index.search("zebra")


def test_deleted_file_is_removed(index, root, tmp_path):
    index.update()
    (root / "README.md").unlink()
    stats = index.update()
    assert (stats.removed, stats.indexed) == (1, 0)
    assert index.search("zebra") == []
    assert "README.md" not in indexed_paths(index, tmp_path / "index.sqlite3")


def test_skips_binary_large_ignored_and_secret_files(index, root, tmp_path):
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00 zebra")
    (root / "latin1.txt").write_bytes("zebra caf\xe9".encode("latin-1"))
    (root / "huge.log").write_text("zebra\n" * (MAX_FILE_BYTES // 6 + 10))
    (root / "node_modules" / "pkg").mkdir(parents=True)
    (root / "node_modules" / "pkg" / "index.js").write_text("zebra\n")
    (root / ".venv").mkdir()
    (root / ".venv" / "site.py").write_text("zebra\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("zebra token\n")
    (root / "generated").mkdir()
    (root / "generated" / "api.py").write_text("zebra\n")
    (root / "notes.tmp").write_text("zebra\n")
    (root / "docs" / "private").mkdir(parents=True)
    (root / "docs" / "private" / "plan.md").write_text("zebra\n")
    (root / "docs" / "public.md").write_text("zebra public\n")
    (root / ".gitignore").write_text("# build output\ngenerated/\n*.tmp\n/docs/private\n!keep.tmp\n")
    (root / ".env").write_text("ZEBRA_KEY=inside-secret\n")
    (root / "server.pem").write_text("zebra inside-secret\n")
    (root / "outside_link.md").symlink_to(tmp_path / "elsewhere.md")
    (tmp_path / "elsewhere.md").write_text("zebra outside\n")

    stats = index.update()
    hits = index.search("zebra", limit=50)
    found = {hit.path for hit in hits}
    assert found == {"README.md", "docs/public.md"}
    assert all("inside-secret" not in hit.excerpt and "outside" not in hit.excerpt for hit in hits)
    recorded = indexed_paths(index, tmp_path / "index.sqlite3")
    # Binary, undecodable and oversized files are recorded as skipped (so they are not reread)…
    assert recorded["logo.png"] == recorded["latin1.txt"] == recorded["huge.log"] == 0
    assert stats.skipped == 3
    # … ignored, secret and symlinked ones are never recorded at all.
    for path in (
        "node_modules/pkg/index.js",
        ".venv/site.py",
        ".git/config",
        "generated/api.py",
        "notes.tmp",
        "docs/private/plan.md",
        ".env",
        "server.pem",
        "outside_link.md",
    ):
        assert path not in recorded
    # A skipped file that did not change is not read again.
    assert index.update().skipped == 0


def test_file_that_becomes_ignored_is_dropped(index, root):
    index.update()
    (root / ".gitignore").write_text("README.md\n")
    stats = index.update()
    assert stats.removed == 1
    assert index.search("zebra") == []


def test_hits_have_relative_paths_and_the_lines_of_their_excerpt(index, root):
    index.update()
    hits = index.search("transaction gateway port")
    assert hits and hits[0].path == "src/billing/config.py"
    for hit in hits:
        assert not Path(hit.path).is_absolute()
        lines = split_lines((root / hit.path).read_text())
        assert "\n".join(lines[hit.start_line - 1 : hit.end_line]) == hit.excerpt
        assert len(hit.excerpt) <= 600
    top = hits[0]
    assert top.start_line <= 57 <= top.end_line
    assert "GATEWAY_PORT = 8443" in top.excerpt
    assert top.score > 0 and top.kind == "file"


def test_hit_ids_are_stable_across_searches_and_reindexing(index, root):
    index.update()
    first = {h.id for h in index.search("gateway")}
    bump_mtime(root / "src" / "billing" / "config.py")
    index.update()
    assert {h.id for h in index.search("gateway")} == first
    assert len(first) == len({(h.path, h.start_line) for h in index.search("gateway")})


def test_stemming_and_operators_in_queries(index):
    index.update()
    assert index.search("gateways")  # porter: gateways → gateway
    # FTS5 syntax in the query is plain text, not an error.
    assert index.search('gateway AND NOT "port* NEAR( :')
    with pytest.raises(ToolError, match="no words"):
        index.search("?!* -- ()")


def test_two_workspaces_share_a_database_without_mixing(tmp_path, root):
    other = tmp_path / "other"
    other.mkdir()
    (other / "zoo.md").write_text("zebra elsewhere\n")
    first = WorkspaceIndex(tmp_path / "shared.sqlite3", root)
    second = WorkspaceIndex(tmp_path / "shared.sqlite3", other)
    first.update()
    second.update()
    assert {h.path for h in first.search("zebra")} == {"README.md"}
    assert {h.path for h in second.search("zebra")} == {"zoo.md"}
    (other / "zoo.md").unlink()
    second.update()
    assert {h.path for h in first.search("zebra")} == {"README.md"}
    first.close()
    second.close()


def test_missing_root_refuses_rather_than_emptying(index, root):
    index.update()
    root.rename(root.with_name("moved"))
    with pytest.raises(FileNotFoundError):
        index.update()


def test_connection_factory_is_accepted(tmp_path, root):
    def connect() -> apsw.Connection:
        conn = apsw.Connection(str(tmp_path / "factory.sqlite3"))
        migrate_workspace_index(conn)
        return conn

    index = WorkspaceIndex(connect, root)
    index.update()
    assert index.search("zebra")
    index.close()


def test_chunks_overlap_and_cover_every_line():
    lines = [f"l{n}" for n in range(1, 101)]
    chunks = chunk_lines(lines)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 40), (36, 75), (71, 100)]
    assert chunk_lines([]) == []
    assert chunk_lines(["", "  "]) == []


def test_split_lines_counts_like_an_editor():
    assert split_lines("a\r\nb\x0cc\nd") == ["a", "b\x0cc", "d"]
    assert split_lines("a\n") == ["a"]


def test_match_expression_quotes_every_word():
    assert match_expression('port" OR x*') == '"port" OR "or" OR "x"'


def test_excerpt_of_a_long_chunk_keeps_the_match():
    lines = [f"filler {n} " + "x" * 40 for n in range(40)]
    lines[30] = "the needle is here"
    text = "\n".join(lines)
    highlighted = text.replace("needle", "\x02needle\x03")
    first, last, excerpt = excerpt_lines(text, highlighted)
    assert first <= 30 <= last
    assert excerpt == "\n".join(lines[first : last + 1]) and len(excerpt) <= 600
    long_line = "a " * 500 + "needle " + "b " * 500
    _, _, cut = excerpt_lines(long_line, long_line.replace("needle", "\x02needle\x03"))
    assert "needle" in cut and cut.startswith("…") and cut.endswith("…") and len(cut) <= 600


def test_ignore_rules_are_simple_patterns():
    rules = IgnoreRules(["*.log", "out/", "/docs/draft*", "# c", "", "!x.log"])
    assert rules.ignores_file("a/b.log", "b.log")
    assert rules.ignores_dir("src/out", "out") and not rules.ignores_file("src/out", "out")
    assert rules.ignores_file("docs/draft1.md", "draft1.md")
    assert not rules.ignores_file("other/docs/draft1.md", "draft1.md")
    assert rules.ignores_dir("x/node_modules", "node_modules")
    assert rules.ignores_dir("pkg.egg-info", "pkg.egg-info")


def test_search_keeps_reading_while_another_connection_writes(index, tmp_path):
    """WAL: an update's open write transaction does not block searches."""
    index.update()
    writer = apsw.Connection(str(tmp_path / "index.sqlite3"))
    writer.execute("BEGIN IMMEDIATE")
    writer.execute(
        "INSERT INTO workspace_files (workspace, path, mtime_ns, size, indexed) VALUES ('elsewhere', 'x', 0, 0, 1)"
    )
    try:
        assert [hit.path for hit in index.search("zebra")] == ["README.md"]
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_a_new_index_another_daemon_is_creating_is_waited_on(tmp_path, monkeypatch):
    """Two daemons creating the one cache file together: the second's switch to WAL, which
    SQLite refuses at once while the first holds the new file, is tried again."""
    path = tmp_path / "index.sqlite3"
    other = apsw.Connection(str(path))
    other.execute("BEGIN IMMEDIATE")  # the first daemon, creating the same new file
    pauses: list[bool] = []

    def other_finishes() -> None:
        pauses.append(other.in_transaction)
        other.execute("ROLLBACK")

    monkeypatch.setattr(sqlite_mod, "_pause_before_retry", other_finishes)
    conn = open_index_db(path)  # before the fix: StoreError "database is locked … delete it"
    assert pauses == [True]
    assert conn.pragma("journal_mode") == "wal"
    conn.close()
    other.close()


def test_a_new_index_held_past_the_timeout_says_busy_not_delete_it(tmp_path, monkeypatch):
    monkeypatch.setattr(index_mod, "BUSY_TIMEOUT_MS", 100)
    path = tmp_path / "index.sqlite3"
    other = apsw.Connection(str(path))
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError) as error:
            open_index_db(path)
    finally:
        other.execute("ROLLBACK")
        other.close()
    text = str(error.value)
    assert str(path) in text and "is busy" in text and "0.1 s" in text and "Try again" in text
    assert "delete it" not in text  # before: "database is locked. It is a cache: delete it"


def test_concurrent_updates_of_one_workspace_do_not_duplicate(tmp_path, root):
    """A second index (another reply, another daemon) updates between this one's scan and write."""
    db = tmp_path / "index.sqlite3"
    first, second = WorkspaceIndex(db, root), WorkspaceIndex(db, root)
    ran: list[bool] = []

    def meanwhile(done: int, total: int) -> None:
        if done == 0 and not ran:
            ran.append(True)
            assert second.update().indexed == 3

    first.update(meanwhile)
    assert ran
    assert len(indexed_paths(first, db)) == 3
    hits = first.search("gateway", limit=50)
    assert len(hits) == len({(h.path, h.start_line) for h in hits})
    first.close()
    second.close()


def test_definition_finds_the_line_binding_a_constant_least_indented_first(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a_uses.py").write_text("from b import MAX_SIZE\nif len(x) > MAX_SIZE:\n    MAX_SIZE == 3\n")
    (root / "b_class.py").write_text("class Limits:\n    MAX_SIZE = 10\n")
    (root / "c_module.py").write_text("import os\n\nMAX_SIZE: int = 65_536  # bytes\nOTHER = 1\n")
    index = WorkspaceIndex(tmp_path / "index.db", root)
    index.update()

    found = index.definition("MAX_SIZE")
    # Module level wins over the class's; a comparison (==) and a use are not bindings.
    assert (found.path, found.start_line, found.end_line) == ("c_module.py", 3, 3)
    assert found.excerpt == "MAX_SIZE: int = 65_536  # bytes"
    assert index.definition("NOWHERE_DEFINED") is None
    (root / "d_minified.js").write_text("LONG_TABLE = [" + "1," * 2000 + "]\n")
    index.update()
    long = index.definition("LONG_TABLE")
    assert long.excerpt.startswith("LONG_TABLE = [1,1,") and len(long.excerpt) == EXCERPT_CHARS
    assert long.excerpt.endswith("…")
    with pytest.raises(ToolError, match="'MAX SIZE' is not an identifier"):
        index.definition("MAX SIZE")
