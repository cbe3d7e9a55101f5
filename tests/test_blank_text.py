"""A reason, an answer or a result that shows nothing is blank on every surface: the
service, the command line, the inbox's forms and its JSON API all refuse text made of
invisible characters only (zero-width spaces, word joiners, byte order marks, other
format and control characters, combining marks alone, Unicode spaces), record nothing,
and accept the same text with one visible character in it."""

from __future__ import annotations

import itertools
import re
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from covonaut_es import Store, open_store
from covonaut_es.cli import main
from covonaut_es.errors import InvalidDecisionError
from covonaut_es.inbox import create_app
from covonaut_es.service import (
    Action,
    HmacReviewerVerifier,
    Settlement,
    ThreadService,
    pause_token,
    person_text,
    review_submission,
)
from inbox_support import in_doubt, paused, paused_on_tool

SECRET = secrets.token_hex(32)
VERIFIER = HmacReviewerVerifier(SECRET.encode())
OWN = {"Origin": "http://inbox.test"}

INVISIBLE = st.one_of(
    st.characters(categories=("Cc", "Cf", "Mn", "Me", "Zs", "Zl", "Zp")),
    st.sampled_from("\u200b\u2060\ufeff\u00a0\u3000\u180e\u034f\ufe0f\u115f\u3164\u2800\u00ad"),
)
"""Characters that show nothing alone."""
BLANK = st.lists(INVISIBLE, min_size=0, max_size=12).map("".join)
VISIBLE = st.characters(categories=("L", "N", "P", "S")).filter(
    lambda c: c not in "\u115f\u1160\u3164\uffa0\u2800"  # letters drawn as empty space
)


@st.composite
def shows_one_character(draw: st.DrawFn) -> str:
    """Invisible characters with one visible character among them."""
    around = draw(st.lists(INVISIBLE, max_size=8))
    at = draw(st.integers(0, len(around)))
    return "".join([*around[:at], draw(VISIBLE), *around[at:]])


BOUNDED = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


class World:
    """A SQLite store with a thread paused on each kind of pause, the inbox over it
    (signed in, with the API's bearer token) and the command line on it."""

    def __init__(self, url: str, store: Store, client: TestClient, csrf: str) -> None:
        self.url, self.store, self.client, self.csrf = url, store, client, csrf
        self.token = VERIFIER.issue_token("rita", ttl_seconds=600)
        self.service = ThreadService(store, verifier=VERIFIER)
        self._numbers = itertools.count()

    def fresh(self, action: str) -> dict[str, str]:
        """A new thread with the pause ``action`` acts on: a review to reject or respond
        to, a tool's pause to answer, a call in doubt to settle."""
        thread_id = f"{action}-{next(self._numbers)}"
        if action in ("answer", "abandon"):
            paused_on_tool(self.store, thread_id)
            return {"ask": thread_id}
        if action == "settle":
            in_doubt(self.store, thread_id)
            return {"doubt": thread_id}
        paused(self.store, thread_id, [], [])
        (review,) = self.store.state_at(thread_id).reviews
        return {"review": thread_id, "review_id": review.request.review_id}

    def versions(self) -> dict[str, int]:
        return {t: self.store.state_at(t).version for t in self.store.thread_ids()}


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    monkeypatch.setenv("COVONAUT_ES_REVIEWER_SECRET", SECRET)
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with (
        open_store(url) as store,
        TestClient(create_app(store, VERIFIER), base_url="http://inbox.test") as client,
    ):
        token = VERIFIER.issue_token("rita", ttl_seconds=600)
        signed = client.post("/login", data={"token": token}, headers=OWN)
        match = re.search(r'name="csrf" value="([^"]+)"', signed.text)
        assert match is not None
        yield World(url, store, client, match.group(1))


Submit = Callable[[World, dict[str, str], str], bool]
"""Submit ``text`` on one surface to the pauses of ``ids``; whether it was recorded."""


def _service(action: str) -> Submit:
    def submit(world: World, ids: dict[str, str], text: str) -> bool:
        reviewer = world.service.reviewer(world.token)
        try:
            if action in ("reject", "respond"):
                submission = review_submission(action, text=text)
                world.service.decide(ids["review_id"], submission, reviewer=reviewer)
            elif action == "answer":
                world.service.answer(ids["ask"], "c1", text, reviewer=reviewer)
            else:
                world.service.settle(ids["doubt"], "c1", Settlement.ran_with(text))
        except InvalidDecisionError as exc:
            assert "must not be empty" in str(exc)
            return False
        return True

    return submit


