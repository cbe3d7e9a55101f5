"""The mapper of an :class:`~covonaut_es.AgentApplication`, as it and its followers
make it (ADR 0046).

eventsourcing's ``System`` gives a follower one mapper per leader, made as
``type(follower.mapper)(transcoder=..., compressor=..., cipher=...)`` with the leader's
compression and encryption settings. So an application's mapper is an instance of a
class of its own, :class:`ApplicationMapper` bound to the application's aggregate
classes: made that way it reads what the application lists, whichever side of a
system it is on. An application that is no ``AgentApplication`` reads the events of
one with :func:`event_mapper`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from typing import Any

from eventsourcing.persistence import (
    Cipher,
    Compressor,
    InfrastructureFactory,
    JSONTranscoder,
    Notification,
    Transcoder,
)
from eventsourcing.popo import POPOFactory
from eventsourcing.projection import EventSourcedProjection
from eventsourcing.system import Follower
from eventsourcing.utils import Environment, TopicError

from covonaut_es import _logs
from covonaut_es.errors import ConfigurationError
from covonaut_es.store._cipher_keys import key_material
from covonaut_es.store._mapper import MsgspecMapper
from covonaut_es.store._topic_codes import with_codes

logger = _logs.logger("covonaut_es")


class ApplicationTranscoder(JSONTranscoder):
    """What an :class:`~covonaut_es.AgentApplication` constructs as its transcoder:
    eventsourcing's, with the transcodings the application registers, carrying the
    application's aggregate classes to the mapper made with it, which is how
    eventsourcing makes a follower's mapper of each leader.

    Args:
        aggregate_classes: The aggregate classes whose events and snapshots to read.
    """

    def __init__(self, aggregate_classes: Iterable[type] = ()) -> None:
        super().__init__()
        self.aggregate_classes = tuple(aggregate_classes)


class ApplicationMapper(MsgspecMapper):
    """The msgspec mapper of an application: it reads and writes the library's classes
    and the events and snapshots of the aggregate classes its transcoder carries.

    Args:
        transcoder: An :class:`ApplicationTranscoder`; any other reads the library's
            classes alone. msgspec encodes: it is not used to encode.
        compressor: As eventsourcing's ``Mapper``.
        cipher: As eventsourcing's ``Mapper``.
    """

    def __init__(
        self,
        transcoder: Transcoder | None = None,
        compressor: Compressor | None = None,
        cipher: Cipher | None = None,
    ) -> None:
        classes = getattr(transcoder, "aggregate_classes", ())
        super().__init__(
            transcoder,
            compressor,
            cipher,
            aggregate_classes=classes,
        )


def follow_readable(follower: EventSourcedProjection[Any], mapper: MsgspecMapper) -> None:
    """Have ``follower`` follow only the records ``mapper`` reads, unless it names the
    topics it follows itself (eventsourcing's ``topics`` or ``follow_topics``).

    Its mapper of each leader reads what it lists (the library's classes and its
    ``aggregate_classes``) and refuses any other type, importing nothing. A leader's
    record of another type passes it by: refused, it stopped the follower at that
    record for good, and under a single-threaded runner failed every later save of the
    leader (ADR 0129). A follower pulls its leaders' records unfiltered and passes over
    those of another type with a warning, once per topic (:func:`pull_readable`), not in
    the database's select, where a row's topic changed to one it does not follow was
    passed over unseen; the recordings a leader sends it in memory are filtered by
    ``topics``, as eventsourcing filters them. A library class's topic it names has its
    code beside it, under which the store writes its records (ADR 0064): named the
    eventsourcing way (``get_topic``), it was given none of them.
    """
    if follower.topics:
        follower.topics = with_codes(follower.topics)
        return
    follower.topics = mapper.topics
    if isinstance(follower, Follower):
        # An instance's, so that it is the follower's whichever of AgentApplication and
        # ProcessApplication comes first in its bases.
        pull = functools.partial(pull_readable, follower, frozenset(mapper.topics), set())
        follower.pull_notifications = pull  # type: ignore[method-assign]


def pull_readable(
    follower: Follower[Any],
    readable: Set[str],
    warned: set[str],
    leader_name: str,
    start: int | None,
    stop: int | None = None,
    *,
    inclusive_of_start: bool = True,
) -> Iterator[Sequence[Notification]]:
    """``follower``'s ``pull_notifications``: the batches of ``leader_name``'s
    notifications, each without those whose topic is not one of ``readable``, and a
    warning naming the first such notification of each topic (``warned`` holds the
    topics already named). A batch it leaves empty is not given: a runner reads the
    last notification of each. The follower's position moves past a record passed
    over with the next record it processes.
    """
    for notifications in follower.readers[leader_name].select(
        start=start, stop=stop, inclusive_of_start=inclusive_of_start
    ):
        kept = []
        for notification in notifications:
            if notification.topic in readable:
                kept.append(notification)
            elif notification.topic not in warned:
                warned.add(notification.topic)
                logger.warning(
                    "%s passes over %s's notification %s, and any other of its topic %r: "
                    "its mapper reads no such type; list the aggregate class in "
                    "aggregate_classes if its policy needs it",
                    follower.name,
                    leader_name,
                    notification.id,
                    notification.topic,
                )
        if kept:
            yield kept


def cipher_of(factory: InfrastructureFactory[Any]) -> Cipher | None:
    """The factory's cipher (``CIPHER_TOPIC``, ``CIPHER_KEY``). eventsourcing
    reports a missing ``cryptography`` package as a failure to resolve its cipher's
    topic, which no ``except ImportError`` sees: this says which extra to install.

    Raises:
        ConfigurationError: The cipher's package is missing, or its key is missing or
            is not one it takes (the key is not shown).
    """
    key_material(factory.env)  # eventsourcing's AES ciphers read the key leniently (ADR 0088)
    try:
        return factory.cipher()
    except TopicError as exc:
        if not isinstance(exc.__cause__, ImportError):
            raise
        msg = (
            f"an encrypted store needs the 'cryptography' package ({exc.__cause__}); "
            "install it with: pip install 'covonaut-es[encryption]'"
        )
        raise ConfigurationError(msg) from exc


def event_mapper(
    env: Mapping[str, str] | None = None,
    *,
    name: str = "",
    aggregate_classes: Iterable[type] = (),
) -> MsgspecMapper:
    """The mapper that reads what an :class:`~covonaut_es.AgentApplication` stores, for
    an application that is none: a follower in an ``eventsourcing.system.System``
    (replace its mapper of the leader in ``follow``), or a repository of its own.
    Events come back as their own classes, every field in its declared type.

    Args:
        env: The settings the ``AgentApplication`` is configured with; only its cipher
            and compressor are read (``CIPHER_TOPIC``, ``CIPHER_KEY``,
            ``COMPRESSOR_TOPIC``, each also prefixed with ``name``, as eventsourcing
            reads them).
        name: The ``AgentApplication``'s name, for the settings prefixed with it.
        aggregate_classes: The application's own aggregate classes whose events to read
            (besides agent threads'); a record of any other type is a
            :class:`~covonaut_es.errors.SerializationError`, and nothing it names is
            imported.

    Raises:
        ConfigurationError: The settings name a cipher whose package is missing.
    """
    # The in-memory factory only reads the cipher's and compressor's settings here: it
    # opens no connection, unlike the factory of the back end ``env`` may name.
    settings = POPOFactory(Environment(name, dict(env or {})))
    return ApplicationMapper(
        ApplicationTranscoder(aggregate_classes),
        compressor=settings.compressor(),
        cipher=cipher_of(settings),
    )
