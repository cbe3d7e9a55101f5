"""An application's own event holding what JSON text cannot carry: a lone surrogate in
any text, or a value nested past what the encoder and reader recurse to. The save is
refused with UnreadableEventError naming the event and the field, and nothing is
stored; never a bare UnicodeEncodeError or RecursionError."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.tests.domain import EmailAddress
from hypothesis import event, given, settings
from hypothesis import strategies as st

from covonaut_es import AgentApplication, UnreadableEventError
from test_own_events_read_back import (
    FIELDS,
    FITTING,
    Colour,
    Ledger,
    Ledgers,
    TranscodedLedgers,
    saved_or_refused,
)

SURROGATES = st.characters(categories=["Cs"])
HOSTILE_TEXT = st.builds(
    lambda before, lone, after: before + lone + after,
    st.text(max_size=3),
    SURROGATES,
    st.text(max_size=3),
)


PLAIN: dict[str, Any] = {
    "text": "t",
    "count": 1,
    "ratio": 0.5,
    "flag": True,
    "amount": Decimal("1.25"),
    "at": datetime(2026, 1, 1, tzinfo=UTC),
    "ref": UUID(int=1),
    "tags": ("a",),
    "items": [1],
    "scores": {"a": 1},
    "kinds": frozenset({"k"}),
    "maybe": None,
    "colour": Colour.RED,
    "email": EmailAddress("a@example.com"),
    "point": None,
    "anything": None,
}


def nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


HOSTILE = {
    "text": HOSTILE_TEXT,
    "tags": st.lists(HOSTILE_TEXT, min_size=1, max_size=2).map(tuple),
    "scores": st.dictionaries(HOSTILE_TEXT, st.integers(0, 9), min_size=1, max_size=1),
    "anything": HOSTILE_TEXT | st.integers(1, 5000).map(nested),
}


@pytest.mark.parametrize("application", [Ledgers, TranscodedLedgers])
@pytest.mark.parametrize(
    ("field", "value", "found"),
    [
        ("text", "a\ud800b", "str holding a lone surrogate"),
        ("scores", {"\udfff": 1}, "dict holding a lone surrogate"),
        ("anything", nested(10_000), "list nested too deeply"),
    ],
)
def test_a_field_json_cannot_carry_is_refused_naming_it(
    application: type[AgentApplication], field: str, value: Any, found: str
) -> None:
    """A lone surrogate, or nesting past the encoder's limit, is refused naming the
    event, the field and what it holds; the message itself holds no surrogate."""
    fields = dict(PLAIN, **{field: value})
    app = application(
        env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": ":memory:"}
    )
    try:
        ledger = Ledger()
        ledger.trigger_event(Ledger.Entered, **fields)
        with pytest.raises(UnreadableEventError) as raised:
            app.save(ledger)
        assert (raised.value.event, raised.value.field) == ("Ledger.Entered", field)
        assert raised.value.found == found
        str(raised.value).encode()
        assert app.recorder.max_notification_id() is None
    finally:
        app.close()


@st.composite
def hostile_entries(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """Fitting fields but one, which holds a surrogate or deep nesting."""
    field = draw(st.sampled_from(sorted(HOSTILE)))
    fields = {name: draw(FITTING[name]) for name in FIELDS}
    fields[field] = draw(HOSTILE[field])
    return field, fields


@settings(max_examples=40, deadline=None)
@given(entry=hostile_entries(), transcoded=st.booleans())
def test_any_entry_with_a_hostile_field_is_stored_equal_or_refused_naming_it(
    entry: tuple[str, dict[str, Any]], transcoded: bool
) -> None:
    """Property: an entry holding a lone surrogate or nesting of any depth up to 5,000
    is stored to read back equal, or refused typed, naming that field, with nothing
    stored."""
    field, fields = entry
    if not transcoded:
        fields["point"] = None  # a Point has no encoding without the transcoding
    error = saved_or_refused(TranscodedLedgers if transcoded else Ledgers, fields)
    refused = "" if error is None else error.field
    event("refused" if refused else "saved")
    assert refused in ("", field)
