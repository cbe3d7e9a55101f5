"""``approve --arguments``: generated hostile texts, and the one law that an approval
covers exactly the value the strict reader made of the text, or nothing is recorded."""

from __future__ import annotations

import copy
import itertools
import json
import secrets
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ScriptedProvider,
    Tool,
    open_store,
)
from covonaut_es.cli import main
from covonaut_es.domain import AgentThread, operation_digest
from support import call

SECRET = secrets.token_hex(32)
REQUESTED = {"amount": 7}
"""The arguments every review asks about."""


@attrs.frozen
class Raw:
    """JSON text put into a document as it is: what no encoder would write."""

    text: str


@attrs.frozen
class Twice:
    """A key that an object names twice (the second time written with escapes)."""

    key: str


def dump(value: Any) -> str:
    """JSON text of ``value``, with :class:`Raw` text and :class:`Twice` keys in it."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, list):
        return "[" + ", ".join(map(dump, value)) + "]"
    if isinstance(value, dict):
        members = []
        for key, item in value.items():
            if isinstance(key, Twice):
                first, second = item
                members += [f"{json.dumps(key.key)}: {dump(first)}"]
                members += [f"{escaped(key.key)}: {dump(second)}"]
            else:
                name = key.text if isinstance(key, Raw) else json.dumps(key)
                members.append(f"{name}: {dump(item)}")
        return "{" + ", ".join(members) + "}"
    return json.dumps(value)


def escaped(text: str) -> str:
    """A JSON string of ``text`` with every character a ``\\u`` escape (astral ones
    as surrogate pairs): the same string to any reader."""
    units = text.encode("utf-16-be")
    pairs = (units[i : i + 2] for i in range(0, len(units), 2))
    return '"' + "".join(f"\\u{unit.hex()}" for unit in pairs) + '"'


scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
objects = st.dictionaries(st.text(max_size=4), values, max_size=4)

POISONS = (
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-1E400",
    str(2**64),
    str(-(2**63) - 1),
    str(10**40),
    '"\\ud800"',
    '"x\\udfff"',
    '"\\ude00\\ud83d"',
)
"""Values the strict reader refuses: non-finite numbers, integers beyond 64 bits and
lone surrogates (a low one before a high one is no pair)."""
SURROGATE_KEYS = ('"\\ud83d"', '"k\\udfff"')


def containers(value: Any) -> Iterator[Any]:
    """Every object and array in ``value``, ``value`` first."""
    if isinstance(value, dict | list):
        yield value
        for item in value.values() if isinstance(value, dict) else value:
            yield from containers(item)


@st.composite
def refused(draw: st.DrawFn) -> str:
    """A text the strict reader refuses: a valid edit with one flaw put in at any depth
    (a key named twice, a number no stored JSON carries, a lone surrogate), or a JSON
    value that is no object."""
    how = draw(st.sampled_from(["twice", "value", "key", "no object"]))
    if how == "no object":
        return json.dumps(draw(st.lists(values, max_size=3) | scalars))
    value = copy.deepcopy(draw(objects))
    found = list(containers(value))
    objects_found = [c for c in found if isinstance(c, dict)]
    target = draw(st.sampled_from(objects_found if how != "value" else found))
    if how == "twice":
        known = sorted(k for k in target if isinstance(k, str))
        key = draw(st.sampled_from(known) if known else st.text(max_size=4))
        target.pop(key, None)
        target[Twice(key)] = (draw(values), draw(values))
    elif how == "key":
        target[Raw(draw(st.sampled_from(SURROGATE_KEYS)))] = draw(values)
    elif isinstance(target, dict):
        target[draw(st.text(max_size=4))] = Raw(draw(st.sampled_from(POISONS)))
    else:
        target.insert(draw(st.integers(0, len(target))), Raw(draw(st.sampled_from(POISONS))))
    return dump(value)


@st.composite
def accepted(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A text of a JSON object and the value it reads as: an edit, in any of the ways
    JSON may write it, or the request itself written differently."""
    value = draw(objects | st.just(REQUESTED) | st.just({"to": "\U0001f600"}))
    writers = [
        json.dumps(value),
        json.dumps(value, ensure_ascii=False),
        json.dumps(value, indent=2),
        "{" + ", ".join(f"{escaped(k)}: {json.dumps(v)}" for k, v in value.items()) + "}",
    ]
    return draw(st.sampled_from(writers)), value


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('edits') / 'threads.db'}"


_THREADS = itertools.count()


def paused_on_a_review(url: str) -> str:
    """A new thread whose call of ``pay`` with :data:`REQUESTED` awaits a review."""
    thread_id = f"pay-{next(_THREADS)}"
    pay = Tool("pay", "Pay", {"type": "object"}, lambda c, a: "paid", requires_approval=True)
    with open_store(url) as store:
        Agent(
            AgentConfig(
                provider=ScriptedProvider([call(("p1", "pay", json.dumps(REQUESTED)))]),
                tools=[pay],
                checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            )
        ).run("Pay 7.")
    return thread_id


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=accepted() | refused().map(lambda text: (text, None)))
def test_an_approval_covers_exactly_the_strictly_read_edit_or_nothing_is_recorded(
    url: str,
    case: tuple[str, dict[str, Any] | None],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Property: approve --arguments TEXT either exits 2 in one line and records nothing
    (a key named twice at any depth, NaN, infinity, 1e400, an integer beyond 64 bits, a
    lone surrogate escape, no object), or records an approval whose digest is that of
    exactly the value TEXT reads as, and an edit equal to the request is a plain
    approval."""
    text, expected = case
    monkeypatch.setenv("COVONAUT_ES_REVIEWER_SECRET", SECRET)
    thread_id = paused_on_a_review(url)
    with open_store(url) as store:
        (review,) = store.state_at(thread_id).reviews
        before = store.state_at(thread_id).version
    review_id, requested_digest = review.request.review_id, review.request.digest
    reviewer = HmacReviewerVerifier(SECRET.encode()).issue_token("rita", ttl_seconds=600)
    capsys.readouterr()
    # --arguments=TEXT: a text such as -1e+16 would otherwise read as an option
    given = [f"--arguments={text}", "--reviewer-token", reviewer, "--json", "--store", url]
    status = main(["approve", review_id, *given])
    out, err = capsys.readouterr()
    with open_store(url) as store:
        state = store.state_at(thread_id)
        history = store.history(thread_id)
    if expected is None:
        assert status == 2, (text, out)
        assert len(err.splitlines()) == 1 and "edited arguments" in err, (text, err)
        assert state.version == before and state.reviews[0].pending
        return
    assert status == 0, (text, err)
    decision = state.reviews[0].decision
    assert decision is not None
    digest = operation_digest("pay", expected)
    assert decision.digest == digest == json.loads(out)["digest"]
    plain = digest == requested_digest
    assert (decision.arguments is None) is plain, text
    edits = [e for e in history if isinstance(e, AgentThread.ReviewApprovedWithEdits)]
    assert len(edits) == (0 if plain else 1)
    assert ("arguments" in json.loads(out)) is not plain
