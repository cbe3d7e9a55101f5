"""A thread that does not read (its review request altered and resealed, as a writer
holding the chain key could) answers a reviewer outside its review's scopes, on the pause
page, its live status and the thread page, as a thread no one made: its refusal names
the review and the altered row. A reviewer the queue lists the review to is told the
thread is damaged."""

from __future__ import annotations

from pathlib import Path

import pytest

from covonaut_es import open_store
from covonaut_es.domain import AgentThread
from inbox_support import current, inbox_client, sign_in
from test_inbox_scoped_oracle import altered
from test_review_policy import NO_SCOPE, PAYMENTS

SURFACES = [
    ("/thread", {"id": "{t}"}),
    ("/pause", {"thread": "{t}", "call": "c1"}),
    ("/pause", {"thread": "{t}", "call": "made-up"}),
    ("/pause/status", {"thread": "{t}", "call": "c1", "pause": "x"}),
]


@pytest.mark.parametrize(("path_", "params"), SURFACES)
def test_a_thread_that_does_not_read_reads_as_a_made_up_thread(
    tmp_path: Path, path_: str, params: dict[str, str]
) -> None:
    path = tmp_path / "store.db"
    rid = altered(path, AgentThread.ReviewRequested, ("request", "digest"), "0" * 64)
    with open_store(f"sqlite:///{path}") as store, inbox_client(store) as client:
        current(client)
        sign_in(client, NO_SCOPE)
        real = client.get(path_, params={k: v.format(t="t") for k, v in params.items()})
        fake = client.get(path_, params={k: v.format(t="q") for k, v in params.items()})
        assert rid not in real.text, real.text[:400]
        swapped = real.text.replace("'t'", "'q'").replace("&#39;t&#39;", "&#39;q&#39;")
        assert (real.status_code, swapped) == (fake.status_code, fake.text)


def test_a_reviewer_listed_a_damaged_review_is_told_it_is_damaged(
    tmp_path: Path,
) -> None:
    """Carol holds 'payments': the list shows her the review (the queue's copy reads),
    so its page tells her what deciding it would: its thread is damaged, not that there
    is no review she may decide."""
    path = tmp_path / "store.db"
    rid = altered(path, AgentThread.ReviewRequested, ("request", "digest"), "0" * 64)
    with open_store(f"sqlite:///{path}") as store, inbox_client(store) as client:
        current(client)
        sign_in(client, PAYMENTS)
        assert rid in client.get("/").text  # listed to her
        page = client.get("/review", params={"id": rid, "thread": "t"})
        assert "that reviewer &#39;carol&#39; may decide" not in page.text, page.text[-600:]
