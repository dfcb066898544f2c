"""Blocking work off the event loop: what runs in worker threads so the loop only moves messages.

One asyncio loop serves every session and front door (docs/architecture.md, "Concurrency"), so
anything that can wait on a disk, a lock or a long computation runs here instead: store calls
(which wait up to the busy timeout on a file another process holds), whole-prompt counts and
renders, file reads. ``in_worker`` is the one way in, with a limiter of its own.

A call is abandoned, not waited for, when the request awaiting it is cancelled: ``$/cancelRequest``
and ``shutdown`` answer at once even while a store call waits out its busy timeout. What the
abandoned call was doing finishes (or fails) in its thread on its own; a store write stays one
whole transaction either way (``store.Store``).

Searches of stored conversations run through ``in_search_worker``: a limiter of their own, so a
burst of heavy searches never holds the threads a session list or a reply's store call needs,
and a stop flag set when the request is cancelled, so an abandoned search ends
(``Store.stopped_by``) instead of running on in its thread.

Generation by the local model runs apart, in the one model thread (``in_model_thread``), at a
lower scheduling priority than the rest of the process (``lower_priority``): llama.cpp's prompt
processing keeps every core busy, and the loop thread must win a core whenever it has a message
to move. The threads llama.cpp's OpenMP team adds are created by that thread and inherit its
priority (docs/decisions.md, "The model thread runs at a lower priority").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import queue
import sys
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

import anyio
import anyio.to_thread

logger = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

#: Threads these calls may hold at once: enough that store calls waiting out a busy file never
#: queue a read of another session behind them; a limiter apart from anyio's default one (40,
#: which generation and indexing use), so neither kind of work can starve the other of threads.
WORKER_THREADS = 16

#: One limiter per event loop: a limiter belongs to the loop it was first used on (``imprintd ask``
#: and tests run loops of their own one after another).
_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = weakref.WeakKeyDictionary()


def _worker_limiter() -> anyio.CapacityLimiter:
    loop = asyncio.get_running_loop()
    limiter = _limiters.get(loop)
    if limiter is None:
        limiter = _limiters[loop] = anyio.CapacityLimiter(WORKER_THREADS)
    return limiter


async def in_worker(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` in a worker thread; the loop serves other requests meanwhile."""
    return await anyio.to_thread.run_sync(
        functools.partial(fn, *args, **kwargs), abandon_on_cancel=True, limiter=_worker_limiter()
    )


#: Searches running at once, in threads apart from ``WORKER_THREADS``: more would only share the
#: same cores; the rest wait their turn (and a cancelled one waiting never starts).
SEARCH_THREADS = 4

_search_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)


def _search_limiter() -> anyio.CapacityLimiter:
    loop = asyncio.get_running_loop()
    limiter = _search_limiters.get(loop)
    if limiter is None:
        limiter = _search_limiters[loop] = anyio.CapacityLimiter(SEARCH_THREADS)
    return limiter


async def in_search_worker(fn: Callable[[threading.Event], T]) -> T:
    """``fn(stop)`` in a search thread (``SEARCH_THREADS`` at most); ``stop`` is set when the awaiting
    request is cancelled, and ``fn`` is to end its work then (``Store.stopped_by``)."""
    stop = threading.Event()
    try:
        return await anyio.to_thread.run_sync(
            functools.partial(fn, stop), abandon_on_cancel=True, limiter=_search_limiter()
        )
    finally:
        stop.set()  # cancelled, or done: nothing more is wanted of fn either way


#: Seconds a thread running Python keeps the interpreter while another waits for it
#: (``sys.setswitchinterval``; Python's default is 5 ms). The loop thread needs the interpreter
#: lock each time it wakes for a message: behind a worker busy in Python (the first look fitting
#: its result, a search ranking hits) it waited up to the interval at every wake, and a request
#: took 20-33 ms to answer at a research reply's start where 1 ms gives 2-9 ms
#: (``bench/bench_loop_latency.py``; docs/decisions.md, "The model thread runs at a lower priority").
SWITCH_INTERVAL_S = 0.001


