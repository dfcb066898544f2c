"""The per-session state cache on its own: memory bound, disk cap, bad files, forgetting, isolation.

States here are made-up bytes with made-up tokens; what llama.cpp does with real ones is
tested in ``test_state_real.py``.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from array import array

import pytest

from imprintd.models import state_cache
from imprintd.models.state_cache import (
    STATES_PER_SESSION,
    SavedState,
    StateCache,
    common_prefix,
    delete_session_files,
)

FINGERPRINT = "f" * 64


def reuse(common: int, state_tokens: int) -> int:
    return common


def state(cache: StateCache, session: str, tokens: list[int], size: int = 1000) -> SavedState:
    data = bytearray((sum(tokens) + index) % 251 for index in range(size))
    return SavedState(session_id=session, tokens=array("i", tokens), data=data, serial=cache.new_serial())


def make(tmp_path, **limits) -> StateCache:
    limits = {"memory_bytes": 1 << 20, "disk_bytes": 1 << 20, **limits}
    return StateCache(tmp_path / "states", FINGERPRINT, **limits)


def files(cache: StateCache) -> list:
    return sorted(cache.folder.glob("*.state")) if cache.folder.exists() else []


def test_common_prefix():
    a = array("i", range(100))
    assert common_prefix(a, array("i", range(100))) == 100
    assert common_prefix(a, array("i", [*range(37), -1, *range(38, 100)])) == 37
    assert common_prefix(a, array("i", range(10))) == 10
    assert common_prefix(a, array("i")) == 0
    assert common_prefix(array("i", [5]), array("i", [6])) == 0


def test_the_longest_shared_prefix_of_the_session_wins(tmp_path):
    cache = make(tmp_path)
    short, long, other = state(cache, "s1", [1, 2, 3]), state(cache, "s1", [1, 2, 9, 9, 9]), state(cache, "s1", [7])
    for kept in (short, other, long):
        cache.keep(kept, persist=False)
    best = cache.best("s1", array("i", [1, 2, 9, 9, 4]), reuse)
    assert best is not None and best.source is long and best.reused == 4
    assert cache.best("s1", array("i", [8, 8]), reuse) is None


def test_a_session_never_receives_another_sessions_state(tmp_path):
    cache = make(tmp_path)
    cache.keep(state(cache, "alice", list(range(50))), persist=True)
    cache.flush()
    prompt = array("i", range(60))  # the same prefix as alice's state
    assert cache.best("bob", prompt, reuse) is None
    assert make(tmp_path).best("bob", prompt, reuse) is None  # from disk neither
    assert cache.best("alice", prompt, reuse).reused == 50


def test_memory_is_least_recently_used_first_out_within_its_bytes(tmp_path):
    one = 1000 + 4 * 3
    cache = make(tmp_path, memory_bytes=2 * one, disk_bytes=0)
    a, b = state(cache, "a", [1, 2, 3]), state(cache, "b", [4, 5, 6])
    cache.keep(a, persist=False)
    cache.keep(b, persist=False)
    assert cache.best("a", array("i", [1, 2, 3, 4]), reuse) is not None
    cache.take(cache.best("a", array("i", [1, 2, 3, 4]), reuse))  # a is now the most recent
    cache.keep(state(cache, "c", [7, 8, 9]), persist=False)
    assert cache.memory_used == 2 * one
    assert cache.best("b", array("i", [4, 5, 6]), reuse) is None  # b went first
    assert cache.best("a", array("i", [1, 2, 3]), reuse) is not None


def test_a_session_keeps_its_newest_states_and_none_a_newer_one_extends(tmp_path):
    cache = make(tmp_path)
    cache.keep(state(cache, "s", [1, 2]), persist=False)
    cache.keep(state(cache, "s", [1, 2, 3]), persist=False)  # extends the first: it goes
    assert cache.memory_used == 1000 + 4 * 3
    for n in range(5):
        cache.keep(state(cache, "s", [9, n]), persist=False)
    assert cache.memory_used == STATES_PER_SESSION * (1000 + 8)


needs_spares = pytest.mark.skipif(not state_cache.SPARES, reason="memory is readied ahead on Linux only")


@needs_spares
def test_memory_for_the_next_copy_is_readied_counted_and_handed_over_once(tmp_path):
    one = 1000 + 4 * 3
    cache = make(tmp_path, memory_bytes=1 << 20, disk_bytes=0)
    cache.want_spare(4000)
    cache.flush()
    assert cache.take_spare(1) is None  # no state was ever copied away: a one-session model needs none
    cache.keep(state(cache, "a", [1, 2, 3]), persist=False)
    cache.want_spare(4000)
    cache.flush()
    assert cache.memory_used == one + 5000  # a quarter more than asked, counted beside the states
    assert cache.take_spare(5001) is None  # too small: the copy takes fresh memory
    spare = cache.take_spare(4000)
    assert spare is not None and len(spare) == 5000 and cache.memory_used == one
    assert cache.take_spare(4000) is None  # handed over once
    cache.want_spare(4000)
    cache.flush()
    cache.want_spare(4800)  # the one readied holds it: not made again
    cache.flush()
    assert cache.take_spare(4800) is not None and cache.memory_used == one


@needs_spares
def test_memory_readied_never_takes_a_states_room(tmp_path):
    one = 1000 + 4 * 3
    cache = make(tmp_path, memory_bytes=2 * one + 1250, disk_bytes=0)
    cache.keep(state(cache, "a", [1, 2, 3]), persist=False)
    cache.want_spare(2000)  # 2,500 bytes: no room beside the state
    cache.flush()
    assert cache.memory_used == one and cache.take_spare(1) is None
    cache.want_spare(1000)
    cache.flush()
    assert cache.memory_used == one + 1250
    cache.keep(state(cache, "b", [4, 5, 6]), persist=False)
    assert cache.memory_used == 2 * one + 1250
    cache.keep(state(cache, "c", [7, 8, 9]), persist=False)  # over: the readied memory goes, no state
    assert cache.memory_used == 3 * one and cache.take_spare(1) is None
    for session, tokens in (("a", [1, 2, 3]), ("b", [4, 5, 6]), ("c", [7, 8, 9])):
        assert cache.best(session, array("i", tokens), reuse) is not None


def test_without_populated_mappings_no_memory_is_readied(tmp_path, monkeypatch):
    monkeypatch.setattr(state_cache, "SPARES", False)
    cache = make(tmp_path, disk_bytes=0)
    cache.keep(state(cache, "a", [1, 2, 3]), persist=False)
    cache.want_spare(1000)
    cache.flush()
    assert cache.take_spare(1) is None and cache.memory_used == 1000 + 4 * 3


@needs_spares
def test_closing_frees_the_memory_readied(tmp_path):
    cache = make(tmp_path, disk_bytes=0)
    cache.keep(state(cache, "a", [1, 2, 3]), persist=False)
    cache.want_spare(1000)
    cache.flush()
    cache.close()
    assert cache.memory_used == 0 and cache.take_spare(1) is None and cache._writer is None


def test_states_reach_the_disk_0600_in_a_0700_folder_and_load_after_a_restart(tmp_path):
    cache = make(tmp_path)
    kept = state(cache, "s1", list(range(20)), size=5000)
    cache.keep(kept, persist=True)
    assert cache.flush(timeout=30)
    [path] = files(cache)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(cache.folder.stat().st_mode) == 0o700

    restarted = make(tmp_path)
    best = restarted.best("s1", array("i", range(30)), reuse)
    assert best is not None and best.where == "disk" and best.reused == 20
    loaded = restarted.take(best)
    assert loaded is not None and loaded.data == kept.data and loaded.tokens == kept.tokens


def test_an_existing_folder_is_made_0700(tmp_path):
    (tmp_path / "states").mkdir(mode=0o755)
    cache = make(tmp_path)
    cache.keep(state(cache, "s1", [1]), persist=True)
    cache.flush(timeout=30)
    assert stat.S_IMODE(cache.folder.stat().st_mode) == 0o700


def test_persistence_off_keeps_states_in_memory_only(tmp_path):
    cache = make(tmp_path)
    cache.keep(state(cache, "memory-only", [1, 2, 3]), persist=False)
    assert cache.flush(timeout=30)
    assert files(cache) == []
    assert cache.best("memory-only", array("i", [1, 2, 3, 4]), reuse) is not None


def saved_file(tmp_path, session="s1", tokens=(1, 2, 3, 4), size=4000):
    cache = make(tmp_path)
    cache.keep(state(cache, session, list(tokens), size=size), persist=True)
    cache.flush(timeout=30)
    [path] = files(cache)
    return path


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda raw: raw[:-1] + bytes([raw[-1] ^ 0xFF]), "checksum does not match"),
        (lambda raw: raw[: len(raw) // 2], "does not match its header"),
        (lambda raw: raw[:10], "cut short"),
        (lambda raw: b"not a state file at all", "not an imprintd model state file"),
        (lambda raw: raw + b"extra", "does not match its header"),
    ],
    ids=["flipped byte", "half written", "header cut", "other file", "appended to"],
)
def test_a_corrupt_or_partial_file_is_ignored_with_a_log_line_and_deleted(tmp_path, caplog, damage, said):
    path = saved_file(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    cache = make(tmp_path)
    with caplog.at_level(logging.INFO, logger="imprintd.models.state"):
        best = cache.best("s1", array("i", [1, 2, 3, 4, 5]), reuse)
        assert best is None or cache.take(best) is None
    assert any(said in record.getMessage() and str(path) in record.getMessage() for record in caplog.records)
    assert not path.exists()
    assert cache.best("s1", array("i", [1, 2, 3, 4, 5]), reuse) is None


def test_a_file_of_another_model_is_ignored_with_a_log_line_and_kept(tmp_path, caplog):
    path = saved_file(tmp_path)
    other = StateCache(tmp_path / "states", "0" * 64, memory_bytes=1 << 20, disk_bytes=1 << 20)
    with caplog.at_level(logging.INFO, logger="imprintd.models.state"):
        assert other.best("s1", array("i", [1, 2, 3, 4, 5]), reuse) is None
    assert any("another model" in record.getMessage() for record in caplog.records)
    assert path.exists()  # valid for that model; the disk cap ages it out


def test_a_file_renamed_to_another_session_is_ignored(tmp_path, caplog):
    path = saved_file(tmp_path, session="alice")
    path.rename(path.with_name(path.name.replace("alice", "bob")))
    with caplog.at_level(logging.INFO, logger="imprintd.models.state"):
        assert make(tmp_path).best("bob", array("i", [1, 2, 3, 4, 5]), reuse) is None
    assert any("another session" in record.getMessage() for record in caplog.records)


def test_the_disk_cap_holds_oldest_first_out(tmp_path):
    one_file = saved_file(tmp_path, session="probe").stat().st_size
    cap = 3 * one_file + one_file // 2
    cache = make(tmp_path, disk_bytes=cap)
    sessions = [f"s{n}" for n in range(8)]
    for session in sessions:
        cache.keep(state(cache, session, [1, 2, 3, 4], size=4000), persist=True)
        assert cache.flush(timeout=30)
        assert sum(path.stat().st_size for path in files(cache)) <= cap
    assert [path.name.split(".")[0] for path in files(cache)] == sorted(sessions[-3:])


def test_a_state_larger_than_the_disk_cap_is_not_written(tmp_path):
    cache = make(tmp_path, disk_bytes=500)
    cache.keep(state(cache, "s1", [1], size=4000), persist=True)
    cache.flush(timeout=30)
    assert files(cache) == []


def test_forgetting_a_session_deletes_its_states_everywhere(tmp_path):
    cache = make(tmp_path)
    cache.keep(state(cache, "gone", [1, 2]), persist=True)
    cache.keep(state(cache, "stays", [1, 2]), persist=True)
    cache.flush(timeout=30)
    cache.keep(state(cache, "gone", [5, 6]), persist=True)  # perhaps still queued
    cache.forget("gone")
    cache.flush(timeout=30)
    assert [path.name.split(".")[0] for path in files(cache)] == ["stays"]
    assert cache.best("gone", array("i", [1, 2, 3]), reuse) is None
    assert cache.best("gone", array("i", [5, 6, 7]), reuse) is None
    cache.keep(state(cache, "gone", [1, 2]), persist=True)  # a late request of the deleted session
    cache.flush(timeout=30)
    assert [path.name.split(".")[0] for path in files(cache)] == ["stays"]


def test_deleting_files_without_a_loaded_model(tmp_path):
    path = saved_file(tmp_path, session="abc")
    assert delete_session_files(path.parent, "abc") == 1
    assert delete_session_files(path.parent, "../abc") == 0  # not a session id: nothing is touched
    assert not path.exists()


def test_zero_disk_bytes_writes_nothing(tmp_path):
    cache = make(tmp_path, disk_bytes=0)
    cache.keep(state(cache, "s1", [1, 2]), persist=True)
    cache.flush(timeout=30)
    assert files(cache) == []


class WriterWatch:
    """A clock the test moves, and events for the writer looking at it and renaming a file into place."""

    def __init__(self, monkeypatch) -> None:
        self.now = 1000.0
        self.looked = threading.Event()
        self.renamed = threading.Event()
        monkeypatch.setattr(state_cache, "_clock", self.clock)
        replace = os.replace

        def renamed(source, target):
            replace(source, target)
            self.renamed.set()

        monkeypatch.setattr(state_cache.os, "replace", renamed)

    def clock(self) -> float:
        if threading.current_thread().name == "imprintd-state-writer":
            self.looked.set()
        return self.now


def test_a_state_is_written_only_once_no_generation_runs(tmp_path, monkeypatch):
    watch = WriterWatch(monkeypatch)
    cache = make(tmp_path, disk_bytes=1 << 24)
    kept = state(cache, "s1", list(range(20)), size=3 * state_cache.WRITE_CHUNK + 5)
    with cache.generating():
        cache.keep(kept, persist=True)
        assert watch.looked.wait(30)  # the writer has the state and saw a generation running
        assert not cache.folder.exists() or list(cache.folder.iterdir()) == []  # not even a temporary file
        assert not watch.renamed.is_set()
    watch.now += state_cache.WRITE_QUIET_S  # the model stays idle: the writer goes on
    assert watch.renamed.wait(30)
    restarted = make(tmp_path, disk_bytes=1 << 24)  # the file checks out: its digest was written last
    loaded = restarted.take(restarted.best("s1", array("i", range(30)), reuse))
    assert loaded is not None and loaded.data == kept.data and loaded.tokens == kept.tokens


def test_a_state_waits_for_idleness_only_so_long(tmp_path, monkeypatch):
    watch = WriterWatch(monkeypatch)
    cache = make(tmp_path)
    with cache.generating():
        cache.keep(state(cache, "busy", [1, 2, 3]), persist=True)
        assert watch.looked.wait(30)
        watch.now += state_cache.WRITE_WAIT_S
        with cache.generating():  # another generation ends; one still runs
            pass
        assert watch.renamed.wait(30)  # written all the same
    assert [path.name.split(".")[0] for path in files(cache)] == ["busy"]


def test_flush_and_close_write_at_once_even_while_a_generation_runs(tmp_path, monkeypatch):
    WriterWatch(monkeypatch)  # the clock stands still: only being told to write gets a file out
    cache = make(tmp_path)
    with cache.generating():
        cache.keep(state(cache, "flushed", [1]), persist=True)
        assert cache.flush(timeout=30)
        assert [path.name.split(".")[0] for path in files(cache)] == ["flushed"]
        cache.keep(state(cache, "closed", [2]), persist=True)
        assert cache.close(timeout=30)
    assert sorted(path.name.split(".")[0] for path in files(cache)) == ["closed", "flushed"]
