"""msgspec encoding behind eventsourcing's ``Mapper``.

The stock mapper hands an event's ``__dict__`` to a transcoder and gets plain dicts and
strings back for nested values. This mapper keeps eventsourcing's pipeline (topic,
compression, encryption, upcasting on read) but encodes and decodes each stored class
with its codec (:mod:`covonaut_es.store._codec`), which reads each field into its
declared type; the application's own value types go through the transcodings it
registers (:mod:`covonaut_es.store._transcodings`).
"""

from __future__ import annotations

import contextlib
import typing
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.domain import CanSnapshotAggregate, DomainEventProtocol
from eventsourcing.persistence import Cipher, Compressor, Mapper, StoredEvent, Transcoder
from eventsourcing.utils import get_topic

from covonaut_es.domain import AgentThread, ThreadSnapshot
from covonaut_es.errors import (
    CompressionDictionaryError,
    ConfigurationError,
    SerializationError,
)
from covonaut_es.migrations import Upcaster, aggregate_schema, check_upcasters, schema_for
from covonaut_es.migrations._upcasting import NO_MIGRATORS
from covonaut_es.store import _zstd
from covonaut_es.store._chain import canonical_fields, link_hash
from covonaut_es.store._codec import (
    Codec,
    aggregate_event_classes,
    codec_for,
    decode_object,
    library_event_classes,
    payload_type,
)
from covonaut_es.store._own_snapshots import declared_snapshot, snapshot_classes
from covonaut_es.store._snapshot_seals import SEALED
from covonaut_es.store._topic_codes import TOPIC_CODES, compact, full_topic, registered_object
from covonaut_es.store._transcodings import OwnSnapshotCodec, TranscodedCodec, Transcodings


class JsonTranscoder(Transcoder):
    """Untyped msgspec JSON, used where a payload must be read before its type is known."""

    def encode(self, obj: Any) -> bytes:
        return msgspec.json.encode(obj)

    def decode(self, data: bytes) -> Any:
        return msgspec.json.decode(data)


@contextlib.contextmanager
def _encoding(domain_event: DomainEventProtocol[UUID]) -> Iterator[None]:
    """Encode ``domain_event`` in the block: text that UTF-8 cannot hold (a lone
    surrogate, which Python's ``json`` decodes from a model's ``"\\ud800"``) is a
    :class:`~covonaut_es.errors.SerializationError` naming the event, before anything
    is written.
    """
    try:
        yield
    except UnicodeEncodeError as exc:
        where = f"event {type(domain_event).__qualname__} of {domain_event.originator_id}"
        msg = (
            f"{where}: it holds text that is not valid Unicode ({exc.reason}: "
            f"{exc.object[exc.start : exc.end]!r}), which no store can keep; nothing was written"
        )
        raise SerializationError(msg) from None