def favour_the_loop() -> None:
    """For a serving process: hand the interpreter over often enough that the loop thread, woken
    by a message, runs within about ``SWITCH_INTERVAL_S`` whatever the workers compute."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


#: How many nice levels below the rest of the process the model thread runs. At +10 the
#: scheduler gives a thread about a tenth of the share of a thread at the process's own level,
#: so the loop thread, woken by a message, gets a core at once; when nothing else wants the
#: cores, generation has them all as before.
MODEL_NICENESS = 10


def lower_priority(by: int = MODEL_NICENESS) -> int | None:
    """Raise the calling thread's nice value by ``by`` (at most 19); its new value, or None where
    a thread's priority cannot be set alone (not Linux) or the system refuses.

    On Linux ``setpriority(PRIO_PROCESS, tid)`` names one thread, and threads it creates later
    inherit the value; elsewhere the same call would lower the whole process, so it is not made.
    An unprivileged process may always raise a nice value (not lower it back).
    """
    if not sys.platform.startswith("linux"):
        return None
    tid = threading.get_native_id()
    try:
        niceness = min(19, os.getpriority(os.PRIO_PROCESS, tid) + by)
        os.setpriority(os.PRIO_PROCESS, tid, niceness)
    except OSError as error:  # a container's seccomp profile, say: run at the same priority
        logger.info("the model thread keeps the process's priority: %s", error)
        return None
    return niceness


def _name_native_thread(name: str) -> None:
    """The calling thread's name as the system shows it (``top -H``, ``/proc``; Python 3.11 sets
    none), which the threads it creates inherit; nothing where there is no ``/proc``."""
    try:
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text(name[:15])
    except OSError:
        pass


class _ModelThread:
    """One daemon thread, started on first use, running the jobs given to it one after another.

    A thread of its own rather than one of anyio's: a thread's lowered priority cannot be raised
    back, and anyio's threads go on to run store calls and counts for requests that must not wait.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], object], concurrent.futures.Future]] = queue.SimpleQueue()
        self._started = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._started:
            if self._thread is None:
                # A daemon: a generation still running at exit must not hold the process.
                self._thread = threading.Thread(target=self._serve, name="imprintd-model", daemon=True)
                self._thread.start()
        self._jobs.put((fn, future))
        return future

    def _serve(self) -> None:
        _name_native_thread("imprintd-model")
        lower_priority()
        while True:
            fn, future = self._jobs.get()
            # A job cancelled while queued still runs: its own stop flag ends it at once, and
            # whoever waits on what it does when it ends (``LocalModel``'s ``finished``) is not
            # left waiting.
            wanted = future.set_running_or_notify_cancel()
            try:
                result = fn()
            except BaseException as error:  # handed to the awaiting task, as a worker's would be
                # Dropped before the awaiting task is woken, as below.
                del fn
                if wanted:
                    future.set_exception(error)
            else:
                # A job's closure holds its model, which a settings change may have retired: it is
                # dropped before the awaiting task is woken, so once that task has the result
                # nothing here keeps the model (its weights) alive, while the thread goes on.
                del fn
                if wanted:
                    future.set_result(result)
                del result
            del future


_model_thread = _ModelThread()


def to_model_thread(fn: Callable[[], T]) -> concurrent.futures.Future[T]:
    """``fn()`` queued for the model thread without waiting for it: it runs before whatever is
    queued there later (a generation). Its outcome is the returned future's."""
    return _model_thread.submit(fn)


async def in_model_thread(fn: Callable[[], T]) -> T:
    """``fn()`` in the model thread (at a lower priority); the loop serves other requests meanwhile.

    A cancel of the awaiting task does not stop ``fn``: it goes on in its thread, as an abandoned
    worker call does. ``fn`` hands what must run on the loop to a ``ToLoop`` (the thread is not
    one of anyio's).
    """
    return await asyncio.wrap_future(_model_thread.submit(fn))