def _cli(action: str) -> Submit:
    def submit(world: World, ids: dict[str, str], text: str) -> bool:
        option, ids_given = {
            "reject": ("--reason", ("review_id",)),
            "respond": ("--answer", ("review_id",)),
            "answer": ("--answer", ("ask",)),
            "settle": ("--result", ("doubt",)),
        }[action]
        call = () if action in ("reject", "respond") else ("c1",)
        given_ids = [*(ids[name] for name in ids_given), *call]
        # the options, then "--" and the ids: a text or an id may begin with "-"
        full = [action, f"{option}={text}", "--store", world.url, "--json"]
        try:
            status = main([*full, "--reviewer-token", world.token, "--", *given_ids])
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 2
        return status == 0

    return submit


def _form(action: str) -> Submit:
    def submit(world: World, ids: dict[str, str], text: str) -> bool:
        csrf = {"csrf": world.csrf}
        if action in ("reject", "respond"):
            field = "reason" if action == "reject" else "answer"
            data = {**csrf, "review": ids["review_id"], "action": action, field: text}
            response = world.client.post("/decide", data=data, headers=OWN)
        else:
            thread = ids["doubt"] if action == "settle" else ids["ask"]
            name, field = {
                "answer": ("answer", "answer"),
                "settle": ("ran", "result"),
                "abandon": ("abandon", "reason"),
            }[action]
            call = "c1"
            (pause,) = [p for p in world.store.state_at(thread).pauses if not p.resolved]
            token = pause_token(world.store.state_at(thread).messages, pause)
            data = {**csrf, "thread": thread, "call": call, "action": name, field: text}
            data["pause"] = token
            response = world.client.post("/pause", data=data, headers=OWN)
        if response.status_code == 200:
            return True  # the redirect to the page of what was recorded, followed
        assert response.status_code == 400, response.text
        assert "must not be empty" in response.text
        return False

    return submit


def _api(action: str) -> Submit:
    def submit(world: World, ids: dict[str, str], text: str) -> bool:
        headers = {"Authorization": f"Bearer {world.token}"}
        if action in ("reject", "respond"):
            field = "reason" if action == "reject" else "answer"
            path = f"/api/reviews/{ids['review_id']}/{action}"
            response = world.client.post(path, json={field: text}, headers=headers)
        elif action == "answer":
            path = f"/api/pauses/{ids['ask']}/c1/answer"
            response = world.client.post(path, json={"answer": text}, headers=headers)
        elif action == "abandon":  # the inbox asks why a thread is given up
            path = f"/api/threads/{ids['ask']}/abandon"
            response = world.client.post(path, json={"reason": text}, headers=headers)
        else:
            path = f"/api/pauses/{ids['doubt']}/c1/settle"
            body = {"ran": True, "result": text}
            response = world.client.post(path, json=body, headers=headers)
        if response.status_code == 200:
            return True
        assert response.status_code == 400, response.text
        assert "must not be empty" in response.json()["error"]
        return False

    return submit


ACTIONS = ("reject", "respond", "answer", "settle")
SURFACES: dict[str, Callable[[str], Submit]] = {
    "service": _service,
    "cli": _cli,
    "form": _form,
    "api": _api,
}
CASES = [(surface, action) for surface in SURFACES for action in ACTIONS]
CASES += [("form", "abandon"), ("api", "abandon")]


@pytest.mark.parametrize(("surface", "action"), CASES)
def test_text_that_shows_nothing_is_refused_and_records_nothing(
    world: World, surface: str, action: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Invisible characters only: refused as empty, on every surface, for every text
    a decision needs; no thread moves."""
    ids = world.fresh(action)
    submit = SURFACES[surface](action)

    @BOUNDED
    @given(text=BLANK)
    def refused(text: str) -> None:
        before = world.versions()
        assert not submit(world, ids, text), repr(text)
        assert world.versions() == before, repr(text)

    refused()


@pytest.mark.parametrize(("surface", "action"), CASES)
def test_text_with_one_visible_character_is_accepted(
    world: World, surface: str, action: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One visible character among invisible ones: recorded, on every surface."""
    submit = SURFACES[surface](action)

    @settings(BOUNDED, max_examples=5)
    @given(text=shows_one_character())
    def accepted(text: str) -> None:
        assert submit(world, world.fresh(action), text), repr(text)

    accepted()


@settings(max_examples=300, deadline=None)
@given(text=BLANK)
def test_person_text_is_the_one_definition_of_blank(text: str) -> None:
    """``person_text`` refuses every text that shows nothing where one is required,
    and lets it through where none is (a comment, a note)."""
    with pytest.raises(InvalidDecisionError, match="must not be empty"):
        person_text(text, "reason", required=True)
    assert person_text(text, "comment") == text
    assert Settlement.not_run(text) == Settlement.not_run("")
    with pytest.raises(InvalidDecisionError, match="must not be empty"):
        review_submission(Action.REJECT, text=text)


@settings(max_examples=300, deadline=None)
@given(text=shows_one_character())
def test_one_visible_character_is_not_blank(text: str) -> None:
    """A text with one visible character in it is kept as it was typed."""
    assert person_text(text, "reason", required=True) == text
