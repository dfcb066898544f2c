"""Checks that decoded JSON is safe to hand on: bounded nesting, and text that is real Unicode.

``json.loads`` accepts two things the rest of the daemon cannot take. Deep nesting: every
consumer after it (cattrs, msgspec, logging, ``json.dumps``) recurses, so a 2 KB body of
nested arrays would end the process with ``RecursionError``. And lone surrogates
(``"\\udc80"`` escaped, or the bytes ``ED A0 80``, which ``json.loads`` lets through with
``surrogatepass``): Python strings hold them, but SQLite, UTF-8 output and every client do
not. Both are found here once, where input is decoded (client messages in ``rpc`` and
``acp.jsonrpc``, model stream chunks in ``models.remote_events``), so no handler has to think about
them. Both front doors also name a param msgspec refused the same way (``field_message``),
and ``imprintd acp`` names a string holding bytes that are not UTF-8 (``find_undecodable``).

The walk is iterative and skipped entirely when a cheap look at the raw text shows it is
not needed, so ordinary messages pay next to nothing.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

#: Arrays and objects nested deeper than this are refused. LSP's deepest messages (client
#: capabilities) nest about 8 levels; 64 leaves room and stays far from the recursion limit.
MAX_NESTING = 64

_SURROGATE = re.compile("[\ud800-\udfff]")
# In raw JSON text: an escaped surrogate (``\ud83d``, also half of a valid escaped pair) or
# the UTF-8-shaped bytes of one (ED A0..BF), which only ``surrogatepass`` decoding accepts.
_MAYBE_SURROGATE_BYTES = re.compile(rb"\\u[dD][89abcdefABCDEF]|\xed[\xa0-\xbf]")
_MAYBE_SURROGATE_TEXT = re.compile(r"\\u[dD][89abcdefABCDEF]|[\ud800-\udfff]")


class Malformed(ValueError):
    """Decoded JSON that must not be used; ``path`` names where (``params.text``), ``why`` what.

    ``too_deep`` tells the nesting limit (a fault of the message's shape) from a bad string
    (a fault of one value).
    """

    def __init__(self, path: str, why: str, *, too_deep: bool = False) -> None:
        super().__init__(f"{path}: {why}" if path else why)
        self.path = path
        self.why = why
        self.too_deep = too_deep


def may_need_check(raw: bytes | str) -> bool:
    """False when ``raw`` can hold neither deep nesting nor a surrogate: then ``check`` is moot."""
    if isinstance(raw, bytes):
        deep = raw.count(b"[") + raw.count(b"{") > MAX_NESTING
        return deep or _MAYBE_SURROGATE_BYTES.search(raw) is not None
    deep = raw.count("[") + raw.count("{") > MAX_NESTING
    return deep or _MAYBE_SURROGATE_TEXT.search(raw) is not None


def has_lone_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def check(value: Any, root: str = "") -> None:
    """Raise ``Malformed`` for nesting deeper than ``MAX_NESTING`` or a string (key or value)
    holding a lone surrogate; the first problem found, depth first, is named."""
    stack: list[tuple[Any, str, int]] = [(value, root, 0)]
    while stack:
        current, path, depth = stack.pop()
        if isinstance(current, str):
            _check_text(current, path)
        elif isinstance(current, dict | list):
            if depth >= MAX_NESTING:
                raise Malformed(
                    _printable(path), f"nested more than {MAX_NESTING} levels deep (arrays and objects)", too_deep=True
                )
            if isinstance(current, dict):
                for key, item in reversed(current.items()):
                    child = f"{path}.{key}" if path else str(key)
                    _check_text(key, child)
                    stack.append((item, child, depth + 1))
            else:
                for index in range(len(current) - 1, -1, -1):
                    stack.append((current[index], f"{path}[{index}]", depth + 1))


def _check_text(text: str, path: str) -> None:
    match = _SURROGATE.search(text)
    if match is None:
        return
    # Only an unpaired half is wrong; json.loads already joined every escaped pair.
    code = ord(match.group())
    raise Malformed(
        _printable(path),
        f"contains a lone surrogate (U+{code:04X} at character {match.start()}); "
        "text must be valid Unicode (UTF-8 without unpaired surrogates)",
    )


#: A byte that is not UTF-8, as ``surrogateescape`` decoding keeps it (U+DC80..U+DCFF).
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def find_undecodable(raw: bytes) -> tuple[Any, Malformed] | None:
    """For bytes that are not UTF-8: the message decoded with each bad byte kept as an escape,
    and ``Malformed`` naming the first string (key or value) that holds one; None when the bad
    bytes lie outside every string, or the bytes are not JSON even so."""
    try:
        value = json.loads(raw.decode("utf-8", "surrogateescape"))
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        current, path, depth = stack.pop()
        texts: list[tuple[str, str]] = []
        if isinstance(current, str):
            texts.append((current, path))
        elif isinstance(current, dict) and depth < MAX_NESTING:
            for key, item in reversed(current.items()):
                child = f"{path}.{key}" if path else str(key)
                texts.append((key, child))
                stack.append((item, child, depth + 1))
        elif isinstance(current, list) and depth < MAX_NESTING:
            stack.extend((current[i], f"{path}[{i}]", depth + 1) for i in range(len(current) - 1, -1, -1))
        for text, where in texts:
            match = _ESCAPED_BYTE.search(text)
            if match:
                byte = ord(match.group()) - 0xDC00
                why = f"is not valid UTF-8 (byte 0x{byte:02X} at character {match.start()}); text must be UTF-8"
                return value, Malformed(_printable(where), why)
    return None


def _printable(path: str) -> str:
    """``path`` fit to put in a message: a surrogate in a key would make the message unsendable."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", path)


#: JSON-RPC's codes for a refused message: the message itself, or one of its params.
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602

TOO_DEEP = f"The message is nested more than {MAX_NESTING} levels deep (arrays and objects); it was not read."


def refusal(raw: dict, error: Malformed) -> tuple[Any, int, str] | None:
    """How to answer a message ``check`` refused: (id, code, message); None when it is a
    notification or a response, which are never answered. A bad param is -32602, anything
    else (nesting, the id or method itself) -32600; an id that is itself bad is answered null."""
    if "method" not in raw or "id" not in raw:
        return None
    msg_id = None if error.path == "id" else raw["id"]
    if error.path.startswith("params") and not error.too_deep:
        return msg_id, INVALID_PARAMS, f"Invalid params: {error}"
    return msg_id, INVALID_REQUEST, f"Invalid message: {error}"


def field_message(error: msgspec.ValidationError) -> str:
    """msgspec says "Expected `str`, got `int` - at `$.prompt[0].text`"; say it by the field's name."""
    text = str(error)
    missing = re.match(r"Object missing required field `(.*?)`(?: - at `\$\.?(.*)`)?$", text)
    if missing:
        name, where = missing.groups()
        return f"{(where + '.') if where else ''}{name}: required field is missing"
    tagged = re.match(r"Invalid value '(.*)' - at `\$\.?(.*)`$", text)
    if tagged:
        value, where = tagged.groups()
        return f"{where}: {value!r} is not a type that is accepted"
    located = re.search(r"(.*) - at `\$\.?(.*)`$", text)
    if located:
        problem, where = located.groups()
        return f"{where or 'params'}: {problem[0].lower()}{problem[1:]}"
    return f"params: {text[0].lower()}{text[1:]}"
