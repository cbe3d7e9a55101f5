"""Thread ids follow one rule on every back end, checked wherever a thread is created."""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import Store
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
