"""The one vocabulary of every command's ``--json`` output, and its JSON Schemas.

The same thing has the same key in every command: ``thread_id``, ``version``,
``recorded_at``, ``kind``, ``review_id``, ``tool_call_id``, ``tool_name``,
``arguments``, ``digest``, ``reason``, ``status``. Times are RFC 3339 in UTC, ending
in ``Z``; values are never shortened (tables may shorten them, JSON does not).

:data:`SCHEMAS` describes each command's output; ``docs/cli.md`` shows them and the
tests validate every command's output against them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from covonaut_es.audit import MigrationReport
from covonaut_es.cli._output import emit, print_json
from covonaut_es.domain import PauseKind
from covonaut_es.projections import PendingReview, tool_json
from covonaut_es.tools import MAX_ARGUMENTS_DEPTH, json_depth


def utc(moment: datetime) -> str:
    """A time as RFC 3339 in UTC, ending in ``Z``."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def canonical(value: object) -> str:
    """Compact JSON text with sorted keys: the same value always reads the same."""
    return msgspec.json.encode(value, order="sorted").decode()


def review_kind(item: PendingReview) -> str:
    """``review`` for a review (approve, reject or respond), ``interrupt`` for a tool's
    pause (answer it), ``in_doubt`` for a call in doubt (settle it)."""
    return item.kind.value


def review_arguments(item: PendingReview) -> dict[str, Any] | None:
    """The arguments of the operation a review asks about, or of the call in doubt; None
    for a tool's pause, whose call's arguments the queue does not hold, and for a call
    in doubt whose arguments text is not a JSON object (:func:`call_arguments_text`
    gives that text)."""
    if item.kind is PauseKind.INTERRUPT or not isinstance(item.data, dict):
        return None
    arguments = item.data.get("arguments")
    if item.kind is PauseKind.IN_DOUBT and isinstance(arguments, str):
        arguments = _decoded_object(arguments)
    return arguments if isinstance(arguments, dict) else None


def call_arguments_text(item: PendingReview) -> str | None:
    """A call in doubt's arguments as the model wrote them, or None for another kind."""
    data = item.data if isinstance(item.data, dict) else {}
    arguments = data.get("arguments")
    in_doubt = item.kind is PauseKind.IN_DOUBT and isinstance(arguments, str)
    return arguments if in_doubt else None


def _decoded_object(text: str) -> dict[str, Any] | None:
    """The JSON object a model's arguments text holds, or None: the text is the model's
    and may be anything (the depth is checked first, as the run loop does)."""
    if json_depth(text) > MAX_ARGUMENTS_DEPTH:
        return None
    try:
        value = msgspec.json.decode(text)
    except msgspec.MsgspecError:
        return None
    return value if isinstance(value, dict) else None


def pending_review(item: PendingReview, pause: str = "") -> dict[str, Any]:
    """One item of ``reviews --json``; ``pause`` is its token (see
    :func:`~covonaut_es.service.pause_token`), "" when unknown."""
    return {
        "thread_id": item.thread_id,
        "kind": review_kind(item),
        "review_id": item.review_id,
        "tool_call_id": item.tool_call_id,
        "tool_name": item.tool_name,
        "arguments": review_arguments(item),
        "digest": item.digest,
        "reason": item.reason,
        "data": item.data,
        "requested_at": utc(item.requested_at),
        "parent_thread_id": item.branch_parent,
        "pause": pause or None,
        "server": None if item.tool is None else tool_json(item.tool),
        "tool_changed": item.tool_changed,
    }


def migration_report(report: MigrationReport, *, source: str) -> dict[str, Any]:
    """``migrate --check --json``."""
    counts = sorted(report.counts.items(), key=lambda item: (item[0][0], item[0][1] or -1))
    stale = sorted(report.stale_snapshots.items(), key=lambda item: item[0] or -1)
    return {
        "source": source,
        "ok": report.ok,
        "records": report.records,
        "counts": [
            {
                "type_name": name,
                "stored_version": version,
                "current_version": report.current.get(name),
                "records": count,
            }
            for (name, version), count in counts
        ],
        "stale_snapshots": [
            {"stored_version": version, "snapshots": count} for version, count in stale
        ],
        "failures": [
            {
                "owner": f.owner,
                "position": f.position,
                "type_name": f.type_name,
                "stored_version": f.stored_version,
                "error": f.error,
            }
            for f in report.failures
        ],
    }


