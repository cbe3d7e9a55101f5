"""Generated hostile requests to every command of the inbox's JSON API: bodies that are
no JSON object, that hold unknown fields or fields of the wrong type, under any content
type, and paths naming threads, calls and reviews that do not exist. Each is refused
with a 4xx whose JSON names the problem, and nothing stored changes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from covonaut_es import Store, open_store
from covonaut_es.inbox._http import quoted
from inbox_support import current, in_doubt, inbox_client, paused, paused_on_tool
from test_approvals import ALICE

BEARER = {"Authorization": f"Bearer {ALICE}"}

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
NOT_TEXT = JSON.filter(lambda value: not isinstance(value, str))

# command -> (path under the fixture's threads, the fields its body takes, its text fields)
COMMANDS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "approve": (
        "/api/reviews/{review}/approve",
        ("comment", "arguments", "digest"),
        ("comment", "digest"),
    ),
    "reject": (
        "/api/reviews/{review}/reject",
        ("reason", "arguments", "digest"),
        ("reason", "digest"),
    ),
    "respond": (
        "/api/reviews/{review}/respond",
        ("answer", "arguments", "digest"),
        ("answer", "digest"),
    ),
    "answer": ("/api/pauses/ask/c1/answer", ("answer", "pause"), ("answer", "pause")),
    "settle": (
        "/api/pauses/doubt/c1/settle",
        ("ran", "result", "note", "pause"),
        ("result", "note", "pause"),
    ),
    "retry": ("/api/pauses/doubt/c1/retry", ("pause",), ("pause",)),
    "abandon": ("/api/threads/ask/abandon", ("reason", "pause"), ("reason", "pause")),
}

CONTENT_TYPES = st.sampled_from(
    [
        "application/json",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json; charset=latin-1",
    ]
)

BOUNDED = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture
def inbox(tmp_path: Path) -> Iterator[tuple[Store, TestClient, str]]:
    """A SQLite store with a review (``review``), a tool's pause (``ask``) and a call
    in doubt (``doubt``), and the inbox over it."""
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        paused(store, "review", [], [])
        paused_on_tool(store, "ask")
        in_doubt(store, "doubt")
        (review,) = store.state_at("review").reviews
        with inbox_client(store) as client:
            current(client)
            yield store, client, review.request.review_id


def versions(store: Store) -> dict[str, int]:
    return {t: store.state_at(t).version for t in store.thread_ids()}


def refused_bodies(fields: tuple[str, ...], texts: tuple[str, ...]) -> st.SearchStrategy[Any]:
    """Bodies the command must refuse: no object, an unknown field among its own, or
    one of its text fields holding no text."""
    known = st.dictionaries(st.sampled_from(fields), JSON, max_size=3)
    unknown = st.builds(
        lambda body, name, value: {**body, name: value},
        known,
        st.text(min_size=1, max_size=8).filter(lambda name: name not in fields),
        JSON,
    )
    # Null among them: read as a field left out, it would skip the field's check.
    wrong_type = st.builds(
        lambda body, name, value: {**body, name: value}, known, st.sampled_from(texts), NOT_TEXT
    )
    # An edit that is no object, a string holding an object's JSON among them: a JSON
    # body's arguments are its value, never text to read again.
    not_an_object = JSON | st.builds(json.dumps, st.dictionaries(st.text(max_size=4), JSON))
    edit = st.builds(
        lambda body, value: {**body, "arguments": value},
        known,
        not_an_object.filter(lambda value: not isinstance(value, dict) and value is not None),
    )
    refused = [JSON.filter(lambda value: not isinstance(value, dict)), unknown, wrong_type]
    return st.one_of(*refused, *([edit] if "arguments" in fields else []))


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_generated_bodies_a_command_cannot_take_are_400(
    inbox: tuple[Store, TestClient, str], command: str
) -> None:
    """No object, an unknown field, a text field of another type, under any content
    type: 400 with a message, and no thread moves."""
    store, client, review_id = inbox
    path, fields, texts = COMMANDS[command]
    path = path.format(review=review_id)
    before = versions(store)

    @BOUNDED
    @given(body=refused_bodies(fields, texts), content_type=CONTENT_TYPES)
    def refused(body: Any, content_type: str) -> None:
        headers = {**BEARER, "content-type": content_type}
        sent = client.post(path, content=json.dumps(body), headers=headers)
        assert sent.status_code == 400, (body, sent.text)
        assert sent.json()["error"], body
        assert versions(store) == before, body

    refused()


IDS = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=30)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_paths_naming_what_does_not_exist_are_4xx(
    inbox: tuple[Store, TestClient, str], command: str
) -> None:
    """A thread, call or review that does not exist (any text, quoted into the path),
    with a body the command would take: 404 (or 409: no such pause on a thread that
    exists) with a message, and no thread moves."""
    store, client, _ = inbox
    path, _, _ = COMMANDS[command]
    good = {
        "approve": {},
        "reject": {"reason": "no"},
        "respond": {"answer": "done"},
        "answer": {"answer": "acct 9"},
        "settle": {"ran": True, "result": "sent"},
        "retry": {},
        "abandon": {"reason": "gone"},
    }[command]
    before = versions(store)

    @BOUNDED
    @given(missing=IDS.filter(lambda i: i not in ("review", "ask", "doubt", "c1")))
    def refused(missing: str) -> None:
        segment = quoted(missing)
        target = (
            path.format(review=segment)
            .replace("/ask/", f"/{segment}/")
            .replace("/doubt/c1/", f"/doubt/{segment}/")
        )
        sent = client.post(target, json=good, headers=BEARER)
        assert sent.status_code in (404, 409), (missing, target, sent.text)
        assert sent.json()["error"], missing
        assert versions(store) == before, missing

    refused()
