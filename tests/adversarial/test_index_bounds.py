"""A workspace of ``/`` or a home folder: the index keeps at most ``chat.index_max_files`` files
and ``chat.index_max_bytes`` bytes (shallow folders first), says so in the reply's progress,
stops at half the reply's time budget and lets the reply search what it has, and a root or
home folder is named in progress. Small bounds are set through the settings."""

from __future__ import annotations

import time
from pathlib import Path

import apsw
import pytest

from imprintd.tools import index as index_mod
from imprintd.tools.index import LIMITED_BY_BYTES, LIMITED_BY_FILES, LIMITED_BY_TIME, IndexLimits, WorkspaceIndex
from tests.e2e.rawclient import RawClient
from tests.helpers import ask, make_chat
from tests.openai_stub import StubReply
from tests.standin import StandInModel


@pytest.fixture
def wide(tmp_path) -> Path:
    """A folder of 3 top-level files and 24 deeper ones, 100 bytes each."""
    root = tmp_path / "wide"
    for depth in range(3):
        folder = root.joinpath(*[f"d{level}" for level in range(depth)])
        folder.mkdir(parents=True, exist_ok=True)
        for n in range(3 if depth == 0 else 12):
            (folder / f"f{depth}_{n:02}.txt").write_text(f"zebra level{depth} file{n} ".ljust(99, ".") + "\n")
    return root


def indexed_paths(database: Path) -> list[str]:
    connection = apsw.Connection(str(database))
    try:
        return [path for (path,) in connection.execute("SELECT path FROM workspace_files WHERE indexed = 1")]
    finally:
        connection.close()


def test_the_index_keeps_the_first_files_shallow_first_and_the_first_bytes(wide, tmp_path):
    index = WorkspaceIndex(tmp_path / "files.sqlite3", wide)
    stats = index.update(limits=IndexLimits(max_files=5, max_bytes=1 << 30))
    assert stats.limited_by == LIMITED_BY_FILES and stats.scanned == 5
    kept = indexed_paths(tmp_path / "files.sqlite3")
    assert len(kept) == 5 and {"f0_00.txt", "f0_01.txt", "f0_02.txt"} <= set(kept)  # the top level first
    stats = index.update(limits=IndexLimits(max_files=1000, max_bytes=250))
    assert stats.limited_by == LIMITED_BY_BYTES
    assert sorted(indexed_paths(tmp_path / "files.sqlite3")) == ["f0_00.txt", "f0_01.txt"]  # 2 × 100 bytes fit
    assert index.update(limits=IndexLimits(max_files=1000, max_bytes=1 << 30)).limited_by == ""
    assert len(indexed_paths(tmp_path / "files.sqlite3")) == 27


def test_past_the_deadline_an_update_stops_between_batches_and_keeps_what_it_wrote(wide, tmp_path, monkeypatch):
    monkeypatch.setattr(index_mod, "BATCH_FILES", 2)
    index = WorkspaceIndex(tmp_path / "files.sqlite3", wide)
    index.update(limits=IndexLimits(max_files=5, max_bytes=1 << 30))
    (wide / "f0_00.txt").write_text("zebra changed\n")
    past = time.monotonic() - 1
    stats = index.update(limits=IndexLimits(max_files=1000, max_bytes=1 << 30, deadline=past))
    # One batch is always written, so an update whose walk took all the time still goes on.
    assert stats.limited_by == LIMITED_BY_TIME and stats.indexed == 2 and stats.removed == 0
    assert len(indexed_paths(tmp_path / "files.sqlite3")) == 5 + 2  # nothing dropped, two files added
    assert index.search("changed") == []  # f0_00 is not reread yet
    stats = index.update(limits=IndexLimits(max_files=1000, max_bytes=1 << 30, deadline=past))
    assert stats.limited_by == LIMITED_BY_TIME and stats.indexed == 2  # the next update goes on
    assert index.update(limits=IndexLimits(max_files=1000, max_bytes=1 << 30)).indexed == 27 - 9 + 1  # f0_00 too
    assert len(indexed_paths(tmp_path / "files.sqlite3")) == 27
    assert [hit.path for hit in index.search("changed")] == ["f0_00.txt"]


async def test_a_reply_on_a_home_folder_says_so_and_the_bound_in_progress(wide, monkeypatch):
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: wide))
    model = StandInModel()
    chat = make_chat(model, **{"chat.index_max_files": 4})
    model.queue("ok")
    outcome, events = await ask(chat, "What is here?", workspace=wide)
    assert outcome.text == "ok"
    messages = events.progress_messages
    assert any("your home folder" in m and "first 4 files" in m and "chat.index_max_files" in m for m in messages)
    assert any(
        m.startswith("Indexing the workspace: first 4 files of a larger folder (chat.index_max_files)")
        for m in messages
    )


async def test_a_reply_whose_indexing_runs_out_of_time_starts_from_what_is_indexed(wide, monkeypatch):
    import imprintd.chat as chat_module

    monkeypatch.setattr(index_mod, "BATCH_FILES", 2)
    monkeypatch.setattr(chat_module, "INDEX_TIME_SHARE", -1.0)  # every deadline is already past
    model = StandInModel()
    chat = make_chat(model)
    model.queue("answered from what is indexed")
    outcome, events = await ask(chat, "What is here?", workspace=wide)
    assert outcome.text == "answered from what is indexed"
    assert any("this reply searches what is indexed so far" in m for m in events.progress_messages)


def test_over_stdio_the_bound_from_the_settings_is_said_and_search_sees_only_kept_files(daemon_env, stub, wide):
    raw = RawClient({**daemon_env, "IMPRINT_CHAT_INDEX_MAX_FILES": "3"})
    try:
        raw.initialize()
        search = {"id": "s1", "name": "search", "arguments": {"query": "zebra level1 level2"}}
        stub.queue(StubReply(tool_calls=[search]), "Found the top level.")
        request_id = raw.request(
            "imprint/chat", {"text": "Where are the zebras?", "workspace": str(wide), "workDoneToken": "t"}
        )
        progress = []
        while "method" in (message := raw.next()) or message.get("id") != request_id:
            if message.get("method") == "$/progress":
                progress.append(message["params"]["value"].get("message", ""))
        assert message["result"]["text"] == "Found the top level.", message
    finally:
        raw.kill()
    assert any("first 3 files of a larger folder (chat.index_max_files)" in m for m in progress), progress
    [result] = [m["content"] for m in stub.requests[-1]["messages"] if m["role"] == "tool"]
    assert "f0_0" in result and "level1" not in result and "level2" not in result, result