class ToLoop:
    """Calls a thread hands to the event loop, run there in the order given, the thread not waiting.

    The model thread hands over each token's text this way. Waiting for the loop to run each
    call (``anyio.from_thread.run_sync``) cost a switch between threads and a wake-up of the loop
    a token, 8% of a short reply in the bench's profile (docs/benchmarks.md); now the
    thread goes on generating meanwhile. With ``every`` > 0 the thread wakes the loop for its
    first call only (the first token shows at once, and a callback that cancels runs before the
    next token); after it the loop takes what was handed over every ``every`` seconds, on a timer
    of its own (started here, on the loop's thread, and stopped by ``close``), and the owner's
    ``run_pending`` takes the rest once the thread is done. A wake-up from the thread (a write to
    the loop's self-pipe) left the lowered model thread waiting for the interpreter lock while the
    loop sent what it was handed, milliseconds a wake-up on a busy machine. With ``every`` = 0
    each call the loop has not yet been asked for wakes it. The first exception a
    call raises is kept (``failure``) for the thread's owner to raise, ``on_failure`` is told,
    and the calls after it are dropped.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, on_failure: Callable[[], object] = lambda: None, every: float = 0.0
    ) -> None:
        self._loop = loop
        self._on_failure = on_failure
        self._every = every
        self._pending: list[Callable[[], object]] = []
        self._lock = threading.Lock()
        self._asked = False  # a turn of the loop is asked for and has not run yet
        self._woken = False  # the thread woke the loop once
        self._timer: asyncio.TimerHandle | None = loop.call_later(every, self._tick) if every > 0 else None
        self.failure: BaseException | None = None

    def call(self, fn: Callable[P, object], *args: P.args, **kwargs: P.kwargs) -> None:
        """Run ``fn(*args, **kwargs)`` on the loop after the calls handed over before it (thread side)."""
        call = functools.partial(fn, *args, **kwargs)
        self._hand_over(lambda pending: pending.append(call))

    def join(self, fn: Callable[[str], object], text: str) -> None:
        """Like ``call(fn, text)``, but text handed over for the same ``fn`` right after another
        piece still waiting for the loop joins it: ``fn`` runs once on the pieces together (a
        reply's tokens of one turn of the loop go out as one notification, not one each)."""

        def add(pending: list[Callable[[], object]]) -> None:
            last = pending[-1] if pending else None
            if isinstance(last, _Joined) and last.fn is fn:
                last.pieces.append(text)
            else:
                pending.append(_Joined(fn, [text]))

        self._hand_over(add)

    def _hand_over(self, add: Callable[[list[Callable[[], object]]], None]) -> None:
        """``add`` puts a call in the pending list, under the lock; without a timer, the loop is
        woken unless it was asked already."""
        with self._lock:
            add(self._pending)
            wake = not self._asked and (self._every <= 0 or not self._woken)
            if wake:
                self._asked = self._woken = True
        if wake:
            self._loop.call_soon_threadsafe(self.run_pending)

    def _tick(self) -> None:
        self.run_pending()
        if self._timer is not None:
            self._timer = self._loop.call_later(self._every, self._tick)

    def close(self) -> None:
        """Stop the loop's timer (loop side); calls handed over afterwards wait for ``run_pending``."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def run_pending(self) -> None:
        """Run every call handed over and not yet run (loop side)."""
        with self._lock:
            calls, self._pending = self._pending, []
            self._asked = False
        for call in calls:
            if self.failure is not None:
                return
            try:
                call()
            except Exception as error:  # noqa: BLE001 (kept for the thread's owner to raise)
                self.failure = error
                self._on_failure()


class _Joined:
    """Pieces of text for one callback, waiting for the loop together (``ToLoop.join``)."""

    def __init__(self, fn: Callable[[str], object], pieces: list[str]) -> None:
        self.fn = fn
        self.pieces = pieces

    def __call__(self) -> object:
        return self.fn("".join(self.pieces))
