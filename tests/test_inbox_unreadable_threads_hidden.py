"""A thread that does not read (its review request altered and resealed, as a writer
holding the chain key could) answers a reviewer outside its review's scopes, on the pause
page, its live status and the thread page, as a thread no one made: its refusal names
the review and the altered row. A reviewer the queue lists a pause of it to is told, on
every link of its row, that the thread is damaged; and a thread a later version wrote
says so to everyone: it says nothing of a review."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from covonaut_es import open_store
from covonaut_es.domain import AgentThread
from inbox_support import current, inbox_client, sign_in
from support import append_raw_event
from test_inbox_review_policy import paused_on
from test_inbox_scoped_oracle import altered
from test_review_policy import NO_SCOPE, PAYMENTS

SURFACES = [
    ("/thread", {"id": "{t}"}),
    ("/pause", {"thread": "{t}", "call": "c1"}),
    ("/pause", {"thread": "{t}", "call": "made-up"}),
    ("/pause/status", {"thread": "{t}", "call": "c1", "pause": "x"}),
]


@contextlib.contextmanager
def damaged(tmp_path: Path, token: str) -> Iterator[tuple[Any, str]]:
    """An inbox client signed in with ``token`` on a store whose thread t does not read
    (its review request's digest altered, the chain resealed); and the review's id."""
    path = tmp_path / "store.db"
    rid = altered(path, AgentThread.ReviewRequested, ("request", "digest"), "0" * 64)
    with open_store(f"sqlite:///{path}") as store, inbox_client(store) as client:
        current(client)
        sign_in(client, token)
        yield client, rid


@pytest.mark.parametrize(("path_", "params"), SURFACES)
def test_a_thread_that_does_not_read_reads_as_a_made_up_thread(
    tmp_path: Path, path_: str, params: dict[str, str]
) -> None:
    with damaged(tmp_path, NO_SCOPE) as (client, rid):
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
    with damaged(tmp_path, PAYMENTS) as (client, rid):
        assert rid in client.get("/").text  # listed to her
        page = client.get("/review", params={"id": rid, "thread": "t"})
        assert "that reviewer &#39;carol&#39; may decide" not in page.text, page.text[-600:]


LINKS = [
    ("/thread", {"id": "t"}),  # the row's Thread link, and the review page's
    ("/pause", {"thread": "t", "call": "c1"}),
]


@pytest.mark.parametrize(("path_", "params"), LINKS)
def test_a_listed_reviewer_is_told_the_thread_is_damaged_on_every_link_of_its_row(
    tmp_path: Path, path_: str, params: dict[str, str]
) -> None:
    with damaged(tmp_path, PAYMENTS) as (client, rid):
        inbox = client.get("/").text
        assert rid in inbox and "/thread?id=t" in inbox  # listed to her, with its links
        review = client.get("/review", params={"id": rid, "thread": "t"})
        assert "may decide" not in review.text  # the review page says it is damaged
        page = client.get(path_, params=params)
        assert "may see" not in page.text, (page.status_code, page.text[-500:])


# A thread a newer version wrote to (a rolling upgrade: a newer worker ran it): the
# thread and pause pages of an older inbox say its data is newer than it reads, as the
# review page does, not that there is no such thread.


@pytest.mark.parametrize(
    ("path_", "params"), [("/thread", {"id": "u"}), ("/pause", {"thread": "u", "call": "c1"})]
)
def test_a_thread_a_newer_version_wrote_is_not_shown_as_one_no_one_made(
    tmp_path: Path, path_: str, params: dict[str, str]
) -> None:
    with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        rid = paused_on(store, "u", None)
        newer = msgspec.json.encode({"timestamp": "2026-01-01T00:00:00Z", "turn": 9, "_v": 99})
        append_raw_event(store, "u", AgentThread.TurnStarted.TOPIC, newer)
        with inbox_client(store) as client:
            current(client)
            sign_in(client, NO_SCOPE)
            review = client.get("/review", params={"id": rid, "thread": "u"})
            assert "may decide" not in review.text  # told: the data is newer
            page = client.get(path_, params=params)
            assert "may see" not in page.text, (page.status_code, page.text[-500:])
