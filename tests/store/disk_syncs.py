"""What SQLite asks the disk to sync, file by file: an apsw VFS over the default one, made the
default while counting, so every connection opened meanwhile goes through it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import apsw


class SyncCounter(apsw.VFS):
    def __init__(self) -> None:
        #: The base name of each file synced, once per sync, in order ("imprint.sqlite3-wal").
        self.synced: list[str] = []
        self.base = apsw.vfs_names()[0]  # the default VFS before this one
        super().__init__("imprint-sync-counter", self.base, makedefault=True)

    def xOpen(self, name, flags) -> apsw.VFSFile:
        return _CountedFile(self, name, flags)


class _CountedFile(apsw.VFSFile):
    def __init__(self, counter: SyncCounter, name, flags) -> None:
        self._counter = counter
        path = name.filename() if isinstance(name, apsw.URIFilename) else name
        self._name = os.path.basename(path or "")
        super().__init__(counter.base, name, flags)

    def xSync(self, flags: int) -> None:
        self._counter.synced.append(self._name)
        super().xSync(flags)


@contextmanager
def counting_syncs() -> Iterator[SyncCounter]:
    """Count the syncs of connections opened inside (open the store inside too)."""
    counter = SyncCounter()
    try:
        yield counter
    finally:
        counter.unregister()
