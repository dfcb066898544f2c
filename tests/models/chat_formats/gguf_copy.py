"""A copy of a GGUF file with another chat template (what llama.cpp's ``gguf-new-metadata
--chat-template-file`` writes), made by splicing the header.

The ``gguf`` package's reader parses the embedded model's 49,152-entry vocabulary entry by entry
(15 s here, per copy); only the template's string and the padding before the tensor data change,
so the rest of the file is copied as bytes (milliseconds). Layout per llama.cpp's ``gguf.md``
(v2/v3): magic, version, tensor count, key/value count, the key/values, the tensor infos, padding
to ``general.alignment`` (32 when absent), the tensor data.
"""

from __future__ import annotations

import struct
from pathlib import Path

_STRING, _ARRAY, _UINT32 = 8, 9, 4
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
TEMPLATE_KEY = "tokenizer.chat_template"


def with_chat_template(source: Path, target: Path, template: str) -> Path:
    """Write ``source`` with its chat template replaced by ``template`` to ``target``."""
    data = source.read_bytes()
    magic, version, tensor_count, kv_count = struct.unpack_from("<4sIQQ", data, 0)
    if magic != b"GGUF" or version < 2:
        raise ValueError(f"{source} is not a GGUF v2+ file")
    offset = 24
    alignment = 32
    span: tuple[int, int] | None = None  # where the template's string (length and bytes) lies

    def string_end(at: int) -> int:
        (length,) = struct.unpack_from("<Q", data, at)
        return at + 8 + length

    def skip(kind: int, at: int) -> int:
        if kind in _SIZES:
            return at + _SIZES[kind]
        if kind == _STRING:
            return string_end(at)
        item_kind, count = struct.unpack_from("<IQ", data, at)
        at += 12
        if item_kind in _SIZES:
            return at + count * _SIZES[item_kind]
        for _ in range(count):
            at = skip(item_kind, at)
        return at

    for _ in range(kv_count):
        name_end = string_end(offset)
        name = data[offset + 8 : name_end].decode()
        (kind,) = struct.unpack_from("<I", data, name_end)
        value = name_end + 4
        if name == TEMPLATE_KEY and kind == _STRING:
            span = (value, string_end(value))
        if name == "general.alignment" and kind == _UINT32:
            (alignment,) = struct.unpack_from("<I", data, value)
        offset = skip(kind, value)
    if span is None:
        raise ValueError(f"{source} has no {TEMPLATE_KEY}")
    for _ in range(tensor_count):
        (dims,) = struct.unpack_from("<I", data, string_end(offset))
        offset = string_end(offset) + 4 + 8 * dims + 4 + 8
    infos_end = offset
    data_start = -(-infos_end // alignment) * alignment
    encoded = template.encode("utf-8")
    head = data[: span[0]] + struct.pack("<Q", len(encoded)) + encoded + data[span[1] : infos_end]
    padding = -len(head) % alignment
    target.write_bytes(head + b"\0" * padding + data[data_start:])
    return target
