"""The inbox's JSON API and the command line refuse a person's submission alike: the
same fields, sent to each surface on twin threads, are recorded by both or refused by
both with the same message, since both read them through the service layer."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from covonaut_es import HmacReviewerVerifier, Store, open_store
from covonaut_es.cli import main
from covonaut_es.inbox import create_app
from inbox_support import paused, paused_on_tool

SECRET = "surfaces-alike-" + "s" * 32
VERIFIER = HmacReviewerVerifier(SECRET)
TOKEN = VERIFIER.issue_token("rita", ttl_seconds=3600)

TEXTS = ["", " ", "\u200b", "\x00", "ok", "\u202eevil", "x" * 10_001]
ARGUMENTS = [
    "null", "{}", '{"amount": 40, "to": "bob"}', '{"amount": 41, "to": "bob"}', "[1]", "7",
    # the JSON of a string holding an object's JSON: a string, on every surface
    json.dumps('{"amount": 41, "to": "bob"}'), '"x"',
]  # fmt: skip
DIGESTS = ["", " ", "\u200b", "0" * 64, "REAL"]


@contextlib.contextmanager
def surfaces(tmp_path: Path) -> Iterator[tuple[Store, TestClient, str]]:
    """A SQLite store, the inbox over it and its URL for the command line."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with (
        open_store(url) as store,
        TestClient(create_app(store, VERIFIER), base_url="http://inbox.test") as client,
        patch.dict(os.environ, {"COVONAUT_ES_REVIEWER_SECRET": SECRET}),
    ):
        yield store, client, url


def via_cli(*argv: str) -> tuple[bool, str]:
    """Run the command line in this process: whether it succeeded, and its refusal."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(list(argv))
    message = err.getvalue().strip()
    return status == 0, message.partition(": ")[2]


def via_api(client: TestClient, path: str, body: str) -> tuple[bool, str]:
    """POST ``body`` (JSON text) to the inbox: whether it succeeded, and its refusal."""
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    answer = client.post(path, content=body.encode("utf-8", "surrogatepass"), headers=headers)
    assert answer.status_code in (200, 400, 403, 409), answer.text
    return answer.status_code == 200, "" if answer.status_code == 200 else answer.json()["error"]


def same(outcome: tuple[bool, str], review_id: str, thread_id: str) -> tuple[bool, str]:
    """An outcome with the twin's own review and thread ids written alike."""
    recorded, message = outcome
    if review_id:
        message = message.replace(review_id, "REVIEW")
    return recorded, message.replace(repr(thread_id), "THREAD")


FIELD_NAMES = {"approve": "comment", "reject": "reason", "respond": "answer"}


@settings(
    max_examples=int(os.environ.get("ALIKE_EXAMPLES", "30")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    action=st.sampled_from(sorted(FIELD_NAMES)),
    text=st.none() | st.sampled_from(TEXTS),
    arguments=st.none() | st.sampled_from(ARGUMENTS),
    digest=st.none() | st.sampled_from(DIGESTS),
)
def test_a_decision_is_refused_alike_by_the_inbox_and_the_command_line(
    tmp_path_factory: pytest.TempPathFactory,
    action: str,
    text: str | None,
    arguments: str | None,
    digest: str | None,
) -> None:
    """Each field left out, sent empty, blank, null or of the wrong shape: the API and
    the command line both record the decision, or both refuse it with one message."""
    with surfaces(tmp_path_factory.mktemp("alike")) as (store, client, url):
        paused(store, "api", [], [])
        paused(store, "cli", [], [])
        review_id, on_cli = (store.state_at(t).pauses[0].interrupt.data for t in ("api", "cli"))
        digest = review_id["digest"] if digest == "REAL" else digest
        parts = []
        argv = [action, on_cli["review_id"], "--store", url, "--reviewer-token", TOKEN]
        name = FIELD_NAMES[action]
        if text is not None:
            parts.append(f"{json.dumps(name)}: {json.dumps(text)}")
            argv += [f"--{name}", text]
        if arguments is not None:
            parts.append(f'"arguments": {arguments}')
            argv += ["--arguments", arguments]
        if digest is not None:
            parts.append(f'"digest": {json.dumps(digest)}')
            argv += ["--digest", digest]
        path = f"/api/reviews/{review_id['review_id']}/{action}"
        api = via_api(client, path, "{" + ", ".join(parts) + "}")
        if arguments is not None and action != "approve":
            return  # the CLI has no --arguments on reject and respond: argparse refuses
        cli = via_cli(*argv)
        assert same(api, review_id["review_id"], "api") == same(cli, on_cli["review_id"], "cli")


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(reason=st.none() | st.sampled_from(TEXTS))
def test_giving_a_thread_up_is_refused_alike_by_the_inbox_and_the_command_line(
    tmp_path_factory: pytest.TempPathFactory, reason: str | None
) -> None:
    """A reason left out, empty, blank or too long: both surfaces refuse it with one
    message (a person says why they give a thread up), or both record it."""
    with surfaces(tmp_path_factory.mktemp("abandon")) as (store, client, url):
        paused_on_tool(store, "api")
        paused_on_tool(store, "cli")
        body: dict[str, Any] = {} if reason is None else {"reason": reason}
        api = via_api(client, "/api/threads/api/abandon", json.dumps(body))
        given_reason = [] if reason is None else ["--reason", reason]
        cli = via_cli("abandon", "cli", "--store", url, "--reviewer-token", TOKEN, *given_reason)
        assert same(api, "", "api") == same(cli, "", "cli")


@pytest.mark.parametrize(
    ("action", "field"),
    [(action, field) for action in sorted(FIELD_NAMES) for field in ("text", "digest")]
    + [("approve", "arguments")],
)
def test_a_decision_field_sent_as_null_is_refused_never_read_as_left_out(
    tmp_path_factory: pytest.TempPathFactory, action: str, field: str
) -> None:
    """Every field of a decision sent as JSON null: 400 naming it, nothing recorded; a
    null digest read as none sent would skip the check of the operation."""
    with surfaces(tmp_path_factory.mktemp("null")) as (store, client, _):
        paused(store, "api", [], [])
        data = store.state_at("api").pauses[0].interrupt.data
        name = FIELD_NAMES[action] if field == "text" else field
        body = {"digest": data["digest"], name: None}
        before = store.head_version("api")
        recorded, message = via_api(
            client, f"/api/reviews/{data['review_id']}/{action}", json.dumps(body)
        )
        assert not recorded
        assert "null" in message or "NoneType" in message, message
        assert store.head_version("api") == before
