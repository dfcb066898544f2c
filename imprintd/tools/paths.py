"""Containment of workspace paths (docs/architecture.md, "tools/: what a reply may look at").

Every path a tool receives comes from the model, so it is treated as hostile: it must be
relative, stay inside the workspace after every symlink is resolved, and name nothing
secret-bearing. ``resolve_in_workspace`` is the one gate for reads; ``is_secret_path`` is
shared with the indexer so that search never shows what a read would refuse.

The workspace itself may be hostile too, and it changes under the daemon: a file scanned or
resolved a moment ago may be a symlink to outside, a FIFO or a folder by the time it is
opened. ``open_regular_file`` is how every workspace file is opened (index, ``.gitignore``,
``read_file``): no symlink followed on the way, nothing that can block, nothing but a
regular file accepted, checked on the opened file itself.

The daemon's own files (its log, its conversation database, the workspace index, with their
``-wal``/``-shm``/``-journal``) hold every session's text, so wherever they sit, a workspace
that contains them must not expose them: ``OWN_FILES`` knows them by the file itself (device
and inode, so a hard link or a symlink to one is the same file), and reads, the index and so
search refuse them.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
import threading
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from imprintd.tools.base import ToolError

# Names compared lower-cased: on case-insensitive file systems (macOS, Windows) ".ENV" is
# the same file as ".env", so the stricter comparison is the only safe one.
SECRET_NAME_PATTERNS: tuple[str, ...] = (
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "*.p12",
    "*.pfx",
    "*.crt",
    "*.cer",
    "*.der",
    "*.jks",
    "*.keystore",
    "*.kdbx",
    ".netrc",
    "_netrc",
    ".pgpass",
    ".htpasswd",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    # The daemon's own database (store.DB_NAME) and its WAL / SHM / journal files: they
    # hold every conversation, so a workspace that contains the data dir must not expose it.
    "imprint.sqlite3",
    "imprint.sqlite3-*",
)

# Folders whose whole content is refused. ``.git`` holds remote URLs with tokens and the
# full history, including secrets deleted from the working tree.
SECRET_DIR_NAMES: frozenset[str] = frozenset({".git", ".ssh", ".gnupg", ".aws", ".docker"})

# NUL, newlines and every other control character: none belongs in a file name the model
# means, and newline/CR could forge lines in tool results and logs.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DRIVE = re.compile(r"^[A-Za-z]:")


#: Files SQLite keeps beside a database while it is open.
_SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")

OWN_FILE_REFUSAL = (
    "it is one of imprintd's own files (its log, its conversation database or its workspace index), "
    "which tools never read"
)


class OwnFiles:
    """The files this daemon writes, registered as it opens them; asked by identity."""

    def __init__(self) -> None:
        self._paths: set[str] = set()
        self._lock = threading.Lock()

    def add(self, path: str | Path, *, database: bool = False) -> None:
        """Register ``path`` (and for a database the files SQLite keeps beside it)."""
        suffixes = ("", *_SQLITE_COMPANIONS) if database else ("",)
        with self._lock:
            self._paths.update(os.path.abspath(f"{path}{suffix}") for suffix in suffixes)

    def identities(self) -> frozenset[tuple[int, int]]:
        """(device, inode) of each registered file that exists now."""
        with self._lock:
            paths = list(self._paths)
        found = set()
        for path in paths:
            try:
                status = os.stat(path)
            except (OSError, ValueError):
                continue
            found.add((status.st_dev, status.st_ino))
        return frozenset(found)

    def holds(self, status: os.stat_result) -> bool:
        """Whether the file ``status`` describes (``fstat`` of an open file) is one of them."""
        return (status.st_dev, status.st_ino) in self.identities()


#: The process's own files: the CLI registers its log file, the chat service its databases.
OWN_FILES = OwnFiles()


def _components(relative: str | PurePosixPath) -> list[str]:
    text = str(relative).replace("\\", "/")
    return [part for part in text.split("/") if part not in ("", ".")]


# One compiled alternation: the indexer asks this for every entry of the workspace.
_SECRET_NAME = re.compile("|".join(fnmatch.translate(p) for p in SECRET_NAME_PATTERNS))


def is_secret_name(name: str) -> bool:
    """True when one path component, by itself, is secret-bearing or ``.git``."""
    lowered = name.lower()
    return lowered in SECRET_DIR_NAMES or _SECRET_NAME.match(lowered) is not None


def is_secret_path(relative: str | PurePosixPath) -> bool:
    """True when any component of the workspace-relative path is secret-bearing or ``.git``.

    Every component is checked, not only the last, so a folder named like a secret (``.env``
    used as a directory, ``.ssh``) hides all it contains.
    """
    return any(is_secret_name(part) for part in _components(relative))


def _shown(relative: str) -> str:
    # repr() keeps NUL and newlines visible instead of letting them break the message.
    return repr(relative)


def _refuse(relative: str, reason: str) -> ToolError:
    return ToolError(f"refused path {_shown(relative)}: {reason}")


def check_relative(relative: object) -> list[str]:
    """The path's components, or ToolError for a path that is not a plain relative one."""
    if not isinstance(relative, str):
        raise ToolError(f"refused path {relative!r}: a path must be a string")
    if not relative.strip():
        raise _refuse(relative, "the path is empty; give a path relative to the workspace")
    if _CONTROL.search(relative):
        raise _refuse(relative, "paths may not contain NUL, newline or other control characters")
    text = relative.replace("\\", "/")
    if text.startswith("/") or _DRIVE.match(text):
        raise _refuse(relative, "absolute paths are not allowed; give a path relative to the workspace")
    if text.startswith("~"):
        raise _refuse(relative, "'~' home-directory paths are not allowed; give a path relative to the workspace")
    parts = _components(text)
    if ".." in parts:
        raise _refuse(relative, "'..' segments are not allowed; paths stay inside the workspace")
    if not parts:
        raise _refuse(relative, "the path names the workspace itself, not a file in it")
    return parts