def emit_records(
    args: argparse.Namespace,
    records: Sequence[dict[str, Any]],
    table_row: Callable[[dict[str, Any]], dict[str, Any]],
    columns: Sequence[str],
) -> None:
    """Print records as a JSON array (``--json``), or as a table of ``columns`` made of
    each record by ``table_row``."""
    if args.json:
        print_json(records)
        return
    emit(args, [table_row(record) for record in records], columns)


def emit_record(args: argparse.Namespace, record: dict[str, Any]) -> None:
    """Print one record as a JSON object (``--json``) or as a one-row table."""
    if args.json:
        print_json(record)
        return
    emit(args, [record], list(record))


# Schemas --------------------------------------------------------------------------------

_TIME: dict[str, Any] = {
    "type": "string",
    "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$",
    "description": "RFC 3339, UTC",
}
_STRING: dict[str, Any] = {"type": "string"}
_INTEGER: dict[str, Any] = {"type": "integer"}
_THREAD_ID: dict[str, Any] = {"type": "string", "description": "the thread's id"}


def _object(properties: dict[str, Any], *, optional: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in properties if name not in optional],
    }


def _array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


_EVENT = _object(
    {"thread_id": _THREAD_ID, "version": _INTEGER, "recorded_at": _TIME, "kind": _STRING}
)
_DECISION = _object(
    {
        "review_id": _STRING,
        "thread_id": _THREAD_ID,
        "decision": {"enum": ["approved", "rejected", "responded"]},
        "reviewer": _STRING,
        "digest": _STRING,
        "comment": _STRING,
        "decided_at": _TIME,
        "arguments": {
            "type": "object",
            "description": "the edited arguments an approval covers, when edited",
        },
        "partial": {
            "const": True,
            "description": "under four eyes, a first approval: it waits for a second, "
            "different reviewer and authorizes nothing yet",
        },
    },
    optional=["arguments", "partial"],
)
_NULLABLE_STRING: dict[str, Any] = {"type": ["string", "null"]}
_WAITING_FOR: dict[str, Any] = {
    "enum": ["person", "worker", ""],
    "description": "whom the thread waits for: a person to act on a pause, a worker to "
    "run it, or nobody",
}


def _person_action(properties: dict[str, Any]) -> dict[str, Any]:
    """What a person's command on a thread recorded, and where the thread stands now."""
    return _object(
        {
            "thread_id": _THREAD_ID,
            **properties,
            "reviewer": {"type": "string", "description": "the verified person who acted"},
            "status": _STRING,
            "waiting_for": _WAITING_FOR,
            "version": {"type": "integer", "description": "the thread's version now"},
        }
    )


_CALL_ID: dict[str, Any] = {"type": "string", "description": "the paused call's id"}

