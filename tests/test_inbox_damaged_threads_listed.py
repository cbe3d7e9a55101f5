"""A reviewer the inbox lists a damaged thread's review to (it is in their scopes) is told
the thread does not read on every link of its row (the review page, the thread page, the
pause page), not that there is no such thread; and a thread a later version wrote says
so to everyone, as the review page does: it says nothing of a review."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from covonaut_es import open_store
from covonaut_es.domain import AgentThread
from inbox_support import current, inbox_client, sign_in
from support import append_raw_event
from test_inbox_review_policy import paused_on
from test_inbox_scoped_oracle import altered
from test_review_policy import NO_SCOPE, PAYMENTS

LINKS = [
    ("/thread", {"id": "t"}),  # the row's Thread link, and the review page's
    ("/pause", {"thread": "t", "call": "c1"}),
]


@pytest.mark.parametrize(("path_", "params"), LINKS)
def test_a_listed_reviewer_is_told_the_thread_is_damaged_on_every_link_of_its_row(
    tmp_path: Path, path_: str, params: dict[str, str]
) -> None:
    path = tmp_path / "store.db"
    rid = altered(path, AgentThread.ReviewRequested, ("request", "digest"), "0" * 64)
    with open_store(f"sqlite:///{path}") as store, inbox_client(store) as client:
        current(client)
        sign_in(client, PAYMENTS)
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
