"""The operation digest of arguments holding NaN or an infinity: RFC 8785 has no such
numbers, and msgspec would write them as null, so NaN, an infinity and None would share
one digest and one approval would cover each. Each is refused with a typed error,
whichever way the digest is asked for."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import Message, Role, ToolCall, operation_digest
from covonaut_es.domain import AgentThread
from covonaut_es.domain._canonical import jcs
from covonaut_es.domain._reviews import operation_digests
from covonaut_es.errors import NonFiniteNumberError, NotJSONDataError

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NON_FINITE = [math.nan, math.inf, -math.inf]


def _open_call() -> tuple[AgentThread, ToolCall]:
    """A thread whose model asked for ``pay``, the call open."""
    thread = AgentThread.start("t", now=NOW)
    call = ToolCall("c0", "pay", "{}")
    thread.append_message(Message(Role.ASSISTANT, tool_calls=(call,)), now=NOW)
    thread.call_tools([call], now=NOW)
    return thread, call


@pytest.mark.parametrize("number", NON_FINITE)
@pytest.mark.parametrize(
    "place",
    [
        lambda x: {"amount": x},
        lambda x: {"to": [1, {"n": x}]},
        lambda x: {"t": (x,)},
        lambda x: {"s": frozenset([x])},
        lambda x: {"s": {x}},
    ],
)
def test_a_non_finite_number_has_no_digest(number: float, place: Any) -> None:
    """NaN and the infinities, at any depth, are refused by each way of taking the
    digest (today's, the one recorded before RFC 8785, both), naming the tool."""
    arguments = place(number)
    with pytest.raises(NonFiniteNumberError, match=r"'pay'.*not a JSON number"):
        operation_digest("pay", arguments)
    with pytest.raises(NonFiniteNumberError):
        operation_digest("pay", arguments, like="0" * 64)
    with pytest.raises(NonFiniteNumberError):
        operation_digests("pay", arguments)


def test_a_review_of_non_finite_arguments_is_refused_before_any_event() -> None:
    """A review asked for arguments holding NaN is refused, and records nothing."""
    thread, call = _open_call()
    before = len(thread.collect_events())
    with pytest.raises(NonFiniteNumberError):
        thread.request_review(call, {"amount": math.nan}, now=NOW)
    assert len(thread.collect_events()) == 0 and before > 0


_PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        # integers a stored number carries: one past 64 bits is refused as such
        | st.frozensets(
            st.floats() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=3), max_size=3
        )
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


def _non_finite_in(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_non_finite_in(v) for v in value.values())
    if isinstance(value, list | tuple | frozenset):
        return any(_non_finite_in(v) for v in value)
    return False


@settings(max_examples=60, deadline=None)
@given(arguments=st.dictionaries(st.text(max_size=4), _PLAIN, max_size=4))
def test_a_digest_is_refused_exactly_when_a_number_is_not_finite(arguments: dict[str, Any]) -> None:
    """Property: any arguments get a digest, unless they hold NaN or an infinity; then
    the typed error, and never a digest shared with None in its place."""
    try:
        digest = operation_digest("pay", arguments)
    except NonFiniteNumberError:
        assert _non_finite_in(arguments)
        return
    assert not _non_finite_in(arguments)
    assert digest.startswith("jcs-sha256:")


_JSON_LIKE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.frozensets(st.integers(-9, 9) | st.text(max_size=3), max_size=5)
        | st.sets(st.text(max_size=3), max_size=5)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=80, deadline=None)
@given(arguments=st.dictionaries(st.text(max_size=4), _JSON_LIKE, min_size=1, max_size=4))
def test_a_reviews_digest_is_the_digest_of_the_arguments_it_records(
    arguments: dict[str, Any],
) -> None:
    """Property: the digest a review asks approval for equals the digest of the
    arguments the review records, whichever the process's string hashing and however
    a set's items mix types; so an approval given in one process covers the call in
    another, and a replayed thread recomputes the same digest."""
    thread, call = _open_call()
    request = thread.request_review(call, arguments, now=NOW)
    assert request.digest == operation_digest("pay", request.arguments)
    assert request.digest == operation_digest("pay", arguments)
    assert set(operation_digests("pay", arguments)) == set(
        operation_digests("pay", request.arguments)
    )


