"""The one reader of a GGUF file's header: its metadata keys and values, without llama.cpp and
without the tensors. The model loader reads the chat template with it before the weights load
(``read_gguf_string``), and the models list describes every file it finds with it (``on_disk``).

Bounded, whatever the file holds: at most ``HEADER_LIMIT`` bytes are read (in chunks, never past
the file's end), arrays nest ``NESTING_LIMIT`` deep at most, and arrays are kept as their length
only, so a vocabulary costs no memory; a damaged header is a ``NotGguf`` (a ``ValueError``) naming
what is wrong, never a recursion or a read past the file. A FIFO or a device is never read.

Ours rather than llama.cpp's ``gguf`` package: its ``GGUFReader`` maps the whole file and turns
every metadata item into numpy arrays, about 80 times slower on the embedded SmolLM2's header (a
49,152-token vocabulary), and its import brings numpy (docs/decisions.md, "One GGUF header
reader"; ``bench/bench_gguf_header.py``).
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path
from typing import Any, BinaryIO

#: A header is read up to this many bytes (tokenizer vocabularies included); a longer one is
#: a damaged header.
HEADER_LIMIT = 64 << 20
#: GGUF arrays of arrays nested deeper than this are a damaged header (llama.cpp writes none).
NESTING_LIMIT = 8
#: What every GGUF file starts with.
GGUF_MAGIC = b"GGUF"


class NotGguf(ValueError):
    """The file is not a GGUF this reader understands; the message says why."""


_SCALARS = {
    kind: struct.Struct(fmt)
    for kind, fmt in {
        0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"
    }.items()
}  # fmt: skip
_STRING, _ARRAY = 8, 9
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
_CHUNK = 1 << 20


def read_metadata(path: Path, limit: int = HEADER_LIMIT) -> dict[str, Any]:
    """The GGUF's metadata keys and values (arrays as their length only, to stay small). NotGguf
    (a FIFO or a device too, which is never read), OSError."""
    # Non-blocking, then checked: opening a FIFO for a blocking read waits for a writer.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as handle:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise NotGguf(f"not a regular file ({kind_of(opened.st_mode)})")
        return read_header(handle, opened.st_size, limit)


def read_header(handle: BinaryIO, file_size: int, limit: int) -> dict[str, Any]:
    """The metadata of the GGUF ``handle`` reads from its start, reading at most ``limit`` bytes and
    never past ``file_size``. NotGguf, OSError."""
    reader = _Reader(handle, min(limit, file_size), limit)
    if reader.take(4) != GGUF_MAGIC:
        raise NotGguf("not a GGUF file (it does not start with GGUF)")
    version = reader.unpack(_U32)
    if version not in (2, 3):
        raise NotGguf(f"GGUF version {version}; this reader knows versions 2 and 3")
    reader.unpack(_U64)  # tensors
    count = reader.unpack(_U64)
    metadata: dict[str, Any] = {}
    for _ in range(count):  # each key takes 12 bytes at least: the header limit bounds the loop
        key = reader.string()
        metadata[key] = reader.value(reader.unpack(_U32), 0)
    return metadata


class _Reader:
    """The header from the file's start, in chunks, never past ``end`` (the file's size or the limit)."""

    def __init__(self, handle: BinaryIO, end: int, limit: int) -> None:
        self._handle, self._end, self._limit = handle, end, limit
        self._buffer = b""
        self._at = 0  # the next byte, in the buffer
        self._base = 0  # the buffer's first byte, in the file

    def _past(self, size: int) -> NotGguf:
        if self._base + self._at + size > self._limit:
            return NotGguf(f"the header is longer than {self._limit >> 20} MiB, or damaged")
        return NotGguf("the file ends inside its header")

    def _have(self, size: int) -> None:
        """At least ``size`` bytes in the buffer from ``_at``."""
        held = len(self._buffer) - self._at
        if held >= size:
            return
        start = self._base + self._at
        if start + size > self._end:
            raise self._past(size)
        more = self._handle.read(min(max(size - held, _CHUNK), self._end - start - held))
        self._buffer, self._base, self._at = self._buffer[self._at :] + more, start, 0
        if len(self._buffer) < size:
            raise NotGguf("the file ends inside its header")

    def take(self, size: int) -> bytes:
        self._have(size)
        data = self._buffer[self._at : self._at + size]
        self._at += size
        return data

    def skip(self, size: int) -> None:
        held = len(self._buffer) - self._at
        if size <= held:
            self._at += size
            return
        start = self._base + self._at
        if start + size > self._end:
            raise self._past(size)
        self._handle.seek(start + size)
        self._buffer, self._base, self._at = b"", start + size, 0

    def unpack(self, fmt: struct.Struct) -> Any:
        self._have(fmt.size)
        value = fmt.unpack_from(self._buffer, self._at)[0]
        self._at += fmt.size
        return value

    def skip_strings(self, count: int) -> None:
        """Skip ``count`` length-prefixed strings (a vocabulary, its merges: 8 bytes at least each,
        so the limit bounds the loop). One loop over the buffer as it stands, leaving it only to
        refill: a vocabulary's hundred thousand strings are most of a header's reading time."""
        unpack_from = _U64.unpack_from
        buffer, at = self._buffer, self._at
        for _ in range(count):
            if len(buffer) - at < 8:
                self._at = at
                self._have(8)
                buffer, at = self._buffer, self._at
            size = unpack_from(buffer, at)[0] + 8
            if len(buffer) - at >= size:
                at += size
            else:
                self._at = at + 8
                self.skip(size - 8)
                buffer, at = self._buffer, self._at
        self._at = at

    def string(self) -> str:
        return self.take(self.unpack(_U64)).decode("utf-8", "replace")

    def value(self, kind: int, depth: int) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            if depth >= NESTING_LIMIT:
                raise NotGguf(f"a damaged header: arrays nested more than {NESTING_LIMIT} deep")
            item, count = self.unpack(_U32), self.unpack(_U64)
            if item in _SCALARS:
                self.skip(_SCALARS[item].size * count)
            elif item == _STRING:
                self.skip_strings(count)
            else:
                for _ in range(count):
                    self.value(item, depth + 1)
            return [count]  # the length only: vocabularies are not needed here
        raise NotGguf(f"an unknown metadata type {kind}")


def read_gguf_string(path: Path, key: str) -> str | None:
    """One string value of a GGUF file's metadata (e.g. its chat template); None when it is absent
    or not a string. NotGguf (a ValueError) for a damaged header, OSError."""
    value = read_metadata(path).get(key)
    return value if isinstance(value, str) else None


def kind_of(mode: int) -> str:
    """What a file that is not a regular file is, in words (for a reason shown to the user)."""
    kinds = {
        "a folder": stat.S_ISDIR,
        "a FIFO": stat.S_ISFIFO,
        "a socket": stat.S_ISSOCK,
        "a character device": stat.S_ISCHR,
        "a block device": stat.S_ISBLK,
    }
    return next((kind for kind, test in kinds.items() if test(mode)), "not a file")
