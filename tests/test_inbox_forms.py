"""The pages' forms are read strictly: a field whose bytes are no UTF-8 text, raw or
percent-encoded, is refused (400) whatever form and field carries it, never recorded as
the text a lenient reader makes of it; a form is posted urlencoded (else 415); and text
that is UTF-8 is recorded exactly as typed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote_from_bytes, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from covonaut_es import AgentThread, Store
from inbox_support import current, inbox_client, paused, paused_on_tool, sign_in
from support import is_utf8
from test_approvals import ALICE

OWN = {"Origin": "http://inbox.test"}
FORM = {**OWN, "Content-Type": "application/x-www-form-urlencoded"}


NOT_UTF8 = st.binary(min_size=1, max_size=12).filter(lambda data: not is_utf8(data))


@pytest.fixture
def pages(store: Store) -> Iterator[tuple[Store, TestClient, dict[str, dict[str, str]]]]:
    """The inbox over a thread paused on a review (``t``) and one on a tool's pause
    (``ask``), signed in; each form's valid fields, by path."""
    paused(store, "t", [], [])
    paused_on_tool(store, "ask")
    (review,) = store.state_at("t").reviews
    with inbox_client(store) as client:
        current(client)
        csrf = sign_in(client, ALICE)
        token = client.get("/pause", params={"thread": "ask", "call": "c1"}).text
        pause = token.split('name="pause" value="', 1)[1].split('"', 1)[0]
        forms = {
            "/decide": {
                "csrf": csrf, "review": review.request.review_id, "thread": "t",
                "action": "approve-edited", "arguments": '{"amount": 5, "to": "bob"}',
                "comment": "ok", "digest": review.request.digest,
            },
            "/pause": {
                "csrf": csrf, "thread": "ask", "call": "c1", "pause": pause,
                "action": "answer", "answer": "to the card",
            },
            "/login": {"token": ALICE},
        }  # fmt: skip
        yield store, client, forms


def versions(store: Store) -> dict[str, int]:
    return {t: store.state_at(t).version for t in store.thread_ids()}


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), bad=NOT_UTF8, escaped=st.booleans())
def test_a_field_that_is_no_utf8_text_is_refused_and_nothing_recorded(
    pages: tuple[Store, TestClient, dict[str, dict[str, str]]], data: Any, bad: bytes, escaped: bool
) -> None:
    """Any form, any of its fields (or its name), bytes that are no UTF-8 put in it
    percent-encoded or raw: 400 naming UTF-8, and no thread moves."""
    store, client, forms = pages
    path = data.draw(st.sampled_from(sorted(forms)))
    fields = forms[path]
    name = data.draw(st.sampled_from(sorted(fields)))
    at_name = data.draw(st.booleans())
    before = versions(store)
    hostile = quote_from_bytes(bad).encode() if escaped else bad
    parts = [
        (hostile + b"=" + quote_from_bytes(value.encode()).encode())
        if key == name and at_name
        else (key.encode() + b"=" + quote_from_bytes(value.encode()).encode() + hostile)
        if key == name
        else urlencode({key: value}).encode()
        for key, value in fields.items()
    ]
    sent = client.post(path, content=b"&".join(parts), headers=FORM, follow_redirects=False)
    assert sent.status_code == 400, (path, name, bad, sent.text[-300:])
    assert "UTF-8" in sent.text
    assert versions(store) == before


@pytest.mark.parametrize(
    "content_type",
    ["multipart/form-data; boundary=x", "text/plain", "application/json", ""],
)
def test_a_form_posted_other_than_urlencoded_is_refused(
    pages: tuple[Store, TestClient, dict[str, dict[str, str]]], content_type: str
) -> None:
    """The pages post urlencoded forms only; any other body is 415, nothing recorded."""
    store, client, forms = pages
    before = versions(store)
    for path, fields in forms.items():
        body = urlencode(fields).encode()
        headers = {**OWN, "Content-Type": content_type} if content_type else OWN
        sent = client.post(path, content=body, headers=headers, follow_redirects=False)
        assert sent.status_code == 415, (path, sent.text[-300:])
    assert versions(store) == before


def test_text_typed_in_any_script_is_recorded_as_typed(
    pages: tuple[Store, TestClient, dict[str, dict[str, str]]],
) -> None:
    """UTF-8, percent-encoded as browsers post it or raw: recorded exactly."""
    store, client, forms = pages
    comment, edited = "Genehmigt, für Zoë 支払い ✓", "Zoë 支払い"
    fields = {**forms["/decide"], "comment": comment}
    fields["arguments"] = json.dumps({"amount": 5, "to": edited}, ensure_ascii=False)
    sent = client.post("/decide", content=urlencode(fields).encode(), headers=FORM)
    assert sent.status_code == 200, sent.text[-300:]
    (decided,) = (e for e in store.history("t") if isinstance(e, AgentThread.ReviewDecided))
    assert decided.comment == comment
    assert store.state_at("t").reviews[0].decision.arguments == {"amount": 5, "to": edited}
    answer = "raw: ü ✓"
    raw = urlencode({k: v for k, v in forms["/pause"].items() if k != "answer"}).encode()
    sent = client.post("/pause", content=raw + b"&answer=" + answer.encode(), headers=FORM)
    assert sent.status_code == 200, sent.text[-300:]
    assert any(getattr(e, "answer", None) == answer for e in store.history("ask"))