def test_a_set_is_digested_in_one_order_whatever_the_hashing() -> None:
    """A set of strings gets one digest in processes with different string hashing."""
    code = (
        "from covonaut_es import operation_digest;"
        "print(operation_digest('pay', {'to': {'ann', 'bob', 'cy', 'dee', 'eve'}, 'n': {3, 'x'}}))"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in (1, 2, 3, 4)
    }
    assert len(digests) == 1


def test_arguments_that_are_not_json_data_are_refused_with_a_typed_error() -> None:
    """An object JSON cannot carry gets a typed error naming the tool, not a digest."""
    with pytest.raises(NotJSONDataError, match=r"'pay'.*not JSON data"):
        operation_digest("pay", {"to": object()})


class _Amount(msgspec.Struct):
    value: float


def _holding_itself() -> list[Any]:
    held: list[Any] = []
    held.append(held)
    return held


@pytest.mark.parametrize(
    ("arguments", "refusal"),
    [
        ({"to": _holding_itself()}, NotJSONDataError),
        ({"to": {"again": _holding_itself()}}, NotJSONDataError),
        ({1: "send to mallory", "1": "send to alice"}, NotJSONDataError),
        ({"to": {None: "x"}}, NotJSONDataError),
        ({"amount": _Amount(math.nan)}, NonFiniteNumberError),
        ({"amount": [_Amount(math.inf)]}, NonFiniteNumberError),
    ],
    ids=["itself", "nested-itself", "int-key", "none-key", "nan-in-struct", "inf-in-list"],
)
def test_a_review_of_what_json_cannot_carry_is_refused_before_any_event(
    arguments: dict[Any, Any], refusal: type[Exception]
) -> None:
    """A structure that holds itself, a key that is not text (which JSON would write as
    text, one digest for two operations), NaN inside a Struct: each is refused with a
    typed error by the digest and by the review, and the review records nothing."""
    with pytest.raises(refusal):
        operation_digest("pay", arguments)
    thread, call = _open_call()
    thread.collect_events()
    with pytest.raises(refusal):
        thread.request_review(call, arguments, now=NOW)
    assert thread.collect_events() == []


def test_a_value_shared_twice_is_not_taken_for_one_holding_itself() -> None:
    """The same list under two keys is plain data, digested as written twice."""
    shared = [1, 2]
    assert operation_digest("pay", {"a": shared, "b": shared}) == operation_digest(
        "pay", {"a": [1, 2], "b": [1, 2]}
    )


_ANY_KEY = st.text(max_size=2) | st.integers(0, 3) | st.none() | st.booleans()
_PYTHON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-9, 9)
    | st.floats()
    | st.text(max_size=3)
    | st.floats().map(_Amount),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.frozensets(st.integers(-9, 9) | st.text(max_size=2), max_size=4)
        | st.dictionaries(_ANY_KEY, inner, max_size=3)
    ),
    max_leaves=10,
)


class _Refused(Exception):
    pass


def _expected(value: Any) -> Any:
    """What a review records of ``value``, by the rules as documented: a reference
    model, written apart from the library's walk."""
    if isinstance(value, _Amount):
        return {"value": _expected(value.value)}
    if isinstance(value, float) and not math.isfinite(value):
        raise _Refused
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise _Refused
        return {key: _expected(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_expected(item) for item in value]
    if isinstance(value, frozenset):
        return sorted(value, key=lambda item: jcs(item))
    return value


@settings(max_examples=150, deadline=None)
@given(arguments=st.dictionaries(_ANY_KEY, _PYTHON_VALUES, min_size=1, max_size=3))
def test_a_review_records_all_its_arguments_say_or_refuses_them(arguments: Any) -> None:
    """Property: any Python arguments are either refused with a typed error, recording
    nothing, or recorded as the documented rules write them (text keys only, so no two
    keys merge into one and no digest covers two operations; NaN refused inside a
    Struct too; a set in the order of its items' RFC 8785 forms), under the digest of
    what is recorded."""
    thread, call = _open_call()
    thread.collect_events()
    try:
        expected = _expected(arguments)
    except _Refused:
        expected = _Refused
    try:
        request = thread.request_review(call, arguments, now=NOW)
    except (NotJSONDataError, NonFiniteNumberError):
        assert expected is _Refused
        assert thread.collect_events() == []
        return
    assert request.arguments == expected
    assert request.digest == operation_digest("pay", request.arguments)
