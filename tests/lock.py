"""Hold the process-wide inference lock from another task, as a concurrent reply would."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from imprintd.models.base import inference_lock


@asynccontextmanager
async def lock_held_elsewhere() -> AsyncIterator[None]:
    """Inside the block, another task holds the inference lock; it lets go on exit."""
    held, release = anyio.Event(), anyio.Event()

    async def hold() -> None:
        async with inference_lock():
            held.set()
            await release.wait()

    async with anyio.create_task_group() as group:
        group.start_soon(hold)
        await held.wait()
        try:
            yield
        finally:
            release.set()
