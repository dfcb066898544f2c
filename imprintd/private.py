"""Files and folders only this user can read (SECURITY.md, "Data at rest").

Everything the daemon writes can hold conversation or workspace text: the data database, the
workspace index, a ``--log-file`` under ``-v``, caches. So every file it writes is ``0600`` and
every folder it creates is ``0700``, whatever the umask:

- ``private_folder(path)`` creates ``path`` and any missing parents ``0700``. A folder that
  already existed is left as it is: it may be the user's own (``~/.cache``), shared on purpose.
- ``private_file(path)`` creates ``path`` empty and ``0600`` if it is missing, and takes the
  group's and others' bits off a file of this user's that has them: an index an older
  imprintd made ``0644`` stops leaking workspace text.
- ``private_database(path)`` is ``private_file`` for an SQLite database and the ``-wal`` and
  ``-shm`` files beside it. SQLite creates those two with the database file's own mode, so a
  ``0600`` database keeps them private; existing ones are narrowed here too.

The mode is set with ``chmod`` after creating, since the umask can only take bits away from
what ``open`` and ``mkdir`` ask for and a umask such as ``0277`` would leave the owner unable to
write.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

FILE_MODE = 0o600
FOLDER_MODE = 0o700

#: The files SQLite keeps beside a database in WAL mode.
SQLITE_COMPANIONS = ("-wal", "-shm")


def private_folder(path: Path) -> Path:
    """Create ``path`` and its missing parents as ``0700`` folders; raises OSError if it cannot."""
    path = Path(path)
    missing: list[Path] = []
    for folder in (path, *path.parents):
        if folder.is_dir():
            break
        missing.append(folder)
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=FOLDER_MODE)
        except FileExistsError:
            if not folder.is_dir():
                raise
            continue  # made by another process meanwhile: it is not ours to change
        os.chmod(folder, FOLDER_MODE)
    return path


def private_file(path: Path) -> Path:
    """Make sure ``path`` exists as a file only its owner can read; raises OSError if it cannot."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    except FileExistsError:
        _narrow(path)
        return path
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return path


def private_database(path: Path) -> Path:
    """``private_file`` for an SQLite database; its ``-wal`` and ``-shm`` files are narrowed if present."""
    private_file(path)
    for suffix in SQLITE_COMPANIONS:
        companion = path.with_name(path.name + suffix)
        if companion.exists():
            _narrow(companion)
    return path


def _narrow(path: Path) -> None:
    """Take the group's and others' bits off this user's regular file ``path``."""
    info = path.stat()
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and mode & 0o077:
        os.chmod(path, mode & 0o700)
