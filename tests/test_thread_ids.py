"""Thread ids follow one rule on every back end, checked wherever a thread is created."""

from __future__ import annotations

import enum
import json
import re
import unicodedata
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from covonaut_es import CheckpointSettings, Store, open_store
from covonaut_es._text import printable
from covonaut_es.audit import export_thread, import_threads
from covonaut_es.domain import AgentThread, check_thread_id
from covonaut_es.errors import InvalidThreadIdError
from support import HIDDEN, agent_on, answer, conversation, converse, earlier_thread_id_rule

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
    pytest.param("pay\u00a0ment", id="no-break-space"),
    pytest.param("pay\u3000ment", id="ideographic-space"),
    pytest.param("pay\u2028ment", id="line-separator"),
    pytest.param("pay\u2029ment", id="paragraph-separator"),
    pytest.param("payment\u3164", id="hangul-filler"),
    pytest.param("pay\u2800ment", id="braille-blank"),
    pytest.param("pay\ufe0fment", id="variation-selector"),
    pytest.param("pay\ue000ment", id="private-use"),
    pytest.param("pay\U000e0001ment", id="language-tag"),
    pytest.param("pay\u0378ment", id="unassigned"),
    pytest.param("t1 ", id="trailing-space"),
    pytest.param(" t1", id="leading-space"),
    pytest.param("   ", id="only-spaces"),
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
    format character: of two ids that render alike by composition, a zero-width
    character or a space at either end (which a table's padding hides, helper-243), at
    most one is ever accepted, so they cannot name two threads."""
    try:
        accepted = check_thread_id(text)
    except InvalidThreadIdError as exc:
        assert "thread id" in str(exc)
        return
    assert unicodedata.is_normalized("NFC", accepted)
    assert printable(accepted) == accepted  # shows as itself: nothing hidden, nothing escaped
    alike = {unicodedata.normalize("NFD", accepted), accepted + "\u200b"}
    alike |= {accepted + " ", " " + accepted}
    for look_alike in alike - {accepted}:
        with pytest.raises(InvalidThreadIdError):
            check_thread_id(look_alike)


@settings(max_examples=50, deadline=None)
@given(
    st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=8),
    HIDDEN,
    st.integers(min_value=0, max_value=8),
)
def test_no_new_id_holds_a_character_that_shows_nothing(
    visible: str, hidden: str, where: int
) -> None:
    """A character that shows nothing or is not printable, anywhere in an id, makes it
    no new thread's id, and the error names the character and its position: a no-break
    space, a line separator, an ideographic space and a trailing Hangul filler were
    accepted, so two new threads could be named alike."""
    visible = unicodedata.normalize("NFC", visible)
    where = min(where, len(visible))
    thread_id = visible[:where] + hidden + visible[where:]
    assume(unicodedata.is_normalized("NFC", thread_id))
    with pytest.raises(InvalidThreadIdError, match=f"{re.escape(repr(hidden))} at position"):
        check_thread_id(thread_id)


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
    converse(store, "good")
    lines = [json.loads(line) for line in list(export_thread(store, "good"))[:-1]]
    hostile = [json.dumps({**line, "thread_id": "bad\nid"}) for line in lines]
    with pytest.raises(InvalidThreadIdError, match=r"'\\n' at position 3"):
        import_threads(store, hostile)
    assert list(store.thread_ids()) == ["good"]


LEGACY_IDS = ["pay\u00a0ment", "pay\u2028ment", "payment\u3164", "pay\ue000ment"]
"""Ids earlier versions let a new thread take, which no new thread may take now."""


@pytest.mark.parametrize("thread_id", LEGACY_IDS)
def test_a_thread_stored_under_an_id_accepted_before_still_works(
    store: Store, thread_id: str
) -> None:
    """A thread an earlier version started under an id the rule now refuses loads,
    is listed, runs on, verifies, exports, takes submissions and forks under a new id; only a
    new thread (started, forked or imported) under such an id is refused."""
    with earlier_thread_id_rule():
        conversation(store, thread_id, 1)
    agent_on(store, thread_id, [answer("again")]).run("more")  # a run goes on with it
    assert store.load(thread_id).thread_id == thread_id
    assert thread_id in list(store.thread_ids())
    assert store.verify(thread_id).ok
    lines = list(export_thread(store, thread_id))
    assert store.submit(thread_id, "again") == 1
    store.fork(thread_id, new_thread_id="payment-2")
    assert store.load("payment-2").thread_id == "payment-2"
    with pytest.raises(InvalidThreadIdError, match="a new thread's id"):
        store.fork("payment-2", new_thread_id=thread_id + "2")
    with pytest.raises(InvalidThreadIdError, match="a new thread's id"):
        store.submit(thread_id + "2", "hi")
    with open_store("memory://") as other, pytest.raises(InvalidThreadIdError):
        import_threads(other, lines)


@settings(max_examples=50, deadline=None)
@given(
    st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=8),
    HIDDEN,
    st.sampled_from(["Store.submit", "store.submissions.submit", "store.log.insert_threads"]),
)
def test_every_door_to_a_new_thread_refuses_a_bad_id_alike(
    visible: str, hidden: str, door: str
) -> None:
    """A submission to a thread the store does not hold, through the store or its
    ``submissions`` port, and the write of an import through its ``log`` port, refuse
    an id no new thread may have, and write nothing: the port took it, and a worker then
    failed on it at every step (helper-167)."""
    thread_id = unicodedata.normalize("NFC", visible + hidden)
    with open_store("memory://") as store:
        converse(store, "good")
        records, end = store.log.stored_records("good"), store.last_log_position()
        doors = {
            "Store.submit": lambda: store.submit(thread_id, "hi"),
            "store.submissions.submit": lambda: store.submissions.submit(thread_id, "hi"),
            "store.log.insert_threads": lambda: store.log.insert_threads({thread_id: records}),
        }
        with pytest.raises(InvalidThreadIdError, match="thread id"):
            doors[door]()
        assert store.last_log_position() == end


def test_the_submissions_port_takes_input_for_a_thread_stored_under_an_earlier_id(
    store: Store,
) -> None:
    """``store.submissions.submit`` checks a new thread's id only: a thread an earlier
    version stored under an id the rule now refuses still takes submissions."""
    with earlier_thread_id_rule():
        conversation(store, LEGACY_IDS[0], 1)
    assert store.submissions.submit(LEGACY_IDS[0], "again") == 1


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


@settings(max_examples=40, deadline=None)
@given(st.text(min_size=1, max_size=200) | st.sampled_from([" lead", "x" * 200, *LEGACY_IDS]))
def test_a_fork_given_no_id_gets_a_new_threads_id_whatever_its_parents(text: str) -> None:
    """Whatever id a thread is stored under (an earlier version's rule), a fork of it
    given no id gets one a new thread may have: the default took the parent's id as it
    was, so a parent whose id begins with a space, holds what shows nothing, or has 200
    characters could not be forked without ``new_thread_id`` (helper-246)."""
    try:
        parent = check_thread_id(text, new=False)
    except InvalidThreadIdError:
        return
    with open_store("memory://") as store:
        with earlier_thread_id_rule():
            conversation(store, parent, 1)
        forked = store.fork(parent)
        assert check_thread_id(forked) == forked
        assert store.parent(forked).thread_id == parent  # type: ignore[union-attr]
