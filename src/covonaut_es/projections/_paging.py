"""Pages of the reviewer queue: what a page asks for, what it gives, and its cursor.

A page is read by key from the view's index, after the position its cursor names
(keyset paging), so a page costs its own size however long the queue is, and an item
decided between two pages neither shifts nor repeats the others. A cursor is opaque to
clients: the view's sort key of the last item shown, as URL-safe text. It comes back
from outside the process, so it is read strictly and bounded.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime

import msgspec

from covonaut_es.domain import PauseKind
from covonaut_es.errors import InvalidPageRequestError
from covonaut_es.projections._items import PendingReview

MAX_PAGE_SIZE = 500
"""The most items one page holds."""

_MAX_CURSOR_CHARS = 4096


class QueueFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which pending items a page lists; a field left None matches every item.

    Attributes:
        thread_id: Only this thread's items.
        tool_name: Only pauses on this tool.
        kind: Only pauses of this kind.
    """

    thread_id: str | None = None
    tool_name: str | None = None
    kind: PauseKind | None = None

    def matches(self, item: PendingReview) -> bool:
        """Whether ``item`` is one the filter lists."""
        return (
            (self.thread_id is None or item.thread_id == self.thread_id)
            and (self.tool_name is None or item.tool_name == self.tool_name)
            and (self.kind is None or item.kind is self.kind)
        )


EVERY_ITEM = QueueFilter()


class QueueKey(msgspec.Struct, frozen=True, array_like=True):
    """Where an item sorts in a view: its request time and its thread's and its own
    key, as the view's index holds them."""

    requested_at: str
    thread_key: str
    item_key: str


class QueuePage(msgspec.Struct, frozen=True):
    """One page of the reviewer queue.

    Attributes:
        items: The page's items, in the order asked for.
        next_cursor: Pass it as ``after`` for the next page; None on the last page.
    """

    items: tuple[PendingReview, ...]
    next_cursor: str | None = None


def encode_cursor(key: QueueKey) -> str:
    """The opaque cursor of the position after ``key``."""
    return base64.urlsafe_b64encode(msgspec.json.encode(key)).decode().rstrip("=")


def decode_cursor(cursor: str) -> QueueKey:
    """The position a cursor from :func:`encode_cursor` names: one that
    :func:`encode_cursor` gives back as it came (no other spelling of the same bytes),
    whose time is an ISO timestamp as a view writes it and whose keys are text a
    view's index could hold (not empty, no NUL).

    Raises:
        InvalidPageRequestError: It is not such a cursor.
    """
    msg = "the page cursor (after) is not one a page of the reviewer queue gave: ask for page one"
    if not isinstance(cursor, str) or not 0 < len(cursor) <= _MAX_CURSOR_CHARS:
        raise InvalidPageRequestError(msg)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key = msgspec.json.decode(raw, type=QueueKey)
    except (binascii.Error, ValueError, msgspec.DecodeError) as exc:
        raise InvalidPageRequestError(msg) from exc
    if encode_cursor(key) != cursor or not _position(key):
        raise InvalidPageRequestError(msg)
    return key


def _position(key: QueueKey) -> bool:
    """Whether ``key`` could be an item's place in a view."""
    try:
        at = datetime.fromisoformat(key.requested_at)
    except ValueError:
        return False
    if at.isoformat() != key.requested_at:
        return False
    return all(text and "\x00" not in text for text in (key.thread_key, key.item_key))


def checked_limit(limit: int) -> int:
    """``limit`` if it is a page size the queue serves.

    Raises:
        InvalidPageRequestError: It is below 1 or above :data:`MAX_PAGE_SIZE`.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_SIZE:
        msg = f"a page holds 1 to {MAX_PAGE_SIZE} items (limit), not {limit!r}"
        raise InvalidPageRequestError(msg)
    return limit
