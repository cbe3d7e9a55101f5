"""A PostgreSQL store whose log's sequence an operator set back to number after every
row (``setval(seq, n, false)``, ``ALTER SEQUENCE ... RESTART WITH n``: the usual
repairs, after which the sequence has issued nothing) opens and is followed as before:
the check of the log's end (ADR 0113) cannot tell what such a sequence issues next, and
leaves it unchecked, where it refused the store (helper-137)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from covonaut_es import Message, Role, Store, open_store
from covonaut_es.domain import AgentThread
from covonaut_es.errors import StoredRowError
from support import ticking_clock

pytestmark = pytest.mark.postgres

SEQUENCE = "pg_get_serial_sequence('covonaut_events', 'notification_id')"

REPAIRS = {
    "setval, not called": f"SELECT setval({SEQUENCE}, (SELECT max(notification_id) + {{ahead}} "
    "FROM covonaut_events), false)",
    "restart": "ALTER SEQUENCE covonaut_events_notification_id_seq RESTART WITH {next}",
}


@pytest.fixture
def store(shared_url: str) -> Iterator[Store]:
    with open_store(shared_url) as opened:
        yield opened


@pytest.mark.parametrize("shared_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("repair", sorted(REPAIRS))
@pytest.mark.parametrize("ahead", [1, 1000])
def test_a_sequence_set_to_number_after_every_row_opens_and_is_followed(
    store: Store, repair: str, ahead: int
) -> None:
    now = ticking_clock()
    store.save(AgentThread.start("before", now=now()))
    with psycopg.connect(store.url, autocommit=True) as conn:
        row = conn.execute("SELECT max(notification_id) FROM covonaut_events").fetchone()
        assert row is not None
        conn.execute(REPAIRS[repair].format(ahead=ahead, next=row[0] + ahead))
    with open_store(store.url) as reopened:
        end = reopened.last_log_position()
        reopened.save(AgentThread.start("after", now=now()))
        assert reopened.exists("after")
        assert reopened.last_log_position() > end


@pytest.mark.parametrize("shared_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("behind", [1, 2, 4])
def test_a_sequence_set_back_under_an_open_store_refuses_saves_naming_it(
    store: Store, behind: int
) -> None:
    """The log's sequence set back behind its rows while a store stays open
    (helper-156): each save that is numbered onto a row already there is refused with
    StoredRowError saying the sequence is behind, never ThreadConflictError, whose
    "another writer" would send a retry that spends a number each time; nothing is
    stored, and once the sequence is set past the log the save goes through."""
    now = ticking_clock()
    for n in range(5):
        store.save(AgentThread.start(f"t{n}", now=now()))
    with psycopg.connect(store.url, autocommit=True) as conn:
        row = conn.execute("SELECT max(notification_id) FROM covonaut_events").fetchone()
        assert row is not None
        conn.execute(f"SELECT setval({SEQUENCE}, {row[0] - behind}, true)")

    def greeted() -> AgentThread:
        thread = store.load("t0")
        thread.append_message(Message(Role.USER, "hello"), now=now())
        return thread

    for _ in range(behind):
        with pytest.raises(StoredRowError, match="sequence numbers new events behind rows"):
            store.save(greeted())
    assert store.load("t0").version == 1
    store.save(greeted())
    assert store.load("t0").version == 2
