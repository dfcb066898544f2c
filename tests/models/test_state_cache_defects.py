"""The state cache's defects found when it was built stay fixed: a header that lies about sizes, a cache
left behind by a model replaced on a settings change, a queued write landing after a session's
deletion, folders the cache creates that others could read.
"""

from __future__ import annotations

import os
import stat
import struct
import threading
from array import array

import msgspec
import pytest

from imprintd.models import state_cache
from imprintd.models.state_cache import SavedState, StateCache, delete_session_files

FINGERPRINT = "f" * 64


def reuse(common: int, state_tokens: int) -> int:
    return common


def state(cache: StateCache, session: str, tokens: list[int], size: int = 1000) -> SavedState:
    data = bytearray((sum(tokens) + index) % 251 for index in range(size))
    return SavedState(session_id=session, tokens=array("i", tokens), data=data, serial=cache.new_serial())


def make(folder, fingerprint: str = FINGERPRINT) -> StateCache:
    return StateCache(folder, fingerprint, memory_bytes=1 << 20, disk_bytes=1 << 20)


def saved_file(folder, session="s1"):
    cache = make(folder)
    cache.keep(state(cache, session, [1, 2, 3, 4], size=4000), persist=True)
    assert cache.flush(timeout=30)
    cache.close()
    [path] = folder.glob("*.state")
    return path


def rewrite_header(path, **changes) -> None:
    """The file with its JSON header's fields changed, everything after the header kept."""
    raw = path.read_bytes()
    magic, version, length = struct.unpack_from("<8sII", raw)
    header = msgspec.json.decode(raw[16 : 16 + length])
    header.update(changes)
    encoded = msgspec.json.encode(header)
    path.write_bytes(struct.pack("<8sII", magic, version, len(encoded)) + encoded + raw[16 + length :])


@pytest.mark.parametrize(
    "changes",
    [{"tokens": -1}, {"data": -5}, {"data": 1 << 40}, {"tokens": 1 << 40}],
    ids=["negative tokens", "negative data", "data larger than the file", "tokens larger than the file"],
)
def test_a_header_whose_sizes_do_not_add_up_to_the_file_is_ignored_and_deleted(tmp_path, caplog, changes):
    folder = tmp_path / "states"
    path = saved_file(folder)
    rewrite_header(path, **changes)
    cache = make(folder)
    best = cache.best("s1", array("i", [1, 2, 3, 4, 5]), reuse)  # raised ValueError / MemoryError before
    assert best is None
    assert not path.exists()
    assert cache.stats["ignored"] == 1


def test_a_header_that_lies_after_the_tokens_were_read_is_caught_when_the_state_is_taken(tmp_path):
    # The tokens were read (the file was fine then); the file is replaced before its data is read.
    folder = tmp_path / "states"
    path = saved_file(folder)
    cache = make(folder)
    best = cache.best("s1", array("i", [1, 2, 3, 4, 5]), reuse)
    assert best is not None
    rewrite_header(path, data=1 << 40)
    assert cache.take(best) is None  # MemoryError before: the header's count was allocated
    assert not path.exists()


def test_closing_frees_the_memory_writes_what_is_queued_and_ends_the_writer(tmp_path):
    cache = make(tmp_path / "states")
    cache.keep(state(cache, "s1", [1, 2, 3]), persist=True)
    cache.keep(state(cache, "s2", [4, 5, 6]), persist=False)
    assert cache.memory_used > 0
    writer = cache._writer
    assert writer is not None
    cache.close(timeout=0)  # does not wait: a settings change on the event loop
    assert cache.memory_used == 0
    writer.join(timeout=30)
    assert not writer.is_alive()
    assert [path.name.split(".")[0] for path in (tmp_path / "states").glob("*.state")] == ["s1"]
    cache.keep(state(cache, "s1", [1, 2, 3, 4]), persist=True)  # a late request of the old model
    assert cache.memory_used == 0 and cache._writer is None


def test_a_write_queued_by_another_cache_does_not_bring_a_deleted_session_back(tmp_path, monkeypatch):
    folder = tmp_path / "states"
    old = make(folder, fingerprint="0" * 64)  # the cache of the model before a settings change
    started, go = threading.Event(), threading.Event()
    head = state_cache._head

    def held(kept, fingerprint, sha256):
        started.set()
        go.wait(30)
        return head(kept, fingerprint, sha256)

    monkeypatch.setattr(state_cache, "_head", held)
    old.keep(state(old, "gone", [1, 2, 3]), persist=True)
    assert started.wait(30)  # the old writer has the state in hand
    new = make(folder)
    new.forget("gone")  # the session is deleted through the model now in use
    go.set()
    assert old.close(timeout=30)
    assert list(folder.glob("*.state")) == []


def test_files_deleted_without_a_cache_stay_deleted(tmp_path, monkeypatch):
    folder = tmp_path / "states"
    cache = make(folder)
    started, go = threading.Event(), threading.Event()
    head = state_cache._head

    def held(kept, fingerprint, sha256):
        started.set()
        go.wait(30)
        return head(kept, fingerprint, sha256)

    monkeypatch.setattr(state_cache, "_head", held)
    cache.keep(state(cache, "gone", [1, 2, 3]), persist=True)
    assert started.wait(30)
    delete_session_files(folder, "gone")  # Chat.delete_session: files of any model
    go.set()
    assert cache.flush(timeout=30)
    assert list(folder.glob("*.state")) == []


def test_the_folders_the_cache_creates_are_0700(tmp_path):
    previous = os.umask(0o022)
    try:
        folder = tmp_path / "cache" / "imprint" / "states"
        cache = make(folder)
        cache.keep(state(cache, "s1", [1]), persist=True)
        assert cache.flush(timeout=30)
    finally:
        os.umask(previous)
    for created in (folder, folder.parent, folder.parent.parent):
        assert stat.S_IMODE(created.stat().st_mode) == 0o700, created