SCHEMAS: dict[str, dict[str, Any]] = {
    "threads": _array(
        _object(
            {
                "thread_id": _THREAD_ID,
                "status": _STRING,
                "turns": _INTEGER,
                "last_activity": _TIME,
                "pending_reviews": {
                    "type": "integer",
                    "description": "the items `reviews` lists for the thread",
                },
                "waiting_for": _WAITING_FOR,
            }
        )
    ),
    "show": _object(
        {
            "thread_id": _THREAD_ID,
            "version": _INTEGER,
            "status": _STRING,
            "turn": _INTEGER,
            "messages": _array({"type": "object"}),
            "interrupts": _array({"type": "object"}),
            "open_calls": _array({"type": "object"}),
            "in_doubt": _array(_STRING),
            "awaiting_review": _array(_STRING),
            "reviews": _array({"type": "object"}),
        }
    ),
    "history": _array(_EVENT),
    "replay": _object(
        {
            "events": _array(
                {**_EVENT, "properties": {**_EVENT["properties"], "summary": _STRING}}
            ),
            "verify": _object(
                {
                    "thread_id": _THREAD_ID,
                    "ok": {"type": "boolean"},
                    "events": _INTEGER,
                    "chained": _INTEGER,
                    "unchained": _INTEGER,
                    "checkpoints_checked": _INTEGER,
                    "snapshots_checked": _INTEGER,
                    "findings": _array(_object({"version": _INTEGER, "problem": _STRING})),
                    "notes": _array(_STRING),
                }
            ),
            "unlisted": {
                **_STRING,
                "description": "why the events cannot be listed (verify's findings say more)",
            },
        },
        optional=["verify", "unlisted"],
    ),
    "reviews": _array(
        _object(
            {
                "thread_id": _THREAD_ID,
                "kind": {"enum": ["review", "interrupt", "in_doubt"]},
                "review_id": _NULLABLE_STRING,
                "tool_call_id": _NULLABLE_STRING,
                "tool_name": _STRING,
                "arguments": {"type": ["object", "null"]},
                "digest": _NULLABLE_STRING,
                "reason": _STRING,
                "data": {},
                "requested_at": _TIME,
                "parent_thread_id": _NULLABLE_STRING,
                "pause": {
                    "type": ["string", "null"],
                    "description": "the pause's token: answer, settle and abandon given it "
                    "as --pause act on this pause only",
                },
                "server": {
                    "type": ["object", "null"],
                    "description": "for a review of an MCP server's tool: the server, "
                    "origin, tool, description and tool digest the model was offered",
                },
                "tool_changed": {
                    "type": "string",
                    "description": "what changed in the server's tool since an earlier "
                    "review of the same name; empty when nothing did",
                },
            }
        )
    ),
    "approve": _DECISION,
    "reject": _DECISION,
    "answer": _person_action({"tool_call_id": _CALL_ID, "answer": _STRING}),
    "settle": _person_action(
        {
            "tool_call_id": _CALL_ID,
            "settlement": {"enum": ["ran", "not_run", "retry"]},
            "result": {
                "type": ["string", "null"],
                "description": "the call's result the model reads; null when it runs again",
            },
        }
    ),
    "abandon": _person_action({"reason": _STRING}),
    "retry": _person_action({}),
    "fork": _object(
        {"thread_id": _THREAD_ID, "parent_thread_id": _THREAD_ID, "parent_version": _INTEGER}
    ),
    "tree": {
        "$ref": "#/$defs/node",
        "$defs": {
            "node": _object(
                {
                    "thread_id": _THREAD_ID,
                    "parent_version": {"type": ["integer", "null"]},
                    "labels": _array(_object({"name": _STRING})),
                    "children": _array({"$ref": "#/$defs/node"}),
                }
            )
        },
    },
    "import": _array(_object({"thread_id": _THREAD_ID})),
    "migrate": _object(
        {
            "source": _STRING,
            "ok": {"type": "boolean"},
            "records": _INTEGER,
            "counts": _array(
                _object(
                    {
                        "type_name": _STRING,
                        "stored_version": {"type": ["integer", "null"]},
                        "current_version": {"type": ["integer", "null"]},
                        "records": _INTEGER,
                    }
                )
            ),
            "stale_snapshots": _array(
                _object({"stored_version": {"type": ["integer", "null"]}, "snapshots": _INTEGER})
            ),
            "failures": _array(
                _object(
                    {
                        "owner": _STRING,
                        "position": _STRING,
                        "type_name": _STRING,
                        "stored_version": {"type": ["integer", "null"]},
                        "error": _STRING,
                    }
                )
            ),
        }
    ),
    "token issue": _object(
        {
            "token": _STRING,
            "reviewer": _STRING,
            "scopes": _array(_STRING),
            "expires_at": _TIME,
        }
    ),
    "workers": _array(
        _object(
            {
                "worker_id": _STRING,
                "host": _STRING,
                "pid": _INTEGER,
                "started_at": _TIME,
                "heartbeat_at": _TIME,
                "threads": _array(_THREAD_ID),
                "calls": _array(
                    _object(
                        {
                            "thread_id": _THREAD_ID,
                            "tool_call_id": _STRING,
                            "tool_name": _STRING,
                            "started_at": _TIME,
                            "deadline": {
                                "anyOf": [_TIME, {"type": "null"}],
                                "description": "when its timeout runs out; null without one",
                            },
                            "hung": {
                                "type": "boolean",
                                "description": "it runs on past its timeout",
                            },
                        }
                    )
                ),
            }
        )
    ),
}
"""The JSON Schema of each command's ``--json`` output, by command (``export`` writes
JSON Lines of exported events and has no ``--json``)."""
