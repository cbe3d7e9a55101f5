"""The one check every write of a store opened read-only meets first, and every use of
a closed store."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from types import GeneratorType
from typing import Any, TypeVar

from eventsourcing.persistence import ConnectionPoolClosedError, InterfaceError, OperationalError

from covonaut_es.errors import ReadOnlyStoreError, StoreClosedError, StoreUnavailableError
from covonaut_es.store._write_errors import database_error

T = TypeVar("T")
C = TypeVar("C", bound=type)

_UNREACHED = (ConnectionPoolClosedError, OperationalError, InterfaceError, StoreUnavailableError)
"""What a back end raises when its pool or connection was closed under a call."""


class WriteGuard:
    """Refuses writes to a store opened read-only (``?mode=ro``), and any use of a
    closed one.

    Args:
        url: The store's redacted URL, for messages.
        read_only: Whether the store was opened read-only.

    Attributes:
        closed: Whether the store was closed.
    """

    def __init__(self, url: str, *, read_only: bool) -> None:
        self.url = url
        self.read_only = read_only
        self.closed = False

    def refuse_if_closed(self) -> None:
        """Refuse any use of a closed store: its methods ask here, and so does every
        write of a part of it (its submissions, its log's positions) kept past close.

        Raises:
            StoreClosedError: The store was closed.
        """
        if self.closed:
            raise StoreClosedError(f"store {self.url} is closed")

    def refuse_under(self, error: Exception, call: str) -> None:
        """Raise the store's typed error for ``error``, which the call named ``call``
        raised: StoreClosedError, from it, if it is the back end's failure to reach its
        database and the store was closed while the call ran (eventsourcing's
        ``ConnectionPoolClosedError`` on SQLite, its ``OperationalError`` on
        PostgreSQL); the database's failure typed (:func:`database_error`) if no layer
        under the call typed it (a damaged file read by a listing, say). Returns for any
        other error (a conflict, a damaged row: the call's own), for the caller to raise.

        Raises:
            StoreClosedError: The store was closed.
            CovonautError: The database failed the call.
        """
        if (
            self.closed
            and isinstance(error, _UNREACHED)
            and not isinstance(error, StoreClosedError)
        ):
            raise StoreClosedError(f"store {self.url} is closed") from error
        typed = database_error(error, f"store {self.url}", f"{call} did not complete")
        if typed is not None:
            raise typed from error

    def while_open(self, items: Iterator[T]) -> Iterator[T]:
        """``items`` (a listing read as it goes), each refused once the store is closed.

        Raises:
            StoreClosedError: The store was closed.
        """
        try:
            for item in items:
                self.refuse_if_closed()
                yield item
        except Exception as exc:
            self.refuse_under(exc, "the listing")
            raise

    def refuse_if_read_only(self, refused: str) -> None:
        """Refuse a write before anything is done, on a store opened read-only: every
        write (a save, a lease, a fork, a named state, a submission) asks here first.

        Raises:
            StoreClosedError: The store was closed.
            ReadOnlyStoreError: The store was opened read-only.
        """
        self.refuse_if_closed()
        if self.read_only:
            msg = (
                f"{self.url} was opened read-only (?mode=ro, or a file whose directory "
                f"cannot be written, opened to be read): {refused}, and nothing was "
                "written; open it writable, without ?mode=ro, to change it"
            )
            raise ReadOnlyStoreError(msg)


def guarded(name: str) -> Callable[[C], C]:
    """Make each public method and property of a class whose instances hold their
    store's guard as ``_guard`` (``close`` aside) refuse a closed store, and type a
    database's failure that no layer under it typed (:meth:`WriteGuard.refuse_under`),
    naming the method as ``name.method()``: a store in memory went on reading and
    writing tables it no longer held, a closed SQLite store raised eventsourcing's
    untyped pool error, and a damaged file the driver's own error."""

    def guard_methods(cls: C) -> C:
        for attribute, member in list(vars(cls).items()):
            if attribute.startswith("_") or attribute == "close":
                continue
            if inspect.isfunction(member):
                setattr(cls, attribute, _guarded(member, name))
            elif isinstance(member, property) and member.fget is not None:
                checked = _guarded(member.fget, name)
                setattr(cls, attribute, property(checked, member.fset, member.fdel, member.__doc__))
        return cls

    return guard_methods


def _guarded(method: Callable[..., Any], name: str) -> Callable[..., Any]:
    call = f"{name}.{method.__name__}()"
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def acheck(self: Any, /, *args: Any, **kwargs: Any) -> Any:
            guard: WriteGuard = self._guard
            guard.refuse_if_closed()
            try:
                return await method(self, *args, **kwargs)
            except Exception as exc:
                guard.refuse_under(exc, call)
                raise

        return acheck

    @functools.wraps(method)
    def checked(self: Any, /, *args: Any, **kwargs: Any) -> Any:
        guard: WriteGuard = self._guard
        guard.refuse_if_closed()
        try:
            result = method(self, *args, **kwargs)
        except Exception as exc:
            guard.refuse_under(exc, call)
            raise
        # A listing, read as it goes, is checked at each item too.
        return guard.while_open(result) if isinstance(result, GeneratorType) else result

    return checked
