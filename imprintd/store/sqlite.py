"""SQLite helpers shared by the conversation store (``store/database.py``) and the workspace index
(``tools/index.py``): the error a database that cannot be used raises, what SQLite's errors about
the file mean, a ``BEGIN IMMEDIATE`` transaction, and the switch to write-ahead logging.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw

BUSY_TIMEOUT_MS = 5_000
#: Pause between tries of a new database's switch to write-ahead logging (``switch_to_wal``).
WAL_SWITCH_PAUSE_S = 0.01


class StoreError(Exception):
    """The store cannot do what was asked; the message says why and what to do."""


class DatabaseBusy(StoreError):
    """Another connection kept the database locked for longer than the busy timeout."""


class DatabaseDamaged(StoreError):
    """The database file is not a readable SQLite database (any more)."""


def database_problem(path: Path, error: apsw.Error) -> StoreError | None:
    """What SQLite's ``error`` on the database ``path`` means and what to do, or None when it
    says nothing about the file (a bug's error stays as it is).

    The advice fits the cause: a busy database is another process at work (waiting longer
    helps, moving the file away does not); a damaged one must be moved away or restored.
    """
    if isinstance(error, apsw.BusyError | apsw.LockedError):
        return DatabaseBusy(
            f"the database {path} is busy: another process kept it locked for more than "
            f"{BUSY_TIMEOUT_MS / 1000:g} s (another imprintd using the same data folder?). Try again."
        )
    if isinstance(error, apsw.CorruptError | apsw.NotADBError):
        return DatabaseDamaged(
            f"the database {path} is damaged or not an SQLite database ({error}). Stop imprintd and move "
            "it away with its -wal and -shm files (imprintd then starts an empty one), or restore it "
            "from a backup; or set IMPRINT_DATA_DIR to another folder."
        )
    if isinstance(error, apsw.FullError):
        return StoreError(f"the disk holding the database {path} is full ({error}); free some space and try again.")
    if isinstance(error, apsw.ReadOnlyError | apsw.PermissionsError | apsw.CantOpenError):
        return StoreError(
            f"the database {path} cannot be written ({error}): check that this user may write it "
            "and its folder, or set IMPRINT_DATA_DIR to a folder this user can write."
        )
    if isinstance(error, apsw.IOError):
        return StoreError(f"reading or writing the database {path} failed: the disk or file system reported {error}.")
    return None


@contextmanager
def naming_problems(path: Path) -> Iterator[None]:
    """Raise SQLite's errors about the file ``path`` as ``database_problem`` words them."""
    try:
        yield
    except apsw.Error as error:
        problem = database_problem(path, error)
        if problem is None:
            raise
        raise problem from error


@contextmanager
def immediate(db: apsw.Connection) -> Iterator[apsw.Connection]:
    """A ``BEGIN IMMEDIATE`` transaction on ``db``: committed on success, else rolled back."""
    # IMMEDIATE takes the write lock up front (waiting up to the busy timeout), so what the
    # transaction reads cannot change under it before it writes.
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:  # some errors (disk full, I/O) have rolled back already
            db.execute("ROLLBACK")
        raise


def switch_to_wal(db: apsw.Connection, timeout_ms: int) -> str:
    """Put the database in write-ahead logging; returns the journal mode SQLite reports.

    A new file's first switch needs its write lock, and SQLite refuses it at once, without
    waiting the busy timeout, while another connection holds that lock: two imprintd opening
    a new database together (two editors starting) would leave one with "busy". So the
    switch is tried again for ``timeout_ms``, the busy timeout. A file already in WAL stays
    so (the mode is kept in the file): nothing to switch, nothing to wait for.
    """
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        try:
            return str(db.pragma("journal_mode", "wal"))
        except apsw.BusyError:
            if time.monotonic() >= deadline:
                raise
            _pause_before_retry()


def _pause_before_retry() -> None:
    time.sleep(WAL_SWITCH_PAUSE_S)
