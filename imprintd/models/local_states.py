"""When the local provider takes a session's state from llama.cpp and when it puts one back
(docs/decisions.md, "Model state").

``state_cache.StateCache`` stores states (memory, disk); ``SessionStates`` decides, for one
``LocalModel``, what goes in and comes out of llama.cpp's context around a request:

* **Copy when replaced.** After a session's coordinator round or final answer the context holds
  that session's state, uncopied (``hold``). The next request copies it into the cache first
  (``displace``) only when it is another session's, a side request's or nothing's; the session's
  own next round extends the context and needs no copy. Closing the states copies it too.
* **Restore before a request.** The session's state sharing the longest prefix with the prompt is
  restored when it would reuse more than the context holds (``restore``, ``best``).
* **Valid for.** A state is used only for the model identity it was saved with (``fingerprint``).
* **The writer waits for idle.** Generation runs inside ``generating``, so the cache's writer
  writes files only while no generation runs (``StateCache.generating``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import mmap
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from imprintd.models.base import RequestScope
from imprintd.models.state_cache import (
    FORMAT_VERSION,
    Candidate,
    SavedState,
    StateCache,
    StateData,
    common_prefix,
    delete_session_files,
)

# The provider's log: what was restored is part of what a request did.
logger = logging.getLogger("imprintd.models.local")


class HeldContext(Protocol):
    """What this module needs of a loaded model (``local._Loaded``): llama.cpp, the lock its
    context is used under, and copying its sequence out and back."""

    llama: Any
    template: str
    generation_lock: threading.Lock

    def held_tokens(self) -> array: ...

    def state_size(self) -> int: ...

    def save_sequence(self, spare: Callable[[int], mmap.mmap | None]) -> tuple[array, StateData] | None: ...

    def restore_sequence(self, state: SavedState) -> bool: ...


def live_reuse(common: int, prompt_length: int) -> int:
    """Prompt tokens ``Llama.generate`` keeps of a context sharing ``common`` with it (one replayed
    when the prompt is all held, for fresh logits)."""
    return common - 1 if common and common == prompt_length else common


def fingerprint(loaded: HeldContext, model_path: Path, extra_buffers: bool | None) -> str:
    """What a saved state is valid for: the model file, the context's settings, the build."""
    import llama_cpp

    llama = loaded.llama
    stat = model_path.stat()
    params = llama.context_params
    identity = {
        "format": FORMAT_VERSION,
        "model": str(model_path.resolve()),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "n_ctx": llama.n_ctx(),
        "n_batch": llama.n_batch,
        "context": {
            name: str(getattr(params, name, None))
            for name in ("n_ubatch", "type_k", "type_v", "flash_attn_type", "offload_kqv", "swa_full", "kv_unified")
        },
        "extra_buffers": extra_buffers,
        "template": hashlib.sha256(loaded.template.encode("utf-8")).hexdigest(),
        "llama_cpp": llama_cpp.__version__,
        "system": llama_cpp.llama_cpp.llama_print_system_info().decode("utf-8", "replace"),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()


class SessionStates:
    """The per-session states of one local model: ``chat.state_cache_memory`` and
    ``chat.state_cache_disk`` bytes (0 is off), the cache made once the model's identity is known."""

    def __init__(self, *, memory_bytes: int, disk_bytes: int, folder: Path | None) -> None:
        self.limits = (memory_bytes, disk_bytes)
        self.folder = folder
        self.cache: StateCache | None = None
        #: The session whose state llama.cpp's context holds, not copied yet (see ``displace``).
        self.unsaved: RequestScope | None = None
        #: What the latest request restored: (session, tokens of the state, "memory" or "disk").
        self.last_restore: tuple[str, int, str] | None = None

    def open(self, identity: str) -> None:
        """Make the cache for the loaded model's ``identity`` (``fingerprint``)."""
        memory, disk = self.limits
        self.cache = StateCache(self.folder if disk > 0 else None, identity, memory_bytes=memory, disk_bytes=disk)

    def set_limits(self, *, memory_bytes: int, disk_bytes: int) -> None:
        if (memory_bytes, disk_bytes) == self.limits:
            return
        self.limits = (memory_bytes, disk_bytes)
        if self.cache is not None:
            if self.cache.folder is None and disk_bytes > 0:
                self.cache.folder = self.folder
            self.cache.set_limits(memory_bytes=memory_bytes, disk_bytes=disk_bytes)

    def forget(self, session_id: str) -> None:
        """Delete the session's states, in memory and on disk."""
        unsaved = self.unsaved
        if unsaved is not None and unsaved.session_id == session_id:
            self.unsaved = None
        if self.cache is not None:
            self.cache.forget(session_id)
        if self.folder is not None:
            delete_session_files(self.folder, session_id)

    def save_context(self, loaded: HeldContext | None, timeout: float) -> bool:
        """Copy the session state the context holds into the cache now, waiting up to ``timeout``
        for a generation in progress; False if that did not end in time."""
        if loaded is None or self.unsaved is None:
            return True
        if not loaded.generation_lock.acquire(timeout=timeout):
            return False
        try:
            owner, self.unsaved = self.unsaved, None
            if owner is not None:
                self._keep(loaded, owner)
        finally:
            loaded.generation_lock.release()
        return True

    def close(self, loaded: HeldContext | None, timeout: float) -> None:
        """Keep the state the context holds, write the states still queued (each within
        ``timeout``), free the rest and stop the writer."""
        self.save_context(loaded, timeout)
        if self.cache is not None:
            self.cache.close(timeout)

    @contextlib.contextmanager
    def generating(self) -> Iterator[None]:
        """Around a generation: the cache's writer holds off meanwhile."""
        if self.cache is None:
            yield
            return
        with self.cache.generating():
            yield

    def hold(self, loaded: HeldContext, scope: RequestScope | None) -> None:
        """After a generation, between evaluations (a cancel or deadline stops there), so the tokens
        held describe the context: a coordinator round's or final answer's session owns it until
        the next request copies it away (``displace``), into memory readied meanwhile
        (``StateCache.want_spare``)."""
        if scope is not None and scope.keep:
            self.unsaved = scope
            if self.cache is not None:
                self.cache.want_spare(loaded.state_size())

    # -- before a request, under the generation lock ----------------------------------------------
    def displace(self, loaded: HeldContext, scope: RequestScope | None) -> None:
        """Copy the state of the session the context holds if this request would replace it.

        The copy is taken here rather than after the session's own request, so that request's
        reply never waits for it, and the session's next round, which extends the context, needs
        no copy at all: the state after that round holds the same prefix and more.
        """
        owner, self.unsaved = self.unsaved, None
        if owner is None:
            return
        if scope is not None and scope.keep and scope.session_id == owner.session_id:
            return
        self._keep(loaded, owner)

    def restore(self, loaded: HeldContext, scope: RequestScope | None, tokens: list[int]) -> None:
        """Restore the session's best state when it beats what the context holds."""
        self.last_restore = None
        cache = self.cache
        if cache is None or scope is None or not scope.keep:
            return
        prompt = array("i", tokens)
        held = live_reuse(common_prefix(loaded.held_tokens(), prompt), len(prompt))
        candidate = self.best(loaded, scope, prompt, held)
        if candidate is None:
            return
        state = cache.take(candidate)
        if state is None:
            return
        if not loaded.restore_sequence(state):
            cache.discard(candidate, "llama.cpp could not load it")
            return
        self.last_restore = (scope.session_id, len(state.tokens), candidate.where)
        logger.info(
            "restored a model state of %d tokens from %s (%d of %d prompt tokens reused; the context held %d)",
            len(state.tokens),
            candidate.where,
            candidate.reused,
            len(prompt),
            held,
        )

    def best(self, loaded: HeldContext, scope: RequestScope | None, prompt: array, held: int) -> Candidate | None:
        """The session's state that would reuse most of ``prompt``, if it beats ``held`` tokens."""
        cache = self.cache
        if (
            cache is None
            or scope is None
            or not scope.keep
            or not cache.memory_bytes
            and not (cache.folder and cache.disk_bytes)
        ):
            return None
        candidate = cache.best(scope.session_id, prompt, _state_reuse(loaded, len(prompt)))
        return candidate if candidate is not None and candidate.reused > held else None

    def _keep(self, loaded: HeldContext, scope: RequestScope) -> None:
        """Keep what llama.cpp holds as ``scope``'s session state (a copy of its KV cache)."""
        cache = self.cache
        if cache is None or not scope.keep or cache.closing:
            return
        if not cache.memory_bytes and not (cache.folder is not None and cache.disk_bytes):
            return
        started = time.perf_counter()
        saved = loaded.save_sequence(cache.take_spare)
        if saved is None:
            return
        tokens, data = saved
        cache.keep(
            SavedState(session_id=scope.session_id, tokens=tokens, data=data, serial=cache.new_serial()),
            persist=scope.persist,
        )
        logger.debug(
            "kept a model state of %d tokens (%d bytes) in %.1f ms",
            len(tokens),
            len(data),
            (time.perf_counter() - started) * 1000,
        )


def _state_reuse(loaded: HeldContext, prompt_length: int) -> Callable[[int, int], int]:
    """How many prompt tokens a restored state would keep, as ``Llama.generate`` reuses them."""
    llama = loaded.llama
    recurrent = bool(getattr(llama, "_is_recurrent", False) or getattr(llama, "_is_hybrid", False))

    def reuse(common: int, state_tokens: int) -> int:
        if recurrent:
            # A recurrent memory cannot be cut back: only a state the prompt extends helps.
            return common if common == state_tokens < prompt_length else 0
        return common - 1 if common and common == prompt_length else common

    return reuse
