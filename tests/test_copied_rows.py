"""Rows copied between threads by a writer of the database who holds no key, in a store
with a cipher key, a chain key or both: a fork shares its parent's pending review, and
the parent's approval (with any run of rows around it) copied into the fork's stream
at its next versions never makes the fork run the approved call. The fork's next save,
before any tool runs, verifies every link since the point of its stream this process
knows to be its own, and refuses (``BrokenChainError``)."""

from __future__ import annotations

import json
import secrets
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ScriptedProvider,
    create_cipher_key,
    open_store,
)
from covonaut_es.errors import BrokenChainError
from covonaut_es.store import Store
from covonaut_es.store._stream_ids import stored_stream
from covonaut_es.tools import Tool
from support import answer, call

CIPHER = create_cipher_key()
CHAIN = "a chain key of the store, 32 characters"
VERIFIER = HmacReviewerVerifier(secrets.token_bytes(32))
KEYS = {
    "cipher": {"cipher_key": CIPHER},
    "chain": {"chain_key": CHAIN},
    "both": {"cipher_key": CIPHER, "chain_key": CHAIN},
}


def _agent(store: Store, thread_id: str, paid: list[str], script: list[Any]) -> Agent:
    def pay(ctx: Any, args: dict[str, Any]) -> str:
        paid.append(thread_id)
        return "paid"

    tool = Tool("pay", "Pay", {"type": "object"}, pay, requires_approval=True, run_on_approval=True)
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=[tool],
            reviewer_verifier=VERIFIER,
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
        )
    )


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, int, int]]:
    """Per keys: a store where A paid once on its approval, and B, forked from A while
    the review was pending, still waits on it; B's head, and A's version at the fork."""
    found = {}
    for name, keys in KEYS.items():
        path = tmp_path_factory.mktemp(name) / "threads.db"
        paid: list[str] = []
        with open_store(f"sqlite:///{path}", **keys) as store:
            arguments = json.dumps({"amount": 500, "to": "mallory"})
            a = _agent(store, "A", paid, [call(("c1", "pay", arguments)), answer("done")])
            a.run("pay mallory 500")
            (review,) = store.load("A").reviews_awaiting
            forked_at = store.load("A").version
            store.fork("A", new_thread_id="B")
            a.approve(review.request.review_id, reviewer=VERIFIER.issue_token("ann", 60))
            a.resume()
            assert paid == ["A"]
            found[name] = (path, store.load("B").version, forked_at)
    return found


@settings(
    max_examples=24, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    keys=st.sampled_from(sorted(KEYS)),
    first=st.integers(1, 12),
    count=st.integers(1, 4),
)
def test_a_run_of_another_threads_rows_copied_in_never_makes_a_fork_pay(
    made: dict[str, tuple[Path, int, int]],
    tmp_path_factory: pytest.TempPathFactory,
    keys: str,
    first: int,
    count: int,
) -> None:
    source, head, forked_at = made[keys]
    path = tmp_path_factory.mktemp("copied") / "threads.db"
    path.write_bytes(source.read_bytes())
    url = f"sqlite:///{path}"
    with open_store(url, **KEYS[keys]) as store:
        recorder = store._app.recorder
        a, b = (stored_stream(recorder, store.load(t).id) for t in ("A", "B"))
    with closing(sqlite3.connect(path)) as conn, conn:
        rows = conn.execute(
            "SELECT topic, state FROM stored_events WHERE originator_id = ? "
            "AND originator_version > ? ORDER BY originator_version",
            (a.bytes, forked_at),
        ).fetchall()
        copied = rows[(first - 1) % len(rows) :][:count]
        for offset, (topic, state) in enumerate(copied, start=1):
            conn.execute(
                "INSERT INTO stored_events (originator_id, originator_version, topic, state) "
                "VALUES (?, ?, ?, ?)",
                (b.bytes, head + offset, topic, state),
            )
    paid: list[str] = []
    with open_store(url, **KEYS[keys]) as store:
        try:
            _agent(store, "B", paid, [answer("done B")]).resume()
        except BrokenChainError:
            pass
        except Exception:  # refused another way (B is not paused any more, say)
            pass
        assert paid == []
        assert not store.verify("B").ok
