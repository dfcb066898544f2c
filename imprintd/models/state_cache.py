"""Per-session llama.cpp state, so that a local follow-up evaluates only what is new
(docs/decisions.md, "Model state").

llama.cpp holds one evaluated prefix: the tokens of the last request it ran. A summary, a
section worker, another session or a restart replaces it, and the next coordinator prompt of
the session is then evaluated in full (a minute or more for 8k tokens of a 4B model on a laptop
CPU). So after a session's coordinator round or final answer the local provider keeps a
``SavedState``: the KV cache of llama.cpp's sequence (``llama_state_seq_get_data``, no logits)
with the tokens it holds; before that session's next request it restores the state whose tokens
share the longest prefix with the new prompt, when that beats what the context holds.

* **Where.** In memory, least recently used out first past ``chat.state_cache_memory`` bytes;
  and, for stored sessions, as files in ``model-states/`` under the cache dir, oldest out first
  past ``chat.state_cache_disk`` bytes, written by one background thread so a reply never waits
  on the disk. The writer works while the model is idle (``generating`` marks when it is not):
  it starts once no generation has run for ``WRITE_QUIET_S`` and pauses between chunks of
  ``WRITE_CHUNK`` bytes while one runs, so writing never competes with a reply for a core; a
  state waits at most ``WRITE_WAIT_S`` for that, then is written anyway, and ``flush``/``close``
  write at once. A session keeps its newest ``STATES_PER_SESSION`` states; one whose tokens a
  newer state extends is dropped. A session with persistence off keeps its states in memory
  only. Files are created 0600 in a 0700 folder; folders above it that the cache creates are 0700
  too (``private.private_folder``).
* **Valid for.** One model identity (``fingerprint``: the GGUF file, n_ctx, n_batch, the chat
  template, the llama.cpp build). A file with another fingerprint or session is foreign: ignored
  (logged once) and left for the disk cap to age out. A file whose header does not add up to its
  size (cut short, appended to, counts that are negative or larger than the file), or whose
  SHA-256 over its tokens and data does not match, is corrupt: ignored, logged and deleted. One
  parser (``_open_state``) reads every file. Nothing here raises on a bad file.
* **Isolation.** States are found by session id only, so one session never receives another's.
  Deleting a session deletes its states: in memory, waiting to be written, and on disk. The
  deletion is recorded for the process (``delete_session_files``), and every cache's writer checks
  it under the same lock as it renames a file into place, so a write still queued by a cache of
  an earlier model (a settings change) cannot bring a deleted session's state back.
* **Memory for the next copy.** Once a state has been copied away, the writer also readies, while
  the model is idle, anonymous memory the size of the state the context holds, its pages handed
  out by the kernel up front (``want_spare``, ``take_spare``): the next copy, on a request's path,
  then only copies (0.4 ms for the embedded model's 11 MB, where taking fresh pages cost 5-8 ms
  and stalled the threads beside it). It counts against ``chat.state_cache_memory`` like a
  state, is made only in room the states leave, and a quarter larger than asked, so a session's
  next turns fit it too. Linux only (``MAP_POPULATE``, ``mremap``): elsewhere a copy takes fresh
  memory.
* **Closing.** ``close`` frees the memory at once, refuses new states, and lets the writer write
  what is queued and end: a model replaced on a settings change leaves neither its states nor
  its thread behind.
"""

from __future__ import annotations

import hashlib
import logging
import math
import mmap
import os
import re
import struct
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from io import BufferedReader
from pathlib import Path
from typing import Annotated

import msgspec

from imprintd.private import FOLDER_MODE, private_folder

logger = logging.getLogger("imprintd.models.state")

