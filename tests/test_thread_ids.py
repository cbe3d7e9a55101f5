"""Thread ids follow one rule on every back end, checked wherever a thread is created."""

from __future__ import annotations

import enum
import unicodedata
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from covonaut_es import CheckpointSettings, Store, open_store
from covonaut_es.domain import AgentThread, check_thread_id
from covonaut_es.errors import InvalidThreadIdError
from support import converse

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NO_DOCUMENT: Any = None  # never read: the id is checked first

BAD_IDS = [
    pytest.param("", id="empty"),
    pytest.param("x" * 201, id="too-long"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("line\nbreak", id="newline"),
    pytest.param("tab\there", id="tab"),
    pytest.param("del\x7f", id="delete"),
    pytest.param("bell\x85", id="c1-control"),
    pytest.param("half\ud800", id="lone-surrogate"),
    pytest.param("pay\u200bment", id="zero-width-space"),
    pytest.param("joi\u200dned", id="zero-width-joiner"),
    pytest.param("txt.\u202eexe", id="bidi-override"),
    pytest.param("\ufeffbom", id="byte-order-mark"),
    pytest.param("Zoe\u0308", id="decomposed"),
]


@pytest.mark.parametrize("thread_id", BAD_IDS)
def test_a_thread_cannot_start_with_a_bad_id(thread_id: str) -> None:
    """Starting a thread, from scratch or from a state, refuses an id that breaks the rule."""
    with pytest.raises(InvalidThreadIdError, match="thread id"):
        AgentThread.start(thread_id, now=NOW)
    with pytest.raises(InvalidThreadIdError, match="thread id"):
        AgentThread.start_from_state(
            thread_id, key="k", document=NO_DOCUMENT, stored_version=1, now=NOW
        )


@pytest.mark.parametrize("thread_id", ["a", "x" * 200, "Zoë's 🧵 thread/1 ~ with spaces"])
def test_printable_ids_up_to_the_limit_are_accepted(thread_id: str) -> None:
    """Any printable text of 1 to 200 characters is a thread id."""
    assert check_thread_id(thread_id) == thread_id
    assert AgentThread.start(thread_id, now=NOW).thread_id == thread_id


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=12))
def test_ids_that_look_alike_are_one_id_or_none_is_accepted(text: str) -> None:
    """Whatever text is offered, an accepted id is composed (NFC) and holds no invisible
    format character: of two ids that render alike by composition or a zero-width
    character, at most one is ever accepted, so they cannot name two threads."""
    try:
        accepted = check_thread_id(text)
    except InvalidThreadIdError as exc:
        assert "thread id" in str(exc)
        return
    assert unicodedata.is_normalized("NFC", accepted)
    assert not any(unicodedata.category(char) == "Cf" for char in accepted)
    for look_alike in {unicodedata.normalize("NFD", accepted), accepted + "\u200b"} - {accepted}:
        with pytest.raises(InvalidThreadIdError):
            check_thread_id(look_alike)


def test_the_error_names_the_problem_and_its_place() -> None:
    """The message says which character is wrong and where, or what length was found."""
    with pytest.raises(InvalidThreadIdError, match=r"'\\x00' at position 1"):
        check_thread_id("a\x00b")
    with pytest.raises(InvalidThreadIdError, match="1 to 200 characters, found 0"):
        check_thread_id("")
    with pytest.raises(InvalidThreadIdError, match=r"composed form \(NFC\): use 'Zoë'"):
        check_thread_id("Zoe\u0308")
    with pytest.raises(ValueError, match="must be a string, found int"):
        check_thread_id(7)  # type: ignore[arg-type]


def test_a_fork_cannot_take_a_bad_id(store: Store) -> None:
    """Forking under an id that breaks the rule writes nothing and names the problem."""
    converse(store, "parent")
    with pytest.raises(InvalidThreadIdError, match="control, format or surrogate character"):
        store.fork("parent", new_thread_id="child\x00")
    assert list(store.thread_ids()) == ["parent"]
    assert store.forks() == ()


def test_an_import_cannot_bring_in_a_bad_id(store: Store) -> None:
    """Importing an export whose thread id breaks the rule writes nothing."""
    import json

    from covonaut_es.audit import export_thread, import_threads

    converse(store, "good")
    lines = [json.loads(line) for line in list(export_thread(store, "good"))[:-1]]
    hostile = [json.dumps({**line, "thread_id": "bad\nid"}) for line in lines]
    with pytest.raises(InvalidThreadIdError, match=r"'\\n' at position 3"):
        import_threads(store, hostile)
    assert list(store.thread_ids()) == ["good"]


class _ThreadId(str):
    """A subclass of str, which no event can hold."""


class _Ids(str, enum.Enum):  # noqa: UP042  (the classic form, as users write it)
    """A string enum, whose member formats as "_Ids.A", not as its value."""

    A = "orders-1"


not_text = st.one_of(
    st.builds(_ThreadId, st.text(min_size=1, max_size=3)),
    st.just(_Ids.A),
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.binary(max_size=3),
    st.lists(st.text(max_size=2), max_size=2),
    st.builds(object),
)
"""Thread ids that are no str."""

_READS: dict[str, Any] = {
    "state_at": lambda store, tid: store.state_at(tid),
    "find": lambda store, tid: store.find(tid),
    "load": lambda store, tid: store.load(tid),
    "history": lambda store, tid: store.history(tid),
    "checkpoints": lambda store, tid: store.checkpoints(tid),
    "fork": lambda store, tid: store.fork(tid, at_version=1, new_thread_id="f"),
    "fork.new_thread_id": lambda store, tid: store.fork("t", at_version=1, new_thread_id=tid),
    "tree": lambda store, tid: store.tree(tid),
    "children": lambda store, tid: store.children(tid),
    "path_to_root": lambda store, tid: store.path_to_root(tid),
    "submit": lambda store, tid: store.submit(tid, "hi"),
    "CheckpointSettings": lambda store, tid: CheckpointSettings(store=store, thread_id=tid),
}


@pytest.mark.parametrize("entry", sorted(_READS))
@settings(max_examples=12, deadline=None)
@given(thread_id=not_text)
def test_an_id_that_is_no_str_is_refused_by_every_entry_naming_its_type(
    entry: str, thread_id: object
) -> None:
    """Every public way in that takes a thread id refuses one that is no str with
    ``InvalidThreadIdError`` naming its type: 5 or bytes failed with a bare TypeError
    from uuid5, a list with "unhashable type", and ``CheckpointSettings(thread_id=0)``
    ran as thread "default"."""
    assume(not (thread_id is None and entry == "fork.new_thread_id"))  # None: name one
    with open_store("memory://") as store:
        converse(store, "t")
        with pytest.raises(InvalidThreadIdError, match=type(thread_id).__name__):
            _READS[entry](store, thread_id)
