"""Zstandard frames, from the standard library on Python 3.14+ and from ``zstandard``
before it (ADR 0022): the rest of the store never knows which.

Both write and read the same frame format, so a store written under one Python reads
under the other. Every frame written carries a checksum of its content, so that damage
to its bytes fails its decompression rather than reading as other data. Snapshots are
frames without a dictionary (:func:`compress`), read with or without a checksum, as
frames written before it (ADR 0114); event payloads are frames with one, which carry its
id and must carry the checksum (:class:`Dictionary`, ADR 0061).
"""

from __future__ import annotations

import sys
from typing import Any

MAGIC = b"\x28\xb5\x2f\xfd"
"""The first four bytes of every zstd frame; no JSON text or zlib stream starts so."""

_LEVEL = 3

if sys.version_info >= (3, 14):
    from compression import zstd

    class _Frames:
        """Compression into frames carrying a checksum of their content, with
        ``dictionary`` when given, and back; bytes after a frame are refused when
        ``whole``, ignored otherwise."""

        def __init__(self, dictionary: bytes | None = None, *, whole: bool = False) -> None:
            self._dictionary = None if dictionary is None else zstd.ZstdDict(dictionary)
            self.extra_allowed = not whole
            self._options = {
                zstd.CompressionParameter.compression_level: _LEVEL,
                zstd.CompressionParameter.checksum_flag: 1,
            }

        @property
        def dictionary_id(self) -> int:
            return 0 if self._dictionary is None else self._dictionary.dict_id

        def compress(self, data: bytes) -> bytes:
            digested = None if self._dictionary is None else self._dictionary.as_digested_dict
            return zstd.compress(data, options=self._options, zstd_dict=digested)

        def decompress(
            self, frame: bytes | memoryview, size: int, across: bool, extra: bool
        ) -> bytes:
            """As zstandard's ``ZstdDecompressor.decompress`` with its arguments
            (``max_output_size``, ``read_across_frames``: never, ``allow_extra_data``)."""
            decompressor = zstd.ZstdDecompressor(zstd_dict=self._dictionary)
            return _read_whole(decompressor, decompressor.decompress(frame, size + 1), extra)

        def decompress_empty(self, frame: bytes | memoryview, extra: bool) -> bytes:
            """As :meth:`decompress`, for a frame declaring no content."""
            return self.decompress(frame, 0, False, extra)

    def _header(frame: bytes | memoryview) -> tuple[int, int | None]:
        """As in the other branch."""
        try:
            info = zstd.get_frame_info(frame)
        except _ERRORS as exc:
            raise _unreadable_header(exc) from exc
        return info.dictionary_id, info.decompressed_size

    _ERRORS: tuple[type[Exception], ...] = (zstd.ZstdError, ValueError)
else:
    import threading

    import zstandard

    class _Frames(threading.local):
        """Compression into frames carrying a checksum of their content, with
        ``dictionary`` when given, and back (bytes after a frame refused when ``whole``,
        ignored otherwise): a compressor and a decompressor per thread, since
        zstandard's may not be used by two threads at once (stores save and load in
        threads), and making them on every call costs more than the compression of a
        small payload. (A ``threading.local`` runs this ``__init__`` again, with the
        same arguments, in each thread.)"""

        def __init__(self, dictionary: bytes | None = None, *, whole: bool = False) -> None:
            loaded = None if dictionary is None else zstandard.ZstdCompressionDict(dictionary)
            self.dictionary_id = 0 if loaded is None else loaded.dict_id()
            self._compressor = zstandard.ZstdCompressor(
                level=_LEVEL, dict_data=loaded, write_content_size=True, write_checksum=True
            )
            # The decompressor's own method, called positionally (max_output_size,
            # read_across_frames, allow_extra_data) by _checked: keywords, or a method
            # of this class around it, cost a third of a small payload's decompression,
            # paid once per event read.
            self._decompressor = zstandard.ZstdDecompressor(dict_data=loaded)
            self.decompress = self._decompressor.decompress
            self.extra_allowed = not whole

        def compress(self, data: bytes) -> bytes:
            return self._compressor.compress(data)

        def decompress_empty(self, frame: bytes | memoryview, extra: bool) -> bytes:
            """The content of a frame declaring none, which zstandard's one-shot
            ``decompress`` answers without reading the frame (its checksum, its blocks,
            what follows it): read by a streaming decompressor, which does."""
            decompressor = self._decompressor.decompressobj()
            return _read_whole(decompressor, decompressor.decompress(frame), extra)

    _UNKNOWN_SIZE = 2**64 - 1  # zstd's ZSTD_CONTENTSIZE_UNKNOWN

    def _header(frame: bytes | memoryview) -> tuple[int, int | None]:
        """The id of the dictionary a frame names (0: none) and the size it declares
        (None: none), from one reading of its header, for every check.

        Raises:
            ValueError: The bytes do not begin with a readable frame header.
        """
        try:
            parameters = zstandard.get_frame_parameters(frame)
        except _ERRORS as exc:
            raise _unreadable_header(exc) from exc
        size = parameters.content_size
        return parameters.dict_id, None if size == _UNKNOWN_SIZE else size

    _ERRORS = (zstandard.ZstdError, ValueError)


