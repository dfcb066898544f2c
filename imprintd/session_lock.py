"""A stored session's turn across processes: one reply at a time, whichever imprintd answers.

``chat.SessionTurns`` queues the replies of one daemon. Two daemons on one data folder (VS Code
and Neovim open side by side, or ``imprintd ask --session`` beside an editor) share the stored
sessions but not that queue; without more, both would store their question before either
answer, and the session would read question, question, answer, answer (two user turns in a
row, which some chat templates refuse to render).

So a reply in a stored session also holds an OS file lock (``flock``, exclusive) on a file of
its own in the data folder, ``turns/<sha256 of the session id>.lock``, from before its question
is stored until its answer is stored. The OS lets go of it when the file is closed or the
process ends however it ends (killed included): a daemon that died never blocks a session.
The lock belongs to the open file, not the process, so two ``Chat`` objects of one process
exclude each other as two processes do.

Waiting polls the non-blocking lock every ``POLL_S`` with ``anyio.sleep``: a blocking ``flock``
in a worker thread could not be cancelled, and a cancelled reply must stop waiting at once.
Past the given wait the reply is refused with ``SessionBusy`` before anything is stored.

Where ``fcntl`` does not exist (Windows), there is no file lock: replies take turns within one
daemon only (docs/architecture.md, "Concurrency").
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

from imprintd.offload import in_worker
from imprintd.private import FILE_MODE, private_folder
from imprintd.store import StoreError

try:
    import fcntl
except ImportError:  # Windows: no flock; see the module docstring
    fcntl = None  # type: ignore[assignment]

#: Seconds between tries while another process holds the turn.
POLL_S = 0.1
#: The folder under the data folder that holds the lock files.
FOLDER_NAME = "turns"


class SessionBusy(StoreError):
    """Another process held the session's turn for longer than the reply may wait."""


def lock_path(data_folder: Path, session_id: str) -> Path:
    """The lock file of ``session_id``: a hash, so any id makes a safe file name."""
    digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
    return Path(data_folder) / FOLDER_NAME / f"{digest}.lock"


def try_lock(path: Path) -> int | None:
    """The open file descriptor holding ``path``'s lock, or None while another holds it."""
    assert fcntl is not None
    private_folder(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


class Waited:
    """Seconds a turn waited for another process before it was taken."""

    seconds: float = 0.0


@contextlib.asynccontextmanager
async def session_turn(data_folder: Path, session_id: str, wait_s: float) -> AsyncIterator[Waited]:
    """Hold ``session_id``'s turn across processes for the block; SessionBusy past ``wait_s``."""
    waited = Waited()
    if fcntl is None:
        yield waited
        return
    path = lock_path(data_folder, session_id)
    started = anyio.current_time()
    while True:
        # Shielded: a try abandoned in its thread could take the lock with nobody left to let go.
        with anyio.CancelScope(shield=True):
            fd = await in_worker(try_lock, path)
        if fd is not None:
            break
        left = wait_s - (anyio.current_time() - started)
        if left <= 0:
            raise SessionBusy(
                "another Imprint process is answering in this session (an editor or `imprintd ask` on the "
                f"same data folder holds its turn, {path}); waited {wait_s:g} s (chat.research_time_budget) "
                "and stored nothing. Ask again when its answer is done."
            )
        await anyio.sleep(min(POLL_S, left))
    waited.seconds = anyio.current_time() - started
    try:
        yield waited
    finally:
        os.close(fd)  # lets go of the lock


def forget(data_folder: Path, session_id: str) -> None:
    """Delete a deleted session's lock file (no reply can take its turn any more)."""
    with contextlib.suppress(OSError):
        lock_path(data_folder, session_id).unlink()
