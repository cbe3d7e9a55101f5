"""Zstandard frames, from the standard library on Python 3.14+ and from ``zstandard``
before it (ADR 0022): the rest of the store never knows which.

Both write and read the same frame format, so a store written under one Python reads
under the other.
"""

from __future__ import annotations

import sys

MAGIC = b"\x28\xb5\x2f\xfd"
"""The first four bytes of every zstd frame; no JSON text or zlib stream starts so."""

_LEVEL = 3

if sys.version_info >= (3, 14):
    from compression import zstd

    def compress(data: bytes) -> bytes:
        """One frame holding ``data``, its size declared in the frame header."""
        return zstd.compress(data, level=_LEVEL)

    def _declared_size(frame: bytes | memoryview) -> int | None:
        return zstd.get_frame_info(frame).decompressed_size

    def _decompress(frame: bytes | memoryview, size: int) -> bytes:
        decompressor = zstd.ZstdDecompressor()
        data = decompressor.decompress(frame, max_length=size + 1)
        if not decompressor.eof:
            msg = "the frame ends early"
            raise ValueError(msg)
        return data

    _ERRORS: tuple[type[Exception], ...] = (zstd.ZstdError, ValueError)
else:
    import threading

    import zstandard

    class _Contexts(threading.local):
        """A compressor and a decompressor per thread: zstandard's may not be used by
        two threads at once (stores save and load in threads), and making them on
        every call costs more than the compression of a small snapshot."""

        def __init__(self) -> None:
            self.compressor = zstandard.ZstdCompressor(level=_LEVEL, write_content_size=True)
            self.decompressor = zstandard.ZstdDecompressor()

    _contexts = _Contexts()

    def compress(data: bytes) -> bytes:
        """One frame holding ``data``, its size declared in the frame header."""
        return _contexts.compressor.compress(data)

    def _declared_size(frame: bytes | memoryview) -> int | None:
        size = zstandard.frame_content_size(frame)
        return None if size < 0 else size

    def _decompress(frame: bytes | memoryview, size: int) -> bytes:
        return _contexts.decompressor.decompress(frame, max_output_size=size)

    _ERRORS = (zstandard.ZstdError, ValueError)


def decompress(frame: bytes | memoryview, *, limit: int) -> bytes:
    """The data in one frame of at most ``limit`` bytes; bytes after the frame are
    ignored.

    A frame that declares its size (ours always do) is refused before anything is
    allocated when it declares more than ``limit``; one that does not is decompressed up
    to ``limit`` bytes and refused beyond.

    Raises:
        ValueError: The frame is damaged or truncated, or holds more than ``limit``.
    """
    try:
        size = _declared_size(frame)
    except _ERRORS as exc:
        msg = f"not a readable zstd frame header ({exc})"
        raise ValueError(msg) from exc
    if size is not None and size > limit:
        msg = f"the zstd frame declares {size} bytes, more than the {limit} allowed"
        raise ValueError(msg)
    try:
        data = _decompress(frame, limit if size is None else size)
    except _ERRORS as exc:
        msg = f"the zstd frame does not decompress ({exc})"
        raise ValueError(msg) from exc
    if size is None and len(data) > limit:
        msg = f"the zstd frame holds more than the {limit} bytes allowed"
        raise ValueError(msg)
    if size is not None and len(data) != size:
        msg = f"the zstd frame holds {len(data)} bytes but declares {size}"
        raise ValueError(msg)
    return data
