"""The inbox at the edges of its process: another process holding the store's write lock
is a typed 503 with ``Retry-After`` (the command line names the lock too) and loses
nothing; a client that hangs up mid-body is one line at INFO, no traceback; and
sessions are bounded in memory."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from covonaut_es import HmacReviewerVerifier, open_store
from covonaut_es.cli import main
from covonaut_es.inbox import create_app
from covonaut_es.inbox._sessions import Sessions
from covonaut_es.store import _urls
from inbox_support import paused

SECRET = "inbox-edges-" + "e" * 32
VERIFIER = HmacReviewerVerifier(SECRET)
RITA = VERIFIER.issue_token("rita", ttl_seconds=3600)


def test_a_decision_while_another_process_holds_the_write_lock_is_503_and_lost_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another connection holds SQLite's write lock past the store's wait, the
    API answers 503 with ``Retry-After`` and a message naming the lock, the command line
    exits 2 naming it (not a damaged store), nothing is recorded; once the lock is gone
    the same requests record the decisions."""
    monkeypatch.setattr(_urls, "SQLITE_LOCK_WAIT_S", 2)  # the wait's length changes nothing
    path = tmp_path / "threads.db"
    url = f"sqlite:///{path}"
    with open_store(url) as store:
        paused(store, "api", [], [])
        paused(store, "cli", [], [])
        ids = {t: store.state_at(t).pauses[0].interrupt.data["review_id"] for t in ("api", "cli")}
        versions = {t: store.state_at(t).version for t in ids}
        client = TestClient(create_app(store, VERIFIER), base_url="http://inbox.test")
        with client, patch.dict(os.environ, {"COVONAUT_ES_REVIEWER_SECRET": SECRET}):
            lock = sqlite3.connect(path, isolation_level=None)
            lock.execute("BEGIN EXCLUSIVE")
            answers: dict[str, Any] = {}
            err = io.StringIO()

            def over_cli() -> None:
                argv = ["approve", ids["cli"], "--store", url, "--reviewer-token", RITA]
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    answers["cli"] = main([*argv, "--thread", "cli"])

            cli = threading.Thread(target=over_cli)
            cli.start()
            headers = {"Authorization": f"Bearer {RITA}"}
            api_url = f"/api/reviews/{ids['api']}/approve"
            answers["api"] = client.post(api_url, headers=headers, json={})
            cli.join()
            lock.execute("ROLLBACK")
            lock.close()
            busy = answers["api"]
            assert busy.status_code == 503, busy.text
            assert busy.headers["Retry-After"] == "5"
            assert "locked by another writer" in busy.json()["error"]
            assert answers["cli"] == 2
            assert "locked by another writer" in err.getvalue()
            assert "expected a covonaut-es store" not in err.getvalue()
            assert {t: store.state_at(t).version for t in ids} == versions
            assert client.post(api_url, headers=headers, json={}).status_code == 200
            with contextlib.redirect_stdout(io.StringIO()):
                assert main(["approve", ids["cli"], "--store", url, "--reviewer-token", RITA]) == 0


def test_a_client_that_hangs_up_mid_body_is_logged_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A sign-in and an API call whose client hangs up before its body arrived
    whole: one INFO line each, no ERROR and no traceback, and nothing raised out of the
    application."""
    app = create_app(open_store("memory://hang-up"), VERIFIER)

    async def hang_up(path: str, headers: list[tuple[bytes, bytes]]) -> list[Any]:
        sent: list[Any] = []
        messages = iter([{"type": "http.request", "body": b"token=", "more_body": True}])

        async def receive() -> Any:
            return next(messages, {"type": "http.disconnect"})

        async def send(message: Any) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"inbox.test"), (b"content-length", b"100"), *headers],
            "client": ("127.0.0.1", 50000),
            "server": ("inbox.test", 80),
        }
        await app(scope, receive, send)
        return sent

    form = [(b"content-type", b"application/x-www-form-urlencoded")]
    bearer = [(b"authorization", f"Bearer {RITA}".encode())]
    with caplog.at_level(logging.INFO):
        asyncio.run(hang_up("/login", form))
        asyncio.run(hang_up("/api/reviews/r1/approve", bearer))
    gone = [r for r in caplog.records if "hung up" in r.getMessage()]
    assert len(gone) == 2 and all(r.levelno == logging.INFO and not r.exc_info for r in gone)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_signing_in_past_the_bound_ends_the_oldest_session() -> None:
    """Sessions are kept up to their bound: one more sign-in ends the oldest, and the
    others stay open."""
    sessions = Sessions(3600, max_open=3)
    opened = [sessions.open(RITA, "rita") for _ in range(4)]
    assert sessions.get(opened[0].session_id) is None
    assert all(sessions.get(s.session_id) == s for s in opened[1:])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(["rita", "sam", "mallory"]), max_size=40))
def test_one_reviewers_sign_ins_never_end_another_reviewers_session(signing_in: list[str]) -> None:
    """Whoever signs in, however often: each reviewer keeps their newest sessions, up to
    their own bound, and a session ends only by its own reviewer's later sign-ins."""
    sessions = Sessions(3600, max_per_reviewer=3)
    opened = [(reviewer, sessions.open(RITA, reviewer)) for reviewer in signing_in]
    for index, (reviewer, session) in enumerate(opened):
        later = sum(1 for other, _ in opened[index + 1 :] if other == reviewer)
        assert (sessions.get(session.session_id) is not None) == (later < 3)