def resolve_in_workspace(root: Path, relative: str) -> Path:
    """The real path of ``relative`` inside ``root``, or ToolError saying why it is refused.

    Checks the text first (empty, control characters, absolute, ``~``, ``..``), then walks
    the components one by one so a symlinked folder or file leading outside the resolved
    root is refused, then resolves the whole path and checks containment again. Secret
    names are checked on both the path as given and the path it resolves to, so a harmless
    name symlinked to ``.env`` is refused too. The file need not exist.
    """
    parts = check_relative(relative)
    if is_secret_path(relative):
        raise _refuse(relative, "it names a secret-bearing file or a path inside .git, which tools never read")
    try:
        real_root = root.resolve(strict=True)
        current = real_root
        for part in parts:
            current = current / part
            if current.is_symlink():
                target = current.resolve()
                if not target.is_relative_to(real_root):
                    raise _refuse(relative, f"{part!r} is a symbolic link that leads outside the workspace")
                current = target
        resolved = current.resolve()
    except ToolError:
        raise
    except (OSError, RuntimeError) as error:  # ELOOP, ENAMETOOLONG, a missing root …
        raise _refuse(relative, f"it cannot be resolved ({getattr(error, 'strerror', None) or error})") from None
    if not resolved.is_relative_to(real_root):
        raise _refuse(relative, "it leads outside the workspace")
    inside = resolved.relative_to(real_root)
    if inside == Path("."):
        raise _refuse(relative, "the path names the workspace itself, not a file in it")
    if is_secret_path(inside.as_posix()):
        raise _refuse(relative, "it leads to a secret-bearing file or a path inside .git, which tools never read")
    return resolved


def normalized(relative: str) -> str:
    """``relative`` as the workspace-relative POSIX path results and sources name.

    The name as given (``./src\\app.py`` → ``src/app.py``), not its symlink target: it is
    the path the model and the user asked about, and it is known to be contained.
    """
    return "/".join(check_relative(relative))


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
# O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
_FILE_FLAGS = (
    os.O_RDONLY
    | _NOFOLLOW
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_DIR_FLAGS = os.O_RDONLY | _NOFOLLOW | _DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_HAS_OPENAT = os.open in os.supports_dir_fd and bool(_NOFOLLOW and _DIRECTORY)


class NotRegularFile(OSError):
    """What was opened is a folder, FIFO, socket or device, not a regular file."""


def open_regular_file(root: Path, relative: str | Sequence[str]) -> BinaryIO:
    """The regular file ``relative`` under the real folder ``root``, open for binary reading.

    Each folder on the way is opened relative to the one before with ``O_NOFOLLOW``, and the
    file itself with ``O_NOFOLLOW | O_NONBLOCK``, so a symlink swapped in for any component
    since it was checked fails (``ELOOP``/``ENOTDIR``) instead of leading outside, and a FIFO
    or device opens without waiting; ``fstat`` on the open file then refuses anything but a
    regular file (``NotRegularFile``). Raises OSError.
    """
    # Split on "/" only: the scan joins names with it, and "\\" is a character of a POSIX name.
    parts = [p for p in (relative.split("/") if isinstance(relative, str) else relative) if p not in ("", ".")]
    if not parts:
        raise NotRegularFile(f"{relative!r} names the folder itself")
    if ".." in parts:
        raise OSError(f"{relative!r} leaves the folder")
    fd = _open_beneath(Path(root), parts) if _HAS_OPENAT else _open_checked(Path(root), parts)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(f"{'/'.join(parts)!r} is {_kind(mode)}, not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _open_beneath(root: Path, parts: list[str]) -> int:
    folder = os.open(root, _DIR_FLAGS & ~_NOFOLLOW)  # the root was resolved: it is real
    try:
        for part in parts[:-1]:
            inner = os.open(part, _DIR_FLAGS, dir_fd=folder)
            os.close(folder)
            folder = inner
        return os.open(parts[-1], _FILE_FLAGS, dir_fd=folder)
    finally:
        os.close(folder)


def _open_checked(root: Path, parts: list[str]) -> int:
    """Without ``openat`` (Windows): open, then check the opened path still lies in ``root``."""
    path = root.joinpath(*parts)
    if path.is_symlink() or not path.resolve().is_relative_to(root.resolve()):
        raise OSError(f"{'/'.join(parts)!r} leads outside the workspace")
    return os.open(path, _FILE_FLAGS)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a plain file"


def is_shown_name(name: str) -> bool:
    """Whether a file or folder name may appear in a tool result: no control characters
    (a newline would forge result lines) and valid Unicode (a name that is not UTF-8 comes
    back from the OS with surrogate escapes, which SQLite and the wire refuse)."""
    return _CONTROL.search(name) is None and _SURROGATE.search(name) is None


_SURROGATE = re.compile("[\ud800-\udfff]")
