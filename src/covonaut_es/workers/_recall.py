"""What a thread the workers' fold forgot says of itself, read from the store when an
event comes that needs it (ADR 0077)."""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

from covonaut_es import _logs
from covonaut_es.errors import CovonautError
from covonaut_es.store import Store
from covonaut_es.workers._ready import UNKNOWN, Summary, summary_of

logger = _logs.logger("covonaut_es.workers")


def recalling(store: Store) -> Callable[[UUID], Summary | None]:
    """The ``recall`` of a :class:`~._ready.ReadyThreads` on ``store``: the thread of a
    stream loaded as stored now, summarized; None when no thread has the stream, and
    one to look at when it cannot be loaded (the step then says why)."""

    def recall(stream: UUID) -> Summary | None:
        thread_id = store.log.thread_id_of(stream)
        if thread_id is None:
            return None
        try:
            thread = store.find(thread_id)
        except CovonautError as exc:
            # The error's class alone: its text names the thread, which an encrypted
            # store keeps out of clear text.
            logger.warning("a worker cannot read a thread (%s): it looks at it", type(exc).__name__)
            return Summary(thread_id=thread_id, status=UNKNOWN)
        return None if thread is None else summary_of(thread)

    return recall