#: States a session keeps (its last coordinator rounds and final answer).
STATES_PER_SESSION = 3
#: The folder under the cache dir that holds state files.
FOLDER_NAME = "model-states"
#: A temporary file left by a writer that died is removed once older than this.
STALE_TEMP_S = 3600
#: File layout: magic, format version, length of the JSON header; then the header, the tokens
#: (int32, little-endian) and llama.cpp's sequence data.
MAGIC = b"IMPSTATE"
FORMAT_VERSION = 1
_PREAMBLE = struct.Struct("<8sII")
_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_TOKEN = array("i").itemsize
#: The writer starts on a queued state once no generation has run for this long (the short gap
#: between a reply's rounds is not idle time).
WRITE_QUIET_S = 0.1
#: A queued state waits at most this long for the model to be idle; then it is written anyway,
#: so a daemon that never rests still saves its states (and frees their memory) soon.
WRITE_WAIT_S = 30.0
#: Bytes the writer hashes and writes between two looks at whether a generation started.
WRITE_CHUNK = 1 << 20
#: The clock the writer's waits are measured on (a module attribute so tests can move time on).
_clock = time.monotonic

# Sessions deleted in this process, by (state folder, session id). Every cache of every model
# checks it while it renames a file into place, under this lock, which deletion also holds: a
# write queued before the deletion, by whichever cache, never lands after it.
_deletions = threading.Lock()
_deleted: set[tuple[str, str]] = set()


def _deletion_key(folder: Path, session_id: str) -> tuple[str, str]:
    return os.path.abspath(folder), session_id


class _Header(msgspec.Struct, frozen=True):
    fingerprint: str
    session: str
    tokens: Annotated[int, msgspec.Meta(ge=0)]
    data: Annotated[int, msgspec.Meta(ge=0)]
    sha256: str


#: llama.cpp's bytes of a state: anonymous memory when copied out of the context
#: (``local._Loaded.save_sequence``), a bytearray when read back from a file.
StateData = bytearray | mmap.mmap

#: Whether this system can ready memory for a copy ahead (``StateCache.want_spare``): map it with
#: its pages populated by the one call, and cut a larger one down to a state's size in place.
SPARES = hasattr(mmap, "MAP_POPULATE")  # Linux's, as ``mremap`` is
_POPULATED = mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0) | getattr(mmap, "MAP_POPULATE", 0)


@dataclass(eq=False)
class SavedState:
    """llama.cpp's sequence state after a request, and the tokens it holds."""

    session_id: str
    tokens: array  # array("i")
    data: StateData
    serial: int

    @property
    def nbytes(self) -> int:
        return len(self.data) + len(self.tokens) * _TOKEN


@dataclass(eq=False)
class _DiskEntry:
    """A state file of this model's identity, known by its header and tokens."""

    path: Path
    session_id: str
    tokens: array
    serial: int


@dataclass(frozen=True)
class Candidate:
    """The best state for a prompt: how many of its tokens would be reused, and where it is."""

    reused: int
    source: SavedState | _DiskEntry

    @property
    def tokens(self) -> int:
        return len(self.source.tokens)

    @property
    def where(self) -> str:
        return "memory" if isinstance(self.source, SavedState) else "disk"


def common_prefix(a: array, b: array) -> int:
    """How many leading tokens ``a`` and ``b`` share (slice comparisons run in C)."""
    high = min(len(a), len(b))
    if a[:high] == b[:high]:
        return high
    low = 0
    while low < high:  # a[:low] == b[:low] and a[:high] != b[:high]
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def states_folder(cache_dir: Path) -> Path:
    return cache_dir / FOLDER_NAME


def delete_session_files(folder: Path, session_id: str) -> int:
    """Delete every state file of ``session_id`` in ``folder``, for good: no cache of this
    process writes one for it afterwards. Returns how many went."""
    if not _SESSION_ID.match(session_id):
        return 0
    with _deletions:
        _deleted.add(_deletion_key(folder, session_id))
        return _unlink_session_files(folder, session_id)


def _unlink_session_files(folder: Path, session_id: str) -> int:
    removed = 0
    try:
        paths = list(folder.glob(f"{session_id}.*.state"))
    except OSError:
        return 0
    for path in paths:
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:
            pass
        except OSError as error:
            logger.warning("could not delete the model state file %s: %s", path, error.strerror or error)
    return removed


