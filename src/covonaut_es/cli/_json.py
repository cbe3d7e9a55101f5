"""The one vocabulary of every command's ``--json`` output, and its JSON Schemas.

The same thing has the same key in every command: ``thread_id``, ``version``,
``recorded_at``, ``kind``, ``review_id``, ``tool_call_id``, ``tool_name``,
``arguments``, ``digest``, ``reason``, ``status``. Times are RFC 3339 in UTC, ending
in ``Z``; values are never shortened (tables may shorten them, JSON does not).

:data:`SCHEMAS` describes each command's output; ``docs/cli.md`` shows them and the
tests validate every command's output against them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from covonaut_es.projections import PendingReview


def utc(moment: datetime) -> str:
    """A time as RFC 3339 in UTC, ending in ``Z``."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def canonical(value: object) -> str:
    """Compact JSON text with sorted keys: the same value always reads the same."""
    return msgspec.json.encode(value, order="sorted").decode()


def review_kind(item: PendingReview) -> str:
    """``review`` for a review request (approve or reject it), ``interrupt`` for a
    plain interrupt (its application resumes it; there is nothing to approve)."""
    return "interrupt" if item.review_id is None else "review"


def review_arguments(item: PendingReview) -> object:
    """The arguments of the operation a review request asks about; None for a plain
    interrupt, whose call's arguments the queue does not hold."""
    if item.review_id is None or not isinstance(item.data, dict):
        return None
    return item.data.get("arguments")


def pending_review(item: PendingReview) -> dict[str, Any]:
    """One item of ``reviews --json``."""
    data = item.data if isinstance(item.data, dict) else {}
    call_id = item.item_id if item.review_id is None else data.get("tool_call_id")
    return {
        "thread_id": item.thread_id,
        "kind": review_kind(item),
        "review_id": item.review_id,
        "tool_call_id": call_id,
        "tool_name": item.tool_name,
        "arguments": review_arguments(item),
        "digest": item.digest,
        "reason": item.reason,
        "data": item.data,
        "requested_at": utc(item.requested_at),
        "parent_thread_id": item.branch_parent,
    }
