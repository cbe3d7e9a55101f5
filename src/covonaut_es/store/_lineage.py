"""Following a fork to its ancestors.

A fork's stream starts with a ``Forked`` event naming its parent and the version it
branches from; its versions up to there are the parent's. So every reader of a fork
reads its parent as of that version, which may be a fork too: a chain of forks as deep
as its users made it. Each reader here walks the chain in a loop, or, where a read of
one thread reads its parent inside it, follows at most :data:`FOLLOWED_AT_ONCE` forks
one inside the other (:func:`forks_followed`), so that no depth of chain meets Python's
recursion limit; and each refuses a chain whose first events were altered into a loop
(:func:`refuse_fork_loop`), which would otherwise be followed without end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator
from contextvars import ContextVar
from typing import Protocol

import attrs

from covonaut_es.domain import AgentThread
from covonaut_es.errors import ThreadNotFoundError

FOLLOWED_AT_ONCE = 32
"""How many forks a read follows to their parents one inside the other before it reads
the rest of the chain from the oldest thread down (about 15 frames of the call stack
each)."""

_FOLLOWED: ContextVar[tuple[str, ...]] = ContextVar("covonaut_es_forks_followed", default=())
"""The forks whose parents are being read, innermost last."""


class Loader(Protocol):
    """A read of a thread as of ``version`` (None: its head); None when it has none."""

    def __call__(self, thread_id: str, *, version: int | None = None) -> AgentThread | None: ...


_Read = tuple[Loader, str, int]
"""A read of an ancestor: its loader, its thread and the version."""

_READ_AHEAD: ContextVar[dict[_Read, AgentThread | Exception | None] | None] = ContextVar(
    "covonaut_es_ancestors_read_ahead", default=None
)
"""The ancestors read ahead of the forks that branch from them, by read, with what each
read gave or raised; taken once each."""


def following_fork(
    thread_id: str, parent_id: str, store: str
) -> contextlib.AbstractContextManager[None]:
    """Read a fork's parent inside this block, refusing a parent whose own ancestry
    leads back to the fork.

    Raises:
        ThreadNotFoundError: The parent is the fork, or one of the forks it descends from.
    """
    refuse_fork_loop(thread_id, parent_id, _FOLLOWED.get(), store)
    return following_forks((thread_id,))


@contextlib.contextmanager
def following_forks(thread_ids: tuple[str, ...]) -> Iterator[None]:
    """Read inside this block as if each of ``thread_ids`` (a fork, then its parent,
    and so on) were followed to its parent in turn, each checked by the caller."""
    token = _FOLLOWED.set(_FOLLOWED.get() + thread_ids)
    try:
        yield
    finally:
        _FOLLOWED.reset(token)


def forks_followed() -> tuple[str, ...]:
    """The forks whose parents are being read, innermost last."""
    return _FOLLOWED.get()


def refuse_fork_loop(
    thread_id: str, parent_id: str, descendants: Collection[str], store: str
) -> None:
    """Refuse to follow a fork to its parent when the parent is the fork itself or one
    of the forks ``thread_id`` descends from.

    Raises:
        ThreadNotFoundError: The forks' first events were altered into a loop.
    """
    if parent_id == thread_id or parent_id in descendants:
        msg = (
            f"fork {thread_id!r} in store {store} branches from {parent_id!r}, whose history "
            f"leads back to {thread_id!r}: the forks' first events were altered; restore the "
            "store from a backup"
        )
        raise ThreadNotFoundError(msg)


def ancestry(
    thread_id: str,
    version: int | None,
    forked_event: Callable[[str], AgentThread.Forked | None],
    store: str,
) -> list[tuple[str, int | None]]:
    """The thread and each of its ancestors, the thread first, each with the last of its
    versions that the thread's history up to ``version`` (None: its head) holds, read
    from each fork's first event by ``forked_event``.

    Raises:
        ThreadNotFoundError: The forks' first events were altered into a loop.
    """
    chain = [(thread_id, version)]
    descendants: set[str] = set()
    while (forked := forked_event(thread_id)) is not None:
        parent = forked.parent_thread_id
        refuse_fork_loop(thread_id, parent, descendants, store)
        descendants.add(thread_id)
        inherited = forked.parent_version
        version = inherited if version is None else min(version, inherited)
        thread_id = parent
        chain.append((thread_id, version))
    return chain


@attrs.frozen
class Lineage:
    """How a read of a fork reads its parent, as of the version it branches from when the
    read reaches the fork's own versions (``grafted``: the fork's first event is grafted
    onto it), or as of the version read when that is older (``inherited``: the version is
    the parent's).

    Args:
        grafted: Reads the parent a fork's first event is grafted onto.
        inherited: Reads the parent at a version the fork inherits.
        forked_event: The first event of a fork's stream; None for a root.
        store: The store's redacted URL, for messages.
    """

    grafted: Loader
    inherited: Loader
    forked_event: Callable[[str], AgentThread.Forked | None]
    store: str

    def parent_read(self, forked: AgentThread.Forked, version: int | None) -> tuple[Loader, int]:
        """How a read of a fork up to ``version`` (None: its head) reads the parent that
        ``forked`` names: with which loader, as of which version."""
        if version is None or version > forked.parent_version:
            return self.grafted, forked.parent_version
        return self.inherited, version

    def read_parent(
        self, fork_id: str, parent_id: str, version: int, loader: Loader
    ) -> AgentThread | None:
        """Fork ``fork_id``'s parent ``parent_id`` as of ``version``, as ``loader`` reads
        it: inside the read of the fork, or read ahead of it (:meth:`_read_down`) when
        the read follows :data:`FOLLOWED_AT_ONCE` forks already.

        Raises:
            ThreadNotFoundError: The parent's ancestry leads back to the fork.
        """
        with following_fork(fork_id, parent_id, self.store):
            read = (loader, parent_id, version)
            ahead = _READ_AHEAD.get()
            if ahead is not None and read in ahead:
                return _given(ahead.pop(read))
            if len(_FOLLOWED.get()) <= FOLLOWED_AT_ONCE:
                return loader(parent_id, version=version)
            return self._read_down(read)

    def _read_down(self, read: _Read) -> AgentThread | None:
        """What ``read`` gives, with the reads its own will ask for of the ancestors
        above it made first, from the oldest down, each one's parent taken from the read
        before: the call stack then holds one of them at a time."""
        reads = self._ancestors(read)
        threads = tuple(thread_id for _, thread_id, _ in reads)
        ahead: dict[_Read, AgentThread | Exception | None] = {}
        token = _READ_AHEAD.set(ahead)
        try:
            for depth in reversed(range(len(reads))):
                loader, thread_id, version = reads[depth]
                with following_forks(threads[:depth]):  # the forks below, as if followed
                    try:
                        ahead[reads[depth]] = loader(thread_id, version=version)
                    except Exception as exc:  # raised if the read below asks for it
                        ahead[reads[depth]] = exc
        finally:
            _READ_AHEAD.reset(token)
        return _given(ahead.pop(read))

    def _ancestors(self, read: _Read) -> list[_Read]:
        """``read``, then each read its thread's own will ask for of its parent, as far as
        the forks' first events tell: up to a root, a loop (which the last read refuses),
        or a first event that does not read (which the last read meets, if it needs
        it)."""
        reads = [read]
        seen = set(_FOLLOWED.get())
        _, thread_id, version = read
        while True:
            try:
                forked = self.forked_event(thread_id)
            except Exception:  # met again by the read of thread_id, if that needs it
                break
            parent = None if forked is None else forked.parent_thread_id
            if forked is None or parent == thread_id or parent in seen:
                break
            seen.add(thread_id)
            loader, version = self.parent_read(forked, version)
            thread_id = forked.parent_thread_id
            reads.append((loader, thread_id, version))
        return reads


def _given(outcome: AgentThread | Exception | None) -> AgentThread | None:
    """What a read ahead gave, or its error raised."""
    if isinstance(outcome, Exception):
        raise outcome
    return outcome