def _head(state: SavedState, fingerprint: str, sha256: str) -> bytes:
    """A state file's preamble and JSON header; as long whatever the digest (64 hex digits), so the
    writer can put it first before the digest is known and write it again at the end."""
    header = msgspec.json.encode(
        _Header(
            fingerprint=fingerprint,
            session=state.session_id,
            tokens=len(state.tokens),
            data=len(state.data),
            sha256=sha256,
        )
    )
    return _PREAMBLE.pack(MAGIC, FORMAT_VERSION, len(header)) + header


def _token_bytes(state: SavedState) -> bytes:
    return state.tokens.tobytes() if _LITTLE_ENDIAN else _swapped(state.tokens).tobytes()


_LITTLE_ENDIAN = struct.pack("=i", 1) == struct.pack("<i", 1)


def _swapped(tokens: array) -> array:
    copy = array("i", tokens)
    copy.byteswap()
    return copy


class BadStateFile(Exception):
    """A state file that cannot be used; ``corrupt`` when it should be deleted, not just skipped."""

    def __init__(self, reason: str, *, corrupt: bool) -> None:
        super().__init__(reason)
        self.corrupt = corrupt


def _open_state(path: Path, fingerprint: str, session_id: str) -> tuple[BufferedReader, _Header]:
    """The one parser of a state file: ``path`` opened, positioned after its header, and the header,
    checked against the file's size, this model's identity and ``session_id``.

    Raises ``BadStateFile`` (``corrupt`` when the file should go) or ``OSError``; never trusts a
    count before comparing it with the bytes the file holds, so a damaged header costs nothing.
    """
    handle = path.open("rb")
    try:
        size = os.fstat(handle.fileno()).st_size
        raw = handle.read(_PREAMBLE.size)
        if len(raw) < _PREAMBLE.size:
            raise BadStateFile("it is cut short", corrupt=True)
        magic, version, length = _PREAMBLE.unpack(raw)
        if magic != MAGIC:
            raise BadStateFile("it is not an imprintd model state file", corrupt=True)
        if version != FORMAT_VERSION:
            raise BadStateFile(f"it has format version {version}, not {FORMAT_VERSION}", corrupt=False)
        if length > min(1 << 16, size - _PREAMBLE.size):
            raise BadStateFile("its header is longer than the file", corrupt=True)
        try:
            header = msgspec.json.decode(handle.read(length), type=_Header)
        except msgspec.ValidationError:
            raise BadStateFile("its header does not say its sizes", corrupt=True) from None
        except msgspec.DecodeError:
            raise BadStateFile("its header does not parse", corrupt=True) from None
        if _PREAMBLE.size + length + header.tokens * _TOKEN + header.data != size:
            raise BadStateFile("its length does not match its header (cut short or appended to)", corrupt=True)
        if header.fingerprint != fingerprint:
            raise BadStateFile("it was saved for another model or its settings", corrupt=False)
        if header.session != session_id:
            raise BadStateFile("it was saved for another session", corrupt=False)
    except BaseException:
        handle.close()
        raise
    return handle, header


def _read_tokens(handle: BufferedReader, count: int) -> array:
    raw = handle.read(count * _TOKEN)
    if len(raw) != count * _TOKEN:
        raise BadStateFile("it is cut short", corrupt=True)
    tokens = array("i")
    tokens.frombytes(raw)
    if not _LITTLE_ENDIAN:
        tokens.byteswap()
    return tokens