_PLAIN = _Frames()


def compress(data: bytes) -> bytes:
    """One frame holding ``data``, its size declared in the frame header and a checksum
    of ``data`` after it."""
    return _PLAIN.compress(data)


def decompress(frame: bytes | memoryview, *, limit: int) -> bytes:
    """The data in one frame (without a dictionary) of at most ``limit`` bytes; bytes
    after the frame are ignored.

    A frame that declares its size (ours always do) is refused before anything is
    allocated when it declares more than ``limit``; one that does not is decompressed up
    to ``limit`` bytes and refused beyond. A frame that carries a checksum (ours do since
    ADR 0114) is refused when its content does not match it; one without (written before,
    or by another zstd writer) is read as it decodes.

    Raises:
        ValueError: The frame is damaged or truncated, its checksum does not match, or
            it holds more than ``limit``.
    """
    return _checked(frame, limit, _header(frame)[1], _PLAIN)


def dictionary_id(frame: bytes | memoryview) -> int:
    """The id of the dictionary a frame was compressed with, from its header; 0 when it
    names none.

    Raises:
        ValueError: The bytes do not begin with a readable frame header.
    """
    return _header(frame)[0]


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


class OtherDictionaryError(ValueError):
    """A frame read with one dictionary names another, or none.

    Args:
        found: The id of the dictionary the frame names; 0 when it names none.
    """

    def __init__(self, found: int) -> None:
        super().__init__(f"the zstd frame names dictionary {found}")
        self.found = found


_DESCRIPTOR_CHECKSUM = 0x04
_DESCRIPTOR_RESERVED = 0x18  # the unused and the reserved bit, which ours leave clear


class Dictionary:
    """Frames compressed with one zstd dictionary, each carrying its id and a checksum
    of its content, so that a damaged frame is refused rather than read as other data:
    a frame must be the whole of what is read, name this dictionary, and its header must
    declare the checksum (clearing that flag would turn the check off) and no bit this
    library never sets.

    Args:
        content: The dictionary as zstd trains it (its header holds its id).
    """

    def __init__(self, content: bytes) -> None:
        self._frames = _Frames(content, whole=True)
        self.id: int = self._frames.dictionary_id
        """The dictionary's id, which every frame compressed with it names."""

    def compress(self, data: bytes) -> bytes:
        """One frame holding ``data``, its size and the dictionary's id in its header."""
        return self._frames.compress(data)

    def decompress(self, frame: bytes | memoryview, *, limit: int) -> bytes:
        """As :func:`decompress`, for a frame compressed with this dictionary; its header
        is read once, for every check.

        Raises:
            OtherDictionaryError: The frame names another dictionary, or none.
            ValueError: As :func:`decompress`, the frame's checksum does not match, its
                header does not declare one, or bytes follow the frame.
        """
        found, size = _header(frame)
        if found != self.id:
            raise OtherDictionaryError(found)
        descriptor = frame[4]  # a readable header has it
        if not descriptor & _DESCRIPTOR_CHECKSUM or descriptor & _DESCRIPTOR_RESERVED:
            msg = f"the zstd frame's header is not one this library writes ({descriptor:#04x})"
            raise ValueError(msg)
        return _checked(frame, limit, size, self._frames)


def _unreadable_header(cause: Exception) -> ValueError:
    """What ``_header`` raises for bytes that do not begin with a readable frame header
    (each zstd module has its ``_header``: their parsers differ)."""
    return ValueError(f"not a readable zstd frame header ({cause})")


def _checked(frame: bytes | memoryview, limit: int, size: int | None, frames: _Frames) -> bytes:
    """The data of ``frame``, whose header declares ``size``, of at most ``limit``
    bytes, decompressed by ``frames``, which say whether bytes may follow it."""
    if size is not None and size > limit:
        msg = f"the zstd frame declares {size} bytes, more than the {limit} allowed"
        raise ValueError(msg)
    try:
        if size == 0:
            data = frames.decompress_empty(frame, frames.extra_allowed)
        else:
            data = frames.decompress(
                frame, limit if size is None else size, False, frames.extra_allowed
            )
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


def _read_whole(decompressor: Any, data: bytes, extra: bool) -> bytes:
    """``data``, what a streaming ``decompressor`` gave of a frame, once it read the
    frame to its end and, unless ``extra``, found nothing after it.

    Raises:
        ValueError: The frame ends early, or bytes follow it.
    """
    if not decompressor.eof:
        msg = "the frame ends early"
        raise ValueError(msg)
    if not extra and decompressor.unused_data:
        msg = f"{len(decompressor.unused_data)} bytes follow the frame"
        raise ValueError(msg)
    return data