class MsgspecMapper(Mapper[UUID]):
    """A ``Mapper`` that encodes with msgspec and decodes into the declared types.

    Compression and encryption run as in eventsourcing's own mapper, after encoding and
    before decoding. Creating one checks the upcaster registry, so that a missing step
    fails before any data is read.

    A stored record's topic is looked up in an allowlist, never imported: the
    library's own classes plus ``event_classes`` and the events of
    ``aggregate_classes``. A record of any other topic is a
    :class:`~covonaut_es.errors.SerializationError`, and an event outside the list is
    refused before it is written, since it could not be read back. So is a created
    event naming an aggregate type other than a thread or one of ``aggregate_classes``:
    eventsourcing would import whatever module that name says.

    A record of one of the library's classes is written under its code
    (:mod:`covonaut_es.store._topic_codes`); a record is read under its code or its full
    topic alike, and its chain link covers the full topic.
    """

    def __init__(
        self,
        transcoder: Transcoder | None = None,
        compressor: Compressor | None = None,
        cipher: Cipher | None = None,
        *,
        event_classes: Iterable[type] = (),
        aggregate_classes: Iterable[type] = (),
    ):
        """Args:
        transcoder: The application's eventsourcing ``JSONTranscoder``, whose
            registered transcodings the events of ``aggregate_classes`` and
            ``event_classes`` are written and read with (see
            :mod:`covonaut_es.store._transcodings`); the mapper encodes with msgspec
            itself.
        compressor: Compresses each payload after it is encoded.
        cipher: Encrypts each payload after it is compressed.
        event_classes: Further event classes it reads and writes.
        aggregate_classes: The application's own aggregate classes, whose events it
            reads and writes.

        Raises:
            MissingUpcasterError: A stored class (the library's, or one of the
                application's with a ``class_version``, aggregates included) lacks an
                upcaster for a step.
            ConfigurationError: ``transcoder`` is not a ``JSONTranscoder``, a class of
                ``event_classes`` or ``aggregate_classes`` has a topic that is one of
                the library's codes, or an ``upcast_vN_vN+1`` method for a step at or
                beyond its class's ``class_version``.
        """
        check_upcasters()
        super().__init__(JsonTranscoder(), compressor=compressor, cipher=cipher)
        aggregates = [AgentThread, *aggregate_classes]
        own = [
            *event_classes,
            *(event for cls in aggregates[1:] for event in aggregate_event_classes(cls)),
            *snapshot_classes(aggregates[1:]),
        ]
        # The aggregates' own versions are their stock snapshots' states'.
        self._aggregate_schemas = {get_topic(cls): aggregate_schema(cls) for cls in aggregates[1:]}
        check_upcasters([*(schema_for(cls) for cls in own), *self._aggregate_schemas.values()])
        self._classes: dict[str, type] = {
            get_topic(cls): cls for cls in [*library_event_classes(), *own]
        }
        coded = {code: self._classes[topic] for code, topic in TOPIC_CODES.items()}
        taken = sorted({get_topic(cls) for cls in own} & coded.keys())
        if taken:
            msg = (
                f"event classes with the topics {taken}: those are codes the library's "
                "own records are stored under; expected topics with a '.' or ':', as "
                "eventsourcing names a class. Register another topic for them"
            )
            raise ConfigurationError(msg)
        self._classes.update(coded)
        self._aggregate_topics = frozenset(get_topic(cls) for cls in aggregates)
        self._writable: dict[type, tuple[Codec, str]] = {}  # what _listed found, by class
        self._transcodings = Transcodings.of(transcoder)
        self._state_transcodings = Transcodings.of(transcoder, stock=True)
        self._transcoded: dict[type, Codec] = {}
        self._library = frozenset(library_event_classes())
        self._readers: dict[str, _Reader] = {}  # what _reader found, by topic

    @property
    def topics(self) -> tuple[str, ...]:
        """Every stored topic this mapper reads: the library's classes' (under their
        codes too) and those of the classes it was given, their events and snapshots."""
        return tuple(self._classes)

    def codec(self, cls: type) -> Codec:
        """The codec of a stored class: one that applies the application's
        transcodings for its own event classes, if it registers any."""
        own_snapshots = _stock_snapshot(cls)
        if cls in self._library or not (self._transcodings or own_snapshots):
            return codec_for(cls)
        codec = self._transcoded.get(cls)
        if codec is None:
            schema = schema_for(cls)
            if own_snapshots:
                codec = OwnSnapshotCodec(schema, self._state_transcodings, self._aggregate_schemas)
            else:
                codec = TranscodedCodec(schema, payload_type(cls), self._transcodings)
            self._transcoded[cls] = codec
        return codec

    def names_declared_snapshot(self, topic: str) -> bool:
        """Whether a stored topic names the snapshot class one of the application's
        aggregates declares (see :mod:`covonaut_es.store._own_snapshots`)."""
        cls = self._classes.get(topic)
        return cls is not None and declared_snapshot(cls)

    def names_stock_snapshot(self, topic: str) -> bool:
        """Whether a stored topic names a snapshot class one of the application's
        aggregates is snapshotted with as eventsourcing snapshots it, unsealed."""
        cls = self._classes.get(topic)
        return cls is not None and _stock_snapshot(cls)

    def event_class(self, topic: str, *, where: str) -> type:
        """The class a stored topic names, from the allowlist; nothing is imported.

        Raises:
            SerializationError: The topic is not one this mapper reads.
        """
        cls = self._classes.get(topic) or self._moved(topic)
        if cls is None:
            msg = (
                f"{where}: its type {topic!r} is unknown to this store (expected a "
                "covonaut topic or an event of an aggregate class the application lists "
                "in aggregate_classes); it was not imported. Add the aggregate class to "
                "your AgentApplication's aggregate_classes if the record is yours"
            )
            raise SerializationError(msg)
        return cls

    def _creates_listed(self, topic: str) -> bool:
        """Whether ``topic``, which a record says it creates an aggregate of, names one
        of the listed aggregate classes: by its topic, or by one registered for it."""
        if topic in self._aggregate_topics:
            return True
        found = registered_object(topic)
        return isinstance(found, type) and get_topic(found) in self._aggregate_topics

    def _moved(self, topic: str) -> type | None:
        """The listed class that ``topic`` names by what eventsourcing's
        ``register_topic`` registered for a class renamed or moved, remembered; None if
        it names none of them (what it names is never imported)."""
        found = registered_object(topic)
        if not isinstance(found, type) or found not in self._classes.values():
            return None
        self._classes[topic] = found
        return found

    def to_stored_event(self, domain_event: DomainEventProtocol[UUID]) -> StoredEvent:
        codec, topic = self._listed(domain_event)
        with _encoding(domain_event):
            state = codec.encode(domain_event)
        return StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=topic,
            state=self.stored_payload(state),
        )

    def to_sealed_event(
        self, domain_event: DomainEventProtocol[UUID], previous: str, key: bytes | None
    ) -> tuple[StoredEvent, str]:
        """The record of a thread's event sealed into its chain after ``previous`` (with
        ``key`` when given): its fields are encoded once, in canonical form, hashed,
        and stored as those very bytes with the hash. Returns the record and the hash."""
        codec, topic = self._listed(domain_event)
        with _encoding(domain_event):
            fields = canonical_fields(vars(domain_event))
        version = domain_event.originator_version
        chain = link_hash(
            previous, topic, version, codec.schema.version, fields, key, floats=codec.floats
        )
        record = StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=topic,
            state=self.stored_payload(codec.with_chain(domain_event, fields, chain)),
        )
        return record, chain

    def _listed(self, domain_event: DomainEventProtocol[UUID]) -> tuple[Codec, str]:
        """The codec of an event this mapper may write, and the topic its record
        stores: the code of its class's topic, when it has one.

        Raises:
            SerializationError: Its class is not in the allowlist, or its topic names
                another class there.
        """
        cls = type(domain_event)
        listed = self._writable.get(cls)
        if listed is not None:
            return listed
        codec = self.codec(cls)  # first: it names fields without a type
        topic = get_topic(cls)
        if self._classes.get(topic) is not cls:  # described only on the way to an error
            where = f"event {cls.__qualname__} of {domain_event.originator_id}"
            self.event_class(topic, where=where)  # raises if the topic is not listed
            msg = f"{where}: topic {topic!r} names another class in this store's allowlist"
            raise SerializationError(msg)
        listed = self._writable[cls] = codec, compact(topic)
        return listed

    def stored_payload(self, plain: bytes) -> bytes:
        """The bytes to store for an encoded payload: compressed, then encrypted, as
        configured. The inverse of :meth:`plain_payload`. A snapshot the codec has
        compressed already, or sealed (ADR 0030), is not compressed again."""
        if self.compressor and not plain.startswith((_zstd.MAGIC, SEALED)):
            plain = self.compressor.compress(plain)
        if self.cipher:
            plain = self.cipher.encrypt(plain)
        return plain

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[UUID]:
        return self.decode_plain(stored_event, self.plain_payload(stored_event))

    def decode(
        self, stored_event: StoredEvent, *, migrators: Mapping[int, Upcaster] = NO_MIGRATORS
    ) -> DomainEventProtocol[UUID]:
        """Decode a stored record, upgrading it in memory to the current schema.

        Args:
            stored_event: The record as the recorder holds it.
            migrators: The application's upcasters for this record's type; each
                replaces the library's own for its step.

        Raises:
            SerializationError: The record cannot be read (a subclass says why:
                ``SchemaVersionError``, ``MissingUpcasterError``, ``UpcasterError``,
                ``StaleSnapshotError``).
        """
        return self.decode_plain(stored_event, self.plain_payload(stored_event), migrators)

    def decode_plain(
        self,
        stored_event: StoredEvent,
        payload: bytes,
        migrators: Mapping[int, Upcaster] = NO_MIGRATORS,
    ) -> DomainEventProtocol[UUID]:
        """As :meth:`decode`, from the record's :meth:`plain_payload` read already."""
        reader = self._readers.get(stored_event.topic) or self._reader(stored_event)
        state = reader.codec.decode_current(payload)
        if state is None:
            # The record's description is built only on the way to an upcast or an
            # error: it costs as much as the decode itself.
            where = _where(stored_event)
            state = reader.codec.decode_older(payload, where=where, migrators=migrators)
        return self._event(reader, stored_event, state)

    def decode_fields(
        self,
        stored_event: StoredEvent,
        fields: dict[str, Any],
        migrators: Mapping[int, Upcaster] = NO_MIGRATORS,
    ) -> DomainEventProtocol[UUID]:
        """As :meth:`decode`, from the record's :meth:`payload_fields` read already, so
        that a reader of both (an audit) decrypts and decodes each record once.
        ``fields`` is the upcasters' to change.

        Raises:
            SerializationError: As :meth:`decode`.
        """
        reader = self._readers.get(stored_event.topic) or self._reader(stored_event)
        where = _where(stored_event)
        state = reader.codec.upgraded(fields, where=where, migrators=migrators)
        return self._event(reader, stored_event, state)

    def _reader(self, stored_event: StoredEvent) -> _Reader:
        """How records of ``stored_event``'s topic are read, found once per topic.

        Raises:
            SerializationError: The topic is not one this mapper reads.
        """
        topic = stored_event.topic
        cls = self.event_class(topic, where=_where(stored_event))
        codec = self.codec(cls)
        creates = "topic" if issubclass(cls, CanSnapshotAggregate) else "originator_topic"
        # Only a payload with that field names an aggregate type to check.
        named = creates if creates in codec.payload_type.__struct_fields__ else None
        reader = self._readers[topic] = _Reader(cls, codec, named)
        return reader

    def _event(
        self, reader: _Reader, stored_event: StoredEvent, state: dict[str, Any]
    ) -> DomainEventProtocol[UUID]:
        """The event that ``stored_event`` holds, of ``reader``'s class, from its
        decoded fields."""
        if reader.creates is not None:
            created = state.get(reader.creates)
            if created is not None and not self._creates_listed(created):
                msg = (
                    f"{_where(stored_event)}: it creates an aggregate of type {created!r}, "
                    "unknown to this store; it was not imported. Add the aggregate class to "
                    "your AgentApplication's aggregate_classes if the record is yours"
                )
                raise SerializationError(msg)
        originator_id = stored_event.originator_id
        state["originator_id"] = (
            originator_id if isinstance(originator_id, UUID) else UUID(originator_id)
        )
        state["originator_version"] = stored_event.originator_version
        # Made as eventsourcing's mapper makes an event, without its __init__: its event
        # classes are frozen dataclasses without slots, their fields in the instance's
        # __dict__ (eventsourcing 9.5.6). Annotated, not typing.cast: that is a call of
        # its own on every event read.
        event: DomainEventProtocol[UUID] = object.__new__(reader.cls)
        object.__setattr__(event, "__dict__", state)
        return event

    def payload_fields(self, stored_event: StoredEvent) -> dict[str, Any]:
        """A stored record's payload as plain JSON values, before any upgrade (to read
        its schema version, say), whichever format its codec wrote.

        Raises:
            SerializationError: It cannot be decrypted, decompressed or decoded.
        """
        cls = self._classes.get(stored_event.topic)
        data, where = self.plain_payload(stored_event), _where(stored_event)
        if cls is None:
            return decode_object(data, where=where)
        return self.codec(cls).decode_untyped(data, where=where)

    def plain_payload(self, stored_event: StoredEvent) -> bytes:
        """The stored payload decrypted and decompressed: the bytes the codec wrote.

        Raises:
            SerializationError: The key is wrong or the bytes are corrupt.
        """
        data = stored_event.state
        try:
            if self.cipher:
                data = self.cipher.decrypt(data)
            if self.compressor and (
                stored_event.topic not in _SNAPSHOT_TOPICS or not _compressed_snapshot(data)
            ):
                data = self.compressor.decompress(data)
        except CompressionDictionaryError as exc:
            msg = f"{_where(stored_event)}: {exc}"
            raise CompressionDictionaryError(msg) from exc
        except Exception as exc:
            msg = (
                f"{_where(stored_event)}: cannot decrypt or decompress it "
                f"(wrong key or corrupt data): {exc}"
            )
            raise SerializationError(msg) from exc
        return data