class StateCache:
    """The states of one loaded model (one fingerprint): memory LRU, disk files, one writer thread.

    Thread-safe: the model's generation thread, budget measurements and the writer share it.
    """

    def __init__(self, folder: Path | None, fingerprint: str, *, memory_bytes: int, disk_bytes: int) -> None:
        self.folder = folder
        self.fingerprint = fingerprint
        self.memory_bytes = memory_bytes
        self.disk_bytes = disk_bytes
        self._lock = threading.Lock()
        self._memory: OrderedDict[int, SavedState] = OrderedDict()  # by serial, least recent first
        self._in_memory = 0
        self._disk: dict[str, list[_DiskEntry]] = {}  # by session, read on first use
        self._pending: list[SavedState] = []  # states to write, oldest first
        self._queued_at: dict[int, float] = {}  # when each pending state was queued, by serial
        self._writing: SavedState | None = None
        self._generating = 0  # generations running now (``generating``)
        self._idle_since = -math.inf  # when the last one ended
        self._hurry = 0  # ``flush`` calls waiting: write now, idle or not
        self._forgotten: set[str] = set()
        self._skipped: set[Path] = set()  # foreign files already logged
        self._wake = threading.Condition(self._lock)
        self._writer: threading.Thread | None = None
        self._closing = False  # no new states; the writer ends once the queue is written
        self._last_serial = 0
        self._spare: mmap.mmap | None = None  # memory readied for the next copy (``want_spare``)
        self._spare_wanted = 0  # bytes the writer is to ready; 0: none
        self._readying = False  # the writer is mapping them now
        #: Counters for tests and the benchmark: states kept, restored (memory, disk), files written.
        self.stats = {"kept": 0, "memory": 0, "disk": 0, "written": 0, "ignored": 0}

    # -- limits ---------------------------------------------------------------------------------
    def set_limits(self, *, memory_bytes: int, disk_bytes: int) -> None:
        with self._lock:
            self.memory_bytes, self.disk_bytes = memory_bytes, disk_bytes
            self._evict_memory()
        if self.folder is not None and disk_bytes >= 0:
            self._trim_disk()

    def new_serial(self) -> int:
        """Increasing across restarts (it is a time), so that "newest" and "oldest" hold on disk too."""
        with self._lock:
            self._last_serial = max(time.time_ns(), self._last_serial + 1)
            return self._last_serial

    # -- finding and taking a state ---------------------------------------------------------------
    def best(self, session_id: str, prompt: array, reuse: Callable[[int, int], int]) -> Candidate | None:
        """The state of ``session_id`` that would reuse most of ``prompt``, without loading it.

        ``reuse(common, state_tokens)`` says how many tokens a state sharing ``common`` leading
        tokens with the prompt would keep (the model's rule: one is replayed for fresh logits).
        """
        entries = self._disk_entries(session_id)
        with self._lock:
            in_memory = [state for state in self._memory.values() if state.session_id == session_id]
            known = {state.serial for state in in_memory}
            sources: list[SavedState | _DiskEntry] = [*in_memory, *(e for e in entries if e.serial not in known)]
        best: Candidate | None = None
        for source in sources:
            reused = reuse(common_prefix(source.tokens, prompt), len(source.tokens))
            if reused > 0 and (best is None or reused > best.reused):
                best = Candidate(reused=reused, source=source)
        return best

    def take(self, candidate: Candidate) -> SavedState | None:
        """The candidate's state, read and checked if it is on disk; None (logged) if unusable."""
        source = candidate.source
        if isinstance(source, SavedState):
            with self._lock:
                if source.serial in self._memory:
                    self._memory.move_to_end(source.serial)
            self.stats["memory"] += 1
            return source
        state = self._load_file(source)
        if state is not None:
            self.stats["disk"] += 1
            with self._lock:
                if source.session_id not in self._forgotten:
                    self._remember(state)
        return state

    def discard(self, candidate: Candidate, reason: str) -> None:
        """Forget a state llama.cpp refused to load (its file too)."""
        logger.warning("a saved model state of %d tokens was refused (%s); it is dropped", candidate.tokens, reason)
        source = candidate.source
        with self._lock:
            if isinstance(source, SavedState):
                self._drop_memory(source)
            else:
                self._drop_entry(source)
        if isinstance(source, _DiskEntry):
            _unlink(source.path)

    # -- when the writer may work -----------------------------------------------------------------
    @contextmanager
    def generating(self) -> Iterator[None]:
        """Mark a generation running: the writer holds off until it ends (``WRITE_QUIET_S`` later)
        or a state has waited ``WRITE_WAIT_S``."""
        with self._lock:
            self._generating += 1
        try:
            yield
        finally:
            with self._lock:
                self._generating -= 1
                self._idle_since = _clock()
                self._wake.notify_all()

    def _hold_off(self, queued_at: float) -> float:
        """Seconds the writer waits before its next chunk of a state queued at ``queued_at``
        (0: write now). Called under the lock."""
        if self._closing or self._hurry:
            return 0.0
        now = _clock()
        waited_enough = queued_at + WRITE_WAIT_S - now
        if self._generating:
            return max(0.0, waited_enough)
        return max(0.0, min(waited_enough, self._idle_since + WRITE_QUIET_S - now))

    def _wait_to_write(self, queued_at: float) -> None:
        with self._lock:
            while (left := self._hold_off(queued_at)) > 0:
                self._wake.wait(left)

    # -- keeping a state --------------------------------------------------------------------------
    def keep(self, state: SavedState, *, persist: bool) -> None:
        """Keep ``state`` in memory and, when ``persist``, queue it for the disk."""
        with self._lock:
            if state.session_id in self._forgotten or self._closing:
                return
            self.stats["kept"] += 1
            for older in [s for s in self._memory.values() if s.session_id == state.session_id]:
                if common_prefix(older.tokens, state.tokens) == len(older.tokens):
                    self._drop_memory(older)  # the new state extends it: it can no longer win
            same = [s for s in self._memory.values() if s.session_id == state.session_id]
            for older in same[: max(0, len(same) - STATES_PER_SESSION + 1)]:
                self._drop_memory(older)
            self._remember(state)
            if persist and self.folder is not None and self.disk_bytes > 0 and _SESSION_ID.match(state.session_id):
                self._pending.append(state)
                self._queued_at[state.serial] = _clock()
                self._start_writer()
                self._wake.notify_all()

    def _remember(self, state: SavedState) -> None:
        if state.nbytes > self.memory_bytes or state.serial in self._memory:
            return
        self._memory[state.serial] = state
        self._in_memory += state.nbytes
        self._evict_memory()

    def _evict_memory(self) -> None:
        if self._spare is not None and self._in_memory > self.memory_bytes:
            self._in_memory -= len(self._spare)  # memory readied goes before any state kept
            self._spare = None  # unmapped once unreferenced
        while self._memory and self._in_memory > self.memory_bytes:
            _, state = self._memory.popitem(last=False)
            self._in_memory -= state.nbytes

    def _drop_memory(self, state: SavedState) -> None:
        if self._memory.pop(state.serial, None) is not None:
            self._in_memory -= state.nbytes
        # Superseded before it reached the disk: do not write it.
        self._unqueue(lambda pending: pending is state)

    def _unqueue(self, dropped: Callable[[SavedState], bool]) -> None:
        self._pending = [s for s in self._pending if not dropped(s)]
        self._queued_at = {s.serial: self._queued_at.get(s.serial, -math.inf) for s in self._pending}

    # -- memory for the next copy -------------------------------------------------------------------
    def want_spare(self, size: int) -> None:
        """The state the context holds would take ``size`` bytes to copy: have the writer ready that
        much memory while the model is idle (and a quarter more, for the session's next turns), so
        the copy, when another request replaces the state, takes no fresh pages on that request's
        path (``take_spare``). Nothing until a state has been copied away once (a model serving one
        session never needs it), nor beyond the room the states kept leave."""
        if not SPARES or size <= 0:
            return
        with self._lock:
            held = len(self._spare) if self._spare is not None else 0
            if held >= size or self._closing or not self.stats["kept"]:
                self._spare_wanted = 0
                return
            wanted = size + size // 4
            if self._in_memory - held + wanted > self.memory_bytes:
                self._spare_wanted = 0  # no room: an earlier ask would be made for nothing
                return
            self._spare_wanted = wanted
            self._start_writer()
            self._wake.notify_all()

    def take_spare(self, size: int) -> mmap.mmap | None:
        """The memory readied for a copy, if it holds ``size`` bytes: the caller's from now on (a
        state made of it counts again when kept); else None, and the copy takes fresh memory."""
        with self._lock:
            spare = self._spare
            if spare is None or len(spare) < size:
                return None
            self._spare = None
            self._in_memory -= len(spare)
            return spare

    def _ready_spare(self) -> None:
        """In the writer, with no state to write: map the memory ``want_spare`` asked for, once the
        model has been idle ``WRITE_QUIET_S`` (never beside a generation: it is worth no core a reply
        could use), replacing a smaller one."""
        with self._lock:
            while self._spare_wanted and not self._pending and not self._closing and not self._hurry:
                if self._generating:
                    self._wake.wait()
                elif (left := self._idle_since + WRITE_QUIET_S - _clock()) > 0:
                    self._wake.wait(left)
                else:
                    break
            size, self._spare_wanted = self._spare_wanted, 0
            if not size or self._pending or self._closing:
                self._spare_wanted = size if self._pending and not self._closing else 0
                return
            if self._spare is not None:
                self._in_memory -= len(self._spare)
                self._spare = None
            self._readying = True
        spare: mmap.mmap | None = None
        try:
            spare = mmap.mmap(-1, size, flags=_POPULATED)
        except OSError as error:  # out of memory or address space: the copy takes fresh memory
            logger.debug("could not ready %d bytes for a model state copy: %s", size, error)
        finally:
            with self._lock:
                if spare is not None and not self._closing and self._in_memory + size <= self.memory_bytes:
                    self._spare = spare
                    self._in_memory += size
                self._readying = False
                self._wake.notify_all()

    @property
    def memory_used(self) -> int:
        with self._lock:
            return self._in_memory

    # -- forgetting -----------------------------------------------------------------------------
    def forget(self, session_id: str) -> None:
        """Delete every state of ``session_id``: in memory, waiting to be written, on disk."""
        with self._lock:
            self._forgotten.add(session_id)
            for state in [s for s in self._memory.values() if s.session_id == session_id]:
                self._drop_memory(state)
            self._unqueue(lambda pending: pending.session_id == session_id)
            self._disk.pop(session_id, None)
            if self.folder is not None:
                # Under the lock, so the writer cannot rename a file of this session in meanwhile.
                delete_session_files(self.folder, session_id)

    @property
    def closing(self) -> bool:
        """True once ``close`` was called: states offered to ``keep`` are dropped."""
        return self._closing

    # -- the disk -------------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        """Write every queued state now, and ready the memory asked for (``want_spare``), idle or
        not, and wait until that is done; False if ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._hurry += 1
            self._wake.notify_all()
            try:
                while self._pending or self._writing is not None or self._spare_wanted or self._readying:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._wake.wait(left)
            finally:
                self._hurry -= 1
        return True

    def close(self, timeout: float | None = 30.0) -> bool:
        """Free the states in memory and take no more; the writer writes what is queued, then ends.

        Waits up to ``timeout`` seconds for that (0: not at all; None: as long as it takes);
        returns whether the queue was written by then.
        """
        with self._lock:
            self._closing = True
            self._memory.clear()
            self._spare, self._spare_wanted = None, 0
            self._in_memory = 0
            self._wake.notify_all()
            writer = self._writer
        if timeout == 0:
            return not self._pending and self._writing is None
        written = self.flush(timeout)
        if written and writer is not None:
            writer.join(timeout)  # it ends as soon as it sees the queue empty
        return written

    def _start_writer(self) -> None:
        if self._writer is None or not self._writer.is_alive():
            self._writer = threading.Thread(target=self._write_loop, name="imprintd-state-writer", daemon=True)
            self._writer.start()

    def _write_loop(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._spare_wanted and not self._closing:
                    self._wake.wait()
                if not self._pending and self._closing:  # everything is written
                    self._writer = None
                    return
                if self._pending:
                    state = self._pending.pop(0)
                    queued_at = self._queued_at.pop(state.serial, -math.inf)
                    self._writing = state
                else:
                    state = None
            if state is None:
                self._ready_spare()  # states to write come first
                continue
            try:
                self._write(state, queued_at)
            except OSError as error:
                logger.warning("could not write a model state to %s: %s", self.folder, error.strerror or error)
            except Exception:  # the writer must outlive any one bad write
                logger.exception("writing a model state failed")
            finally:
                with self._lock:
                    self._writing = None
                    self._wake.notify_all()

    def _ensure_folder(self) -> Path:
        assert self.folder is not None
        private_folder(self.folder)  # and the parents it creates, 0700 as well
        os.chmod(self.folder, FOLDER_MODE)  # ours, even if it existed
        return self.folder

    def _write(self, state: SavedState, queued_at: float = -math.inf) -> None:
        """Write ``state``'s file, a chunk at a time while the model is idle (``_wait_to_write``):
        the header goes first with a blank digest and again, with the real one, at the end."""
        if state.nbytes > self.disk_bytes:
            return  # it would push everything else out and still not fit
        self._wait_to_write(queued_at)
        folder = self._ensure_folder()
        final = folder / f"{state.session_id}.{state.serial}.state"
        temporary = folder / f".{final.name}.{os.getpid()}.tmp"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(_head(state, self.fingerprint, "0" * 64))
                digest = hashlib.sha256()
                for part in (_token_bytes(state), state.data):
                    with memoryview(part) as view:
                        for start in range(0, len(view), WRITE_CHUNK):
                            self._wait_to_write(queued_at)
                            chunk = view[start : start + WRITE_CHUNK]
                            digest.update(chunk)
                            handle.write(chunk)
                handle.seek(0)
                handle.write(_head(state, self.fingerprint, digest.hexdigest()))
        except BaseException:
            _unlink(temporary)
            raise
        with self._lock, _deletions:
            wanted = state.session_id not in self._forgotten and _deletion_key(folder, state.session_id) not in _deleted
            if wanted:
                os.replace(temporary, final)  # whole or not at all: a reader never sees half a file
                entries = self._disk.get(state.session_id)
                if entries is not None:
                    entries.append(_DiskEntry(final, state.session_id, state.tokens, state.serial))
        if not wanted:
            _unlink(temporary)
            return
        self.stats["written"] += 1
        self._trim_session(state.session_id, state)
        self._trim_disk()

    def _trim_session(self, session_id: str, newest: SavedState) -> None:
        """Keep the session's newest files, and none that the newest one extends."""
        entries = self._disk_entries(session_id)
        with self._lock:
            drop = [
                e
                for e in entries
                if e.serial != newest.serial and common_prefix(e.tokens, newest.tokens) == len(e.tokens)
            ]
            rest = sorted((e for e in entries if e not in drop), key=lambda e: e.serial)
            drop += rest[: max(0, len(rest) - STATES_PER_SESSION)]
            for entry in drop:
                self._drop_entry(entry)
        for entry in drop:
            _unlink(entry.path)

    def _trim_disk(self) -> None:
        """Delete the oldest files until the folder is within ``disk_bytes``."""
        if self.folder is None:
            return
        files = []
        now = time.time()
        try:
            scanned = list(os.scandir(self.folder))
        except FileNotFoundError:
            return
        for item in scanned:
            try:
                info = item.stat(follow_symlinks=False)
            except OSError:
                continue
            if item.name.endswith(".tmp"):
                if now - info.st_mtime > STALE_TEMP_S:
                    _unlink(Path(item.path))
                continue
            if item.name.endswith(".state"):
                files.append((_serial_of(item.name, info.st_mtime_ns), info.st_size, Path(item.path)))
        files.sort()
        total = sum(size for _, size, _ in files)
        for _, size, path in files:
            if total <= self.disk_bytes:
                break
            _unlink(path)
            total -= size
            with self._lock:
                for entries in self._disk.values():
                    entries[:] = [e for e in entries if e.path != path]

    def _drop_entry(self, entry: _DiskEntry) -> None:
        entries = self._disk.get(entry.session_id)
        if entries is not None and entry in entries:
            entries.remove(entry)

    def _disk_entries(self, session_id: str) -> list[_DiskEntry]:
        """The session's usable files, their headers and tokens read on first use (never the data)."""
        with self._lock:
            known = self._disk.get(session_id)
            if known is not None:
                return list(known)
        found: list[_DiskEntry] = []
        if self.folder is not None and _SESSION_ID.match(session_id):
            try:
                paths = sorted(self.folder.glob(f"{session_id}.*.state"))
            except OSError:
                paths = []
            for path in paths:
                entry = self._read_entry(path, session_id)
                if entry is not None:
                    found.append(entry)
        with self._lock:
            if session_id in self._forgotten:
                return []
            entries = self._disk.setdefault(session_id, found)
            return list(entries)

    def _read_entry(self, path: Path, session_id: str) -> _DiskEntry | None:
        try:
            handle, header = _open_state(path, self.fingerprint, session_id)
            with handle:
                tokens = _read_tokens(handle, header.tokens)
        except BadStateFile as bad:
            self._ignore(path, str(bad), bad.corrupt)
            return None
        except OSError as error:
            self._ignore(path, f"it cannot be read: {error.strerror or error}", False)
            return None
        return _DiskEntry(path, session_id, tokens, _serial_of(path.name, 0))

    def _load_file(self, entry: _DiskEntry) -> SavedState | None:
        path = entry.path
        try:
            handle, header = _open_state(path, self.fingerprint, entry.session_id)
            with handle:
                raw_tokens = handle.read(header.tokens * _TOKEN)
                data = bytearray(header.data)  # bounded by the file's size, checked above
                read = handle.readinto(data)
        except BadStateFile as bad:
            self._forget_entry(entry, str(bad), bad.corrupt)
            return None
        except OSError as error:
            self._forget_entry(entry, f"it cannot be read: {error.strerror or error}", False)
            return None
        if len(raw_tokens) != header.tokens * _TOKEN or read != header.data:
            # Changed since its size was read (another process): not this file any more.
            self._forget_entry(entry, "its length does not match its header (cut short or appended to)", True)
            return None
        digest = hashlib.sha256(raw_tokens)
        digest.update(data)
        if digest.hexdigest() != header.sha256:
            self._forget_entry(entry, "its checksum does not match", True)
            return None
        tokens = array("i")
        tokens.frombytes(raw_tokens)
        if not _LITTLE_ENDIAN:
            tokens.byteswap()
        return SavedState(session_id=entry.session_id, tokens=tokens, data=data, serial=entry.serial)

    def _forget_entry(self, entry: _DiskEntry, reason: str, corrupt: bool) -> None:
        with self._lock:
            self._drop_entry(entry)
        self._ignore(entry.path, reason, corrupt)

    def _ignore(self, path: Path, reason: str, corrupt: bool) -> None:
        self.stats["ignored"] += 1
        if corrupt:
            logger.warning("ignored the model state file %s: %s; it is deleted", path, reason)
            _unlink(path)
        elif path not in self._skipped:
            self._skipped.add(path)
            logger.info("ignored the model state file %s: %s", path, reason)


def _serial_of(name: str, fallback: int) -> int:
    """A file's serial from its name (``<session>.<serial>.state``); else its mtime."""
    parts = name.split(".")
    if len(parts) == 3 and parts[1].isdigit():
        return int(parts[1])
    return fallback


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as error:
        logger.warning("could not delete %s: %s", path, error.strerror or error)
