"""Zstandard frames, from the standard library on Python 3.14+ and from ``zstandard``
before it (ADR 0022): the rest of the store never knows which.

Both write and read the same frame format, so a store written under one Python reads
under the other. Snapshots are frames without a dictionary (:func:`compress`); event
payloads are frames with one, which carry its id and a checksum of their content
(:class:`Dictionary`, ADR 0061).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

MAGIC = b"\x28\xb5\x2f\xfd"
"""The first four bytes of every zstd frame; no JSON text or zlib stream starts so."""

_LEVEL = 3

if sys.version_info >= (3, 14):
    from compression import zstd

    class _Frames:
        """Compression into frames, with ``dictionary`` when given, and back."""

        def __init__(self, dictionary: bytes | None = None, *, checksum: bool = False) -> None:
            self._dictionary = None if dictionary is None else zstd.ZstdDict(dictionary)
            self._whole = checksum
            self._options = {
                zstd.CompressionParameter.compression_level: _LEVEL,
                zstd.CompressionParameter.checksum_flag: int(checksum),
            }

        @property
        def dictionary_id(self) -> int:
            return 0 if self._dictionary is None else self._dictionary.dict_id

        def compress(self, data: bytes) -> bytes:
            digested = None if self._dictionary is None else self._dictionary.as_digested_dict
            return zstd.compress(data, options=self._options, zstd_dict=digested)

        def decompress(self, frame: bytes | memoryview, size: int) -> bytes:
            decompressor = zstd.ZstdDecompressor(zstd_dict=self._dictionary)
            data = decompressor.decompress(frame, max_length=size + 1)
            if not decompressor.eof:
                msg = "the frame ends early"
                raise ValueError(msg)
            if self._whole and decompressor.unused_data:
                msg = f"{len(decompressor.unused_data)} bytes follow the frame"
                raise ValueError(msg)
            return data

    def _declared_size(frame: bytes | memoryview) -> int | None:
        return zstd.get_frame_info(frame).decompressed_size

    def _dictionary_id(frame: bytes | memoryview) -> int:
        return zstd.get_frame_info(frame).dictionary_id

    _ERRORS: tuple[type[Exception], ...] = (zstd.ZstdError, ValueError)
else:
    import threading

    import zstandard

    class _Frames(threading.local):
        """Compression into frames, with ``dictionary`` when given, and back: a
        compressor and a decompressor per thread, since zstandard's may not be used by
        two threads at once (stores save and load in threads), and making them on every
        call costs more than the compression of a small payload. (A ``threading.local``
        runs this ``__init__`` again, with the same arguments, in each thread.)"""

        def __init__(self, dictionary: bytes | None = None, *, checksum: bool = False) -> None:
            loaded = None if dictionary is None else zstandard.ZstdCompressionDict(dictionary)
            self.dictionary_id = 0 if loaded is None else loaded.dict_id()
            self._compressor = zstandard.ZstdCompressor(
                level=_LEVEL, dict_data=loaded, write_content_size=True, write_checksum=checksum
            )
            self._decompressor = zstandard.ZstdDecompressor(dict_data=loaded)
            self._whole = checksum

        def compress(self, data: bytes) -> bytes:
            return self._compressor.compress(data)

        def decompress(self, frame: bytes | memoryview, size: int) -> bytes:
            # Positional (max_output_size, read_across_frames, allow_extra_data): keywords
            # cost a third of a small payload's decompression, paid once per event read.
            return self._decompressor.decompress(frame, size, False, not self._whole)

    def _declared_size(frame: bytes | memoryview) -> int | None:
        size = zstandard.frame_content_size(frame)
        return None if size < 0 else size

    def _dictionary_id(frame: bytes | memoryview) -> int:
        return zstandard.get_frame_parameters(frame).dict_id

    _ERRORS = (zstandard.ZstdError, ValueError)


_PLAIN = _Frames()


def compress(data: bytes) -> bytes:
    """One frame holding ``data``, its size declared in the frame header."""
    return _PLAIN.compress(data)


def decompress(frame: bytes | memoryview, *, limit: int) -> bytes:
    """The data in one frame (without a dictionary) of at most ``limit`` bytes; bytes
    after the frame are ignored.

    A frame that declares its size (ours always do) is refused before anything is
    allocated when it declares more than ``limit``; one that does not is decompressed up
    to ``limit`` bytes and refused beyond.

    Raises:
        ValueError: The frame is damaged or truncated, or holds more than ``limit``.
    """
    return _checked(frame, limit, _PLAIN.decompress)


def dictionary_id(frame: bytes | memoryview) -> int:
    """The id of the dictionary a frame was compressed with, from its header; 0 when it
    names none.

    Raises:
        ValueError: The bytes do not begin with a readable frame header.
    """
    try:
        return _dictionary_id(frame)
    except _ERRORS as exc:
        msg = f"not a readable zstd frame header ({exc})"
        raise ValueError(msg) from exc


def named_dictionary(data: bytes | memoryview) -> int | None:
    """The id of the dictionary ``data``'s zstd frame names (0: none), or None when
    ``data`` does not begin with a readable frame header, for a caller that tells kinds
    of stored bytes apart rather than reads them."""
    if bytes(data[:4]) != MAGIC:
        return None
    try:
        return dictionary_id(data)
    except ValueError:
        return None


_DESCRIPTOR_CHECKSUM = 0x04
_DESCRIPTOR_RESERVED = 0x18  # the unused and the reserved bit, which ours leave clear
_DESCRIPTOR_DICTIONARY = 0x03


class Dictionary:
    """Frames compressed with one zstd dictionary, each carrying its id and a checksum
    of its content, so that a damaged frame is refused rather than read as other data:
    a frame must be the whole of what is read, and its header must declare the checksum
    (clearing that flag would turn the check off) and no bit this library never sets.

    Args:
        content: The dictionary as zstd trains it (its header holds its id).
    """

    def __init__(self, content: bytes) -> None:
        self._frames = _Frames(content, checksum=True)
        self.id: int = self._frames.dictionary_id
        """The dictionary's id, which every frame compressed with it names."""

    def compress(self, data: bytes) -> bytes:
        """One frame holding ``data``, its size and the dictionary's id in its header."""
        return self._frames.compress(data)

    def decompress(self, frame: bytes | memoryview, *, limit: int) -> bytes:
        """As :func:`decompress`, for a frame compressed with this dictionary.

        Raises:
            ValueError: As :func:`decompress`, the frame's checksum does not match, its
                header does not declare one, or bytes follow the frame.
        """
        descriptor = frame[4] if len(frame) > 4 else 0
        if (
            not descriptor & _DESCRIPTOR_CHECKSUM
            or descriptor & _DESCRIPTOR_RESERVED
            or not descriptor & _DESCRIPTOR_DICTIONARY
        ):
            msg = f"the zstd frame's header is not one this library writes ({descriptor:#04x})"
            raise ValueError(msg)
        return _checked(frame, limit, self._frames.decompress)


def _checked(
    frame: bytes | memoryview, limit: int, decompress: Callable[[bytes | memoryview, int], bytes]
) -> bytes:
    try:
        size = _declared_size(frame)
    except _ERRORS as exc:
        msg = f"not a readable zstd frame header ({exc})"
        raise ValueError(msg) from exc
    if size is not None and size > limit:
        msg = f"the zstd frame declares {size} bytes, more than the {limit} allowed"
        raise ValueError(msg)
    try:
        data = decompress(frame, limit if size is None else size)
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
