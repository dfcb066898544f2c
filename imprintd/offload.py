"""Blocking work off the event loop: what runs in worker threads so the loop only moves messages.

One asyncio loop serves every session and front door (docs/architecture.md, "Concurrency"), so
anything that can wait on a disk, a lock or a long computation runs here instead: store calls
(which wait up to the busy timeout on a file another process holds), whole-prompt counts and
renders, file reads. ``in_worker`` is the one way in, with a limiter of its own.

A call is abandoned, not waited for, when the request awaiting it is cancelled: ``$/cancelRequest``
and ``shutdown`` answer at once even while a store call waits out its busy timeout. What the
abandoned call was doing finishes (or fails) in its thread on its own; a store write stays one
whole transaction either way (``store.Store``).
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import anyio
import anyio.to_thread

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
