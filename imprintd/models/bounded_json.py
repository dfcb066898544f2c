"""JSON read from a disk or a server with its nesting bounded (an Ollama manifest, a served
model list).

``json.loads`` itself recurses once per level and stops with ``RecursionError`` near the
interpreter's limit; everything that walks the value afterwards recurses as well. So a document
is refused, with a message naming the bound, when either happens: ``json.loads`` gives up, or
the value (checked without recursion) nests deeper than the caller's bound. The caller bounds
the size before (the bytes it hands in).
"""

from __future__ import annotations

import json
from typing import Any


class TooDeep(ValueError):
    """Arrays and objects nested deeper than the bound; the message names it."""


def loads_bounded(raw: bytes | str, *, max_nesting: int) -> Any:
    """``raw`` decoded; TooDeep past ``max_nesting`` levels, ValueError when it is not JSON."""
    too_deep = TooDeep(f"nested more than {max_nesting} levels deep (arrays and objects)")
    try:
        value = json.loads(raw)
    except RecursionError:
        raise too_deep from None
    if nesting_exceeds(value, max_nesting):
        raise too_deep
    return value


def nesting_exceeds(value: Any, max_nesting: int) -> bool:
    """Whether arrays and objects in ``value`` nest deeper than ``max_nesting`` (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, dict):
            children: Any = current.values()
        elif isinstance(current, list):
            children = current
        else:
            continue
        if depth >= max_nesting:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False