class _Reader(typing.NamedTuple):
    """How the records of one topic are read.

    Attributes:
        cls: The class they hold.
        codec: Its codec.
        creates: The payload's field naming the type of the aggregate it creates, which
            must be one this store knows; None when the payload has no such field.
    """

    cls: type
    codec: Codec
    creates: str | None


_SNAPSHOT_TOPICS = frozenset({ThreadSnapshot.TOPIC, compact(ThreadSnapshot.TOPIC)})
"""A snapshot's row names its topic in either form (ADR 0064)."""


def _stock_snapshot(cls: type) -> bool:
    """Whether ``cls`` is a snapshot class as eventsourcing's: neither a thread's nor
    one an aggregate declares, which decode typed, by their codecs."""
    return (
        issubclass(cls, CanSnapshotAggregate)
        and not issubclass(cls, ThreadSnapshot)
        and not declared_snapshot(cls)
    )


def _compressed_snapshot(data: bytes) -> bool:
    """Whether the decrypted stored bytes of a thread's snapshot are ones its codec
    compressed, or sealed, which the store's own compressor left alone. No zlib stream
    starts with the zstd magic or the seal's (their first two bytes fail zlib's header
    check), so a snapshot the store's compressor compressed before ADR 0022 is still
    told apart; nor does the codec's frame name a dictionary, which the frame of a
    store that compresses with zstd does (a snapshot the codec wrote as JSON, ADR
    0061). (Asked of a snapshot's bytes only: an event's are never the codec's.)"""
    if data.startswith(SEALED):
        return True
    # A damaged frame header is the codec's to name.
    return data.startswith(_zstd.MAGIC) and _zstd.named_dictionary(data) in (0, None)


def _where(stored_event: StoredEvent) -> str:
    topic = stored_event.topic
    named = full_topic(topic)
    described = repr(topic) if named == topic else f"{topic!r} ({named})"
    return (
        f"stored event {described} of stream {stored_event.originator_id} "
        f"at version {stored_event.originator_version}"
    )
