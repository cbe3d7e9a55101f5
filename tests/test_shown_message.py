"""What a reviewer or a chat user is told of an error names no store location, and
reads as a sentence: the store names itself ``store URL`` (a failed save, a closed
store) or ``in store URL`` (a thread not found), and the URL alone replaced made it
"store the store failed (...)" (helper-247)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import OperationalError

from covonaut_es import open_store
from covonaut_es.errors import CovonautError
from covonaut_es.service import shown_message
from covonaut_es.store._application import AgentApplication
from inbox_support import current, inbox_client, paused
from test_approvals import ALICE

TEMPLATES = [
    "store {url} failed (database or disk is full): thread 't' was not saved",
    "store {url} is closed",
    "thread 't' not found in store {url}",
    "{url}: the file was replaced",
    "cannot read {url} (store {url} failed)",
]


@pytest.mark.parametrize("template", TEMPLATES)
@pytest.mark.parametrize("store_url", ["sqlite:///{tmp}/threads.db", "memory://"])
def test_an_error_shown_names_no_store_and_reads_as_a_sentence(
    tmp_path: Path, template: str, store_url: str
) -> None:
    with open_store(store_url.format(tmp=tmp_path)) as store:
        shown = shown_message(CovonautError(template.format(url=store.url)), store)
        assert store.url not in shown, shown
        assert "store the store" not in shown and "the store" in shown, shown


def test_a_decision_the_store_could_not_save_reads_as_a_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database's own error, raised where the save writes (a full disk, a server
    gone), is a 503 whose message says what failed, without the store's location."""
    auth = {"Authorization": f"Bearer {ALICE}"}
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        paused(store, "t", [], [])
        with inbox_client(store) as client:
            current(client)
            (review,) = client.get("/api/reviews", headers=auth).json()

            def full(self: Any, *args: Any, **kwargs: Any) -> Any:
                raise OperationalError("database or disk is full")

            monkeypatch.setattr(AgentApplication, "save", full)
            response = client.post(
                f"/api/reviews/{review['review_id']}/approve", headers=auth, json={}
            )
            assert response.status_code == 503
            message = response.json()["error"]
            assert "database or disk is full" in message
            assert "store the store" not in message and str(tmp_path) not in message, message
