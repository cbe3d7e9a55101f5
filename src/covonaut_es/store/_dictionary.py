"""The compression of a store's event payloads: each payload in a zstd frame of its
own, with a dictionary shipped in the package (ADR 0061).

A payload is small (a message, a tool call, a marker of a turn) and most of its bytes
are what every payload repeats: field names, topics, the shape of a chain link. A
dictionary holds those once, for every frame to refer to, so a payload compresses
where a frame of its own would not. It is trained from this library's own event types
filled with generated values (``scripts/train_event_dictionary.py``), never from a
user's data or the benchmark's.

Each frame names its dictionary by id. A store records ``"zstd"`` as its compression
(:mod:`._settings`); a later release that ships a better dictionary adds it beside this
one, and reads each frame with the dictionary it names. A frame naming a dictionary
this version does not ship is refused, never read with another.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from eventsourcing.persistence import Compressor

from covonaut_es.errors import CompressionDictionaryError, SerializationError
from covonaut_es.store import _zstd

DICTIONARY_FILE = "events.zdict"
"""The shipped dictionary, beside this module."""

PAYLOAD_SIZE_LIMIT = 256 * 1024 * 1024
"""The most bytes an event payload may hold: a larger one is refused when it is
written, and a stored frame declaring more is refused before anything is allocated."""


@cache
def shipped_dictionary() -> _zstd.Dictionary:
    """The dictionary payloads are compressed with, loaded once."""
    content = resources.files(__package__).joinpath(DICTIONARY_FILE).read_bytes()
    return _zstd.Dictionary(content)


class ZstdDictionaryCompressor(Compressor):
    """eventsourcing's ``Compressor`` for a store whose compression is ``"zstd"``: the
    shipped dictionary, a frame per payload, with a checksum of its content."""

    def compress(self, data: bytes) -> bytes:
        """One frame holding ``data``.

        Raises:
            SerializationError: ``data`` is larger than :data:`PAYLOAD_SIZE_LIMIT`;
                nothing is stored.
        """
        if len(data) > PAYLOAD_SIZE_LIMIT:
            msg = (
                f"an event payload of {len(data)} bytes is larger than the "
                f"{PAYLOAD_SIZE_LIMIT} a store reads back; store large data outside the thread"
            )
            raise SerializationError(msg)
        return shipped_dictionary().compress(data)

    def decompress(self, data: bytes) -> bytes:
        """The payload in a frame this compressor wrote.

        Raises:
            CompressionDictionaryError: The frame names another dictionary.
            ValueError: The frame is damaged.
        """
        dictionary = shipped_dictionary()
        try:
            return dictionary.decompress(data, limit=PAYLOAD_SIZE_LIMIT)
        except _zstd.OtherDictionaryError as exc:
            named = f"dictionary {exc.found}" if exc.found else "no dictionary"
            msg = (
                f"its zstd frame names {named}, and this version ships dictionary "
                f"{dictionary.id}: it was written by a newer covonaut-es (read it with that "
                "version), or damaged"
            )
            raise CompressionDictionaryError(msg) from exc
