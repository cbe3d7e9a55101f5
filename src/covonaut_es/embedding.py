"""Keeping agent threads inside your own eventsourcing application.

Subclass :class:`AgentApplication` instead of ``eventsourcing.application.Application``
and your application stores :class:`~covonaut_es.AgentThread` aggregates beside its
own: ``app.save(claim, thread)`` writes both in one transaction, and
``Store.from_application(app)`` lets an :class:`~covonaut_es.Agent` run on the threads
it holds.
"""

from __future__ import annotations

from uuid import UUID

from eventsourcing.application import Application

from covonaut_es.serialization import MsgspecMapper


class AgentApplication(Application[UUID]):
    """An eventsourcing ``Application`` whose mapper reads and writes agent threads.

    Its mapper is covonaut_es's msgspec mapper, so the thread's events come back with
    their types; compression and encryption settings (``COMPRESSOR_TOPIC``,
    ``CIPHER_TOPIC``) apply as usual. Your own aggregates' events go through the same
    mapper, which decodes every field into its declared type: annotate each field of
    an event class, and each parameter of an ``@event`` method (``Decimal``,
    ``datetime``, enums and msgspec Structs all come back as themselves). Snapshots
    are written for agent threads only: leave your aggregates out of
    ``snapshotting_intervals``.

    Use it as the base class of your application, or as a mixin before another
    ``Application`` subclass.
    """

    def construct_mapper(self) -> MsgspecMapper:
        """covonaut_es's msgspec mapper, with the configured compressor and cipher."""
        return MsgspecMapper(compressor=self.factory.compressor(), cipher=self.factory.cipher())
