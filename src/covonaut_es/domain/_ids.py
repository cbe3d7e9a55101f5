"""Thread ids: the rule every new thread's id follows, and the aggregate id it maps to."""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Callable
from uuid import UUID, uuid5

from covonaut_es._text import printable, shown_escaped
from covonaut_es.errors import InvalidThreadIdError, ThreadStateError

THREAD_NAMESPACE = UUID("6f1d2a8e-5b7c-4c39-9a51-2f0e8c4d7b13")
"""Namespace of the uuid5 that maps a thread id to its aggregate id. Never change it."""


MAX_THREAD_ID_LENGTH = 200
"""The longest thread id a new thread may have, in characters."""


def check_thread_id(thread_id: str, *, new: bool = True) -> str:
    """Return ``thread_id`` if a new thread may have it, on every back end alike; with
    ``new`` false, if a thread stored by an earlier version may have it.

    A thread id is 1 to 200 characters in Unicode's composed form (NFC), none of them
    a control character (NUL, tab, newline, ...: Unicode category Cc), an invisible
    format character (zero-width space and joiners, bidi overrides, ...: Cf) or a lone
    surrogate (Cs): two ids that look alike are then the same id, or differ in
    something a person can see. A new thread's id (started, forked, imported) also
    shows as itself: it holds no character that shows nothing or that Python does not
    call printable (a space other than ASCII's, a line or paragraph separator, a Hangul
    filler, the Braille blank, a private-use or unassigned code point), the characters
    :func:`covonaut_es._text.printable` shows as escapes, and it neither begins nor
    ends with a space, which a table's padding hides. Earlier versions accepted those,
    so a thread already stored under such an id is still read, run and submitted to
    (ADR 0126).

    Args:
        thread_id: The id.
        new: Whether a new thread is to take the id. False where the id names a thread
            that may be stored already (its submissions, a run of a thread that exists).

    Raises:
        InvalidThreadIdError: It is not such an id.
    """
    _check_text(thread_id)
    if not 1 <= len(thread_id) <= MAX_THREAD_ID_LENGTH:
        msg = (
            f"a thread id has 1 to {MAX_THREAD_ID_LENGTH} characters, found "
            f"{len(thread_id)} in {thread_id[:40]!r}: choose a shorter, non-empty id"
        )
        raise InvalidThreadIdError(msg)
    for position, char in enumerate(thread_id):
        if unicodedata.category(char) in ("Cc", "Cf", "Cs"):
            msg = (
                f"thread id {thread_id!r} has the control, format or surrogate character "
                f"{char!r} at position {position}: thread ids may hold visible text only"
            )
            raise InvalidThreadIdError(msg)
        if new and shown_escaped(char):
            msg = (
                f"thread id {thread_id!r} has {char!r} at position {position}, a character "
                "that shows nothing or is not printable (a space other than ASCII's, a "
                "separator, a filler, a private-use or unassigned code point): a new "
                "thread's id may hold visible text only"
            )
            raise InvalidThreadIdError(msg)
    if new and (thread_id.startswith(" ") or thread_id.endswith(" ")):
        msg = (
            f"thread id {thread_id!r} begins or ends with a space, which a listing does "
            "not show: a new thread's id may not"
        )
        raise InvalidThreadIdError(msg)
    if not unicodedata.is_normalized("NFC", thread_id):
        composed = unicodedata.normalize("NFC", thread_id)
        msg = (
            f"thread id {thread_id!r} is not in Unicode's composed form (NFC): use "
            f"{composed!r}, which looks the same"
        )
        raise InvalidThreadIdError(msg)
    return thread_id


def check_thread_id_or_stored(thread_id: str, *, stored: Callable[[str], bool]) -> str:
    """Return ``thread_id`` if a request may name it where a thread is started unless
    it is stored (a run, a submission): a new thread's id by the whole rule of
    :func:`check_thread_id`, a stored thread's by the rule earlier versions applied.

    Args:
        thread_id: The id.
        stored: Whether a thread is stored under an id; asked only of an id that
            follows the earlier rule but not a new thread's.

    Raises:
        InvalidThreadIdError: It is no thread's id, or no new thread's and no thread is
            stored under it.
    """
    try:
        return check_thread_id(thread_id)
    except InvalidThreadIdError as exc:
        refused = exc
    check_thread_id(thread_id, new=False)  # no thread's id at all: stored by none
    if stored(thread_id):
        return thread_id
    raise refused


def default_fork_id(parent_id: str, token: str) -> str:
    """The id of a fork of ``parent_id`` given none: the parent's id as it shows, then
    ``~`` and ``token`` (a few random characters), cut to fit. A new thread's id, by
    :func:`check_thread_id`, whatever id an earlier version stored the parent under
    (ADR 0126): what shows nothing in it shown as an escape, a space at either end left
    out."""
    suffix = f"~{token}"
    shown = printable(parent_id).strip()[: MAX_THREAD_ID_LENGTH - len(suffix)].rstrip()
    return (shown or "fork") + suffix


def thread_aggregate_id(thread_id: str) -> UUID:
    """The aggregate id of a thread: a uuid5 of its thread id. Every read of a thread
    by its id asks for it, so it is where an id that is no str is refused.

    Raises:
        InvalidThreadIdError: The id is no str, or holds a lone surrogate (as bytes
            that are no UTF-8 on a command line read): it is no text, so no thread has
            it.
    """
    if type(thread_id) is not str:  # the check alone, of most ids, costs as much again
        _check_text(thread_id)
    return _aggregate_id(thread_id)


@functools.lru_cache(maxsize=64)
def _aggregate_id(thread_id: str) -> UUID:
    # Kept for the few threads used last: a load asks twice, for its stream and to
    # check its first event's; a worker folding many threads' events keeps no more.
    try:
        return uuid5(THREAD_NAMESPACE, thread_id)
    except UnicodeEncodeError as exc:
        msg = (
            f"thread id {thread_id!r} holds the lone surrogate {exc.object[exc.start]!r} at "
            f"position {exc.start}, which is no text (bytes that are not UTF-8): no thread "
            "has such an id"
        )
        raise InvalidThreadIdError(msg) from None


def _check_text(thread_id: object) -> None:
    # Exactly a str: no event holds a subclass (msgspec encodes str, and an enum as its
    # value), and a key derived by formatting one (a (str, Enum) member formats as
    # "Ids.A") would differ from the key its stored copy gives.
    if type(thread_id) is not str:
        name = type(thread_id).__name__
        msg = (
            f"a thread id (thread_id) must be a string, found {name} {thread_id!r:.60}; "
            "exactly a str: of an enum's member or a str subclass, pass its value"
        )
        raise InvalidThreadIdError(msg)


def check_thread_stream(stream: UUID, thread_id: str) -> None:
    """Refuse a thread's first event, naming ``thread_id``, stored in ``stream`` when
    that is another thread's stream: the chain does not cover the stream id, so a
    whole stream copied under another id still links.

    Raises:
        ThreadStateError: ``stream`` is not the stream of ``thread_id``.
    """
    if stream != thread_aggregate_id(thread_id):
        msg = (
            f"the first event of stream {stream} names thread {thread_id!r}, whose stream "
            f"is {thread_aggregate_id(thread_id)}: it was copied from another thread; "
            "restore the thread from a backup"
        )
        raise ThreadStateError(msg)
