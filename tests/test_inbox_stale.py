"""A stale tab acts on nothing: every form of the inbox, and every command of its JSON
API, names the pause it was loaded for, so that once the thread has moved on from
pause A to pause B (the model calling the same tool again, with the same call id,
which the runtime makes unique), the form or request loaded for A is refused with 409
and a reason, and B is left as it was."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from covonaut_es import AgentThread, Store, Tool, ToolContext
from covonaut_es.domain import PauseKind
from covonaut_es.inbox._http import quoted
from covonaut_es.inbox._sessions import SESSION_COOKIE
from covonaut_es.service import Settlement, ThreadService, pause_token, review_submission
from inbox_support import (
    ProcessDied,
    ask_tool,
    current,
    in_doubt,
    inbox_client,
    paused,
    paused_on_tool,
    sign_in,
)
from support import call
from test_approvals import ALICE, BOB, VERIFIER, make_agent

OWN = {"Origin": "http://inbox.test"}
THREAD = "t/1 ?x"


def _bearer(token: str = ALICE) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _transfer() -> Tool:
    def transfer(ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise ProcessDied

    return Tool("transfer", "Move money", {"type": "object"}, transfer)


# Pause A, and the thread moving on from it to pause B on the same call ---------------


def tool_pause_again(store: Store) -> None:
    """A (a tool's pause on c1) answered; the run resumes and the model asks again,
    with the same call id: B."""
    reviewer = ThreadService(store, verifier=VERIFIER).reviewer(BOB)
    ThreadService(store, verifier=VERIFIER).answer(THREAD, "c1", "acct 7", reviewer=reviewer)
    agent = make_agent(store, [call(("c1", "ask", "{}"))], [], thread_id=THREAD, tool=ask_tool())
    agent.resume()


def in_doubt_again(store: Store) -> None:
    """A (c1 in doubt) settled as run; the run resumes, the model calls the transfer
    again with the same call id, and the runner dies in it again: B."""
    service = ThreadService(store, verifier=VERIFIER)
    reviewer = service.reviewer(BOB)
    service.settle(THREAD, "c1", Settlement.ran_with("sent"), reviewer=reviewer)
    script = [call(("c1", "transfer", '{"amount": 1}'))]
    with pytest.raises(ProcessDied):
        make_agent(store, script, [], thread_id=THREAD, tool=_transfer()).resume()
    service.pause_calls_in_doubt(THREAD, "its runner died again")


def review_again(store: Store) -> None:
    """A (a review of c1) rejected; the run resumes and the model asks to pay again,
    with the same call id: review B."""
    service = ThreadService(store, verifier=VERIFIER)
    (review,) = store.state_at(THREAD).reviews
    submission = review_submission("reject", text="not now")
    service.decide(review.request.review_id, submission, reviewer=service.reviewer(BOB))
    again = call(("c1", "pay", '{"amount": 41, "to": "bob"}'))
    make_agent(store, [again], [], thread_id=THREAD).resume()


def retried_in_doubt_again(store: Store) -> None:
    """A (c1 in doubt) sent to run again, with its idempotency key; the runner dies in
    the retry too, and c1 is paused in doubt again: B, under the same key."""
    service = ThreadService(store, verifier=VERIFIER)
    state = store.state_at(THREAD)
    (first,) = [p for p in state.pauses if not p.resolved]
    pause = pause_token(state.messages, first)
    service.request_retry(THREAD, "c1", reviewer=service.reviewer(BOB), pause=pause)
    with pytest.raises(ProcessDied):
        make_agent(store, [], [], thread_id=THREAD, tool=_transfer()).resume()
    service.pause_calls_in_doubt(THREAD, "its runner died in the retry")


START: dict[str, Callable[[Store], None]] = {
    "tool": lambda store: paused_on_tool(store, THREAD),
    "doubt": lambda store: (in_doubt(store, THREAD), None)[1],
    "retried": lambda store: (in_doubt(store, THREAD), None)[1],
    "review": lambda store: (paused(store, THREAD, [], []), None)[1],
}
MOVE_ON: dict[str, Callable[[Store], None]] = {
    "tool": tool_pause_again,
    "doubt": in_doubt_again,
    "retried": retried_in_doubt_again,
    "review": review_again,
}

# form id on the page -> (kind of pause, fields the person fills in)
FORMS: dict[str, tuple[str, dict[str, str]]] = {
    "answer-form": ("tool", {"answer": "acct 9"}),
    "ran-form": ("doubt", {"result": "sent twice"}),
    "not-run-form": ("doubt", {"note": "bank says no"}),
    "retry-form": ("doubt", {}),
    "not-run-form@retried": ("retried", {"note": "bank says no"}),
    "ran-form@retried": ("retried", {"result": "sent once"}),
    "abandon-form@tool": ("tool", {"reason": "customer left"}),
    "abandon-form@doubt": ("doubt", {"reason": "customer left"}),
    "approve-form": ("review", {}),
    "reject-form": ("review", {"reason": "no"}),
    "respond-form": ("review", {"answer": "done by hand"}),
}


def _form_fields(page: str, form_id: str) -> tuple[str, dict[str, str]]:
    """The action and hidden fields of the form ``form_id`` on ``page``."""
    match = re.search(rf'<form method="post" action="([^"]+)"[^>]*id="{form_id}">(.*?)</form>',
                      page, re.S)  # fmt: skip
    assert match is not None, form_id
    hidden = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', match[2])
    return html.unescape(match[1]), {name: html.unescape(value) for name, value in hidden}


def _page_of(client: TestClient, kind: str, store: Store) -> str:
    if kind == "review":
        (review,) = store.state_at(THREAD).reviews
        query = {"id": review.request.review_id, "thread": THREAD}
        response = client.get("/review", params=query)
    else:
        response = client.get("/pause", params={"thread": THREAD, "call": "c1"})
    assert response.status_code == 200, response.text
    return response.text


def _snapshot(store: Store) -> tuple[int, Any]:
    state = store.state_at(THREAD)
    return state.version, state.pauses


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_form_loaded_for_one_pause_never_acts_on_the_next(
    open_test_store: Callable[..., Store], form: str
) -> None:
    """Load the page of pause A, let the thread move on to pause B of the same call,
    post A's form: 409 naming the stale pause (on the review's page, for a review),
    and B is as it was."""
    store = open_test_store()
    kind, filled = FORMS[form]
    START[kind](store)
    with inbox_client(store) as client:
        current(client)
        csrf = sign_in(client, BOB)
        action, hidden = _form_fields(_page_of(client, kind, store), form.split("@")[0])
        assert hidden["csrf"] == csrf
        MOVE_ON[kind](store)
        before = _snapshot(store)
        assert any(not p.resolved for p in before[1]), "the thread is paused on B"
        posted = client.post(action, data={**hidden, **filled}, headers=OWN)
        assert posted.status_code == 409, posted.text
        if kind == "review":  # the stale review's page, with the refusal on it
            assert 'id="error" role="alert"' in posted.text
        assert _snapshot(store) == before


# The JSON API -----------------------------------------------------------------------

# command -> (kind of pause, path after the thread and call, body)
API: dict[str, tuple[str, str, dict[str, Any]]] = {
    "answer": ("tool", "answer", {"answer": "acct 9"}),
    "settle-ran": ("doubt", "settle", {"ran": True, "result": "sent twice"}),
    "settle-not-run": ("doubt", "settle", {"ran": False}),
    "retry": ("doubt", "retry", {}),
    "settle-not-run@retried": ("retried", "settle", {"ran": False}),
    "abandon@retried": ("retried", "abandon", {"reason": "customer left"}),
    "abandon@tool": ("tool", "abandon", {"reason": "customer left"}),
    "abandon@doubt": ("doubt", "abandon", {"reason": "customer left"}),
    "approve": ("review", "approve", {}),
    "reject": ("review", "reject", {"reason": "no"}),
    "respond": ("review", "respond", {"answer": "done by hand"}),
}


@pytest.mark.parametrize("command", sorted(API))
def test_an_api_command_for_one_pause_never_acts_on_the_next(
    open_test_store: Callable[..., Store], command: str
) -> None:
    """Take pause A's token (a review's id) from GET /api/pauses, let the thread move
    on to pause B of the same call, send the command for A: 409, B as it was."""
    store = open_test_store()
    kind, action, body = API[command]
    START[kind](store)
    with inbox_client(store) as client:
        current(client)
        (listed,) = client.get("/api/pauses", headers=_bearer()).json()
        assert listed["pause"], listed
        MOVE_ON[kind](store)
        before = _snapshot(store)
        if kind == "review":
            path = f"/api/reviews/{listed['review_id']}/{action}"
        elif action == "abandon":
            path = f"/api/threads/{quoted(THREAD)}/abandon"
        else:
            path = f"/api/pauses/{quoted(THREAD)}/c1/{action}"
        if kind != "review":
            body = {**body, "pause": listed["pause"]}
        sent = client.post(path, json=body, headers=_bearer())
        assert sent.status_code == 409, sent.text
        assert sent.json()["error"]
        assert _snapshot(store) == before


# The token itself -------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(START))
def test_a_pause_keeps_its_token_and_the_next_one_gets_another(
    open_test_store: Callable[..., Store], kind: str
) -> None:
    """The token of a pause stays the same while it is pending (other writes, a
    label, do not change it), and the next pause of the same call has another; a form
    or request with the current token acts."""
    store = open_test_store()
    START[kind](store)
    state = store.state_at(THREAD)
    (first,) = [p for p in state.pauses if not p.resolved]
    token = pause_token(state.messages, first)
    ThreadService(store).label(THREAD, "looked at")
    state = store.state_at(THREAD)
    assert pause_token(state.messages, state.pauses[-1]) == token
    MOVE_ON[kind](store)
    state = store.state_at(THREAD)
    (second,) = [p for p in state.pauses if not p.resolved]
    assert second.kind is first.kind
    assert pause_token(state.messages, second) != token


def test_a_form_without_its_pause_is_refused(open_test_store: Callable[..., Store]) -> None:
    """A pause form posted without the pause it was loaded for is a 400 naming the
    missing field, and records nothing; with it, the answer is recorded."""
    store = open_test_store()
    paused_on_tool(store, THREAD)
    with inbox_client(store) as client:
        current(client)
        sign_in(client, BOB)
        action, hidden = _form_fields(_page_of(client, "tool", store), "answer-form")
        before = _snapshot(store)
        bare = {k: v for k, v in hidden.items() if k != "pause"}
        posted = client.post(action, data={**bare, "answer": "acct 9"}, headers=OWN)
        assert posted.status_code == 400 and "names no pause" in posted.text
        assert _snapshot(store) == before
        for token in ("0" * 32, "x"):
            forged = client.post(
                action, data={**hidden, "pause": token, "answer": "acct 9"}, headers=OWN
            )
            assert forged.status_code == 409 and "no longer pending" in forged.text
        assert _snapshot(store) == before
        done = client.post(action, data={**hidden, "answer": "acct 9"}, headers=OWN)
        assert done.status_code == 200 and 'id="resolved"' in done.text
    (event,) = [e for e in store.history(THREAD) if isinstance(e, AgentThread.InterruptAnswered)]
    assert (event.answer, event.answered_by) == ("acct 9", "bob")


@pytest.mark.parametrize("pause", [1, [], {"a": 1}, True])
def test_an_api_pause_that_is_no_text_is_400(
    open_test_store: Callable[..., Store], pause: Any
) -> None:
    """A "pause" that is no string is refused as such, and records nothing."""
    store = open_test_store()
    paused_on_tool(store, THREAD)
    with inbox_client(store) as client:
        current(client)
        before = _snapshot(store)
        body = {"answer": "acct 9", "pause": pause}
        sent = client.post(f"/api/pauses/{quoted(THREAD)}/c1/answer", json=body, headers=_bearer())
        assert sent.status_code == 400 and "token (text)" in sent.json()["error"], sent.text
        assert _snapshot(store) == before
    assert store.state_at(THREAD).pauses[0].kind is PauseKind.INTERRUPT


@pytest.mark.parametrize(
    ("kind", "form", "twice"),
    [
        ("tool", "answer-form", "answer"),
        ("tool", "answer-form", "action"),
        ("tool", "answer-form", "pause"),
        ("doubt", "ran-form", "result"),
        ("review", "reject-form", "reason"),
        ("review", "approve-form", "review"),
        ("review", "approve-form", "digest"),
    ],
)
def test_a_form_that_names_a_field_twice_is_refused(
    open_test_store: Callable[..., Store], kind: str, form: str, twice: str
) -> None:
    """A form posting a field twice (which a page never does: a crafted post) is a 400
    naming the field, as a JSON body naming a key twice is, and records nothing: a
    reader keeping either value would record one nobody chose."""
    store = open_test_store()
    START[kind](store)
    with inbox_client(store) as client:
        current(client)
        sign_in(client, BOB)
        action, hidden = _form_fields(_page_of(client, kind, store), form)
        filled = {**hidden, **{"answer": "a", "result": "r", "reason": "no"}}
        pairs = [*filled.items(), (twice, filled.get(twice, "x") + "2")]
        before = _snapshot(store)
        posted = client.post(
            action,
            content="&".join(f"{quote(k)}={quote(v)}" for k, v in pairs),
            headers={**OWN, "content-type": "application/x-www-form-urlencoded"},
        )
        assert posted.status_code == 400, posted.text
        assert f"{twice!r} twice" in html.unescape(posted.text)
        assert _snapshot(store) == before


def test_a_sign_in_that_names_the_token_twice_is_refused(
    open_test_store: Callable[..., Store],
) -> None:
    """The sign-in form too: a token given twice is a 400 naming it, and no session."""
    store = open_test_store()
    with inbox_client(store) as client:
        body = f"token={quote(ALICE)}&token={quote(BOB)}"
        headers = {**OWN, "content-type": "application/x-www-form-urlencoded"}
        posted = client.post("/login", content=body, headers=headers)
        assert posted.status_code == 400 and "'token' twice" in html.unescape(posted.text)
        assert SESSION_COOKIE not in posted.headers.get("set-cookie", "")


@pytest.mark.parametrize("action", ["approve", "reject", "respond"])
def test_a_decision_naming_two_threads_is_refused(
    open_test_store: Callable[..., Store], action: str
) -> None:
    """``?thread=`` given twice (a fork and its parent, say) is a 400 that says so,
    and decides nothing on either thread."""
    store = open_test_store()
    paused(store, THREAD, [], [])
    fork = store.fork(THREAD, new_thread_id="fork")
    with inbox_client(store) as client:
        current(client)
        (review,) = store.state_at(THREAD).reviews
        path = f"/api/reviews/{review.request.review_id}/{action}"
        body = {"reason": "no", "answer": "done"}
        body = {k: v for k, v in body.items() if (k == "reason") == (action == "reject")}
        if action == "approve":
            body = {}
        before = {t: store.state_at(t).version for t in (THREAD, fork)}
        query = f"?thread={quote(THREAD)}&thread={fork}"
        sent = client.post(path + query, json=body, headers=_bearer())
        assert sent.status_code == 400 and "given 2 times" in sent.json()["error"], sent.text
        assert {t: store.state_at(t).version for t in (THREAD, fork)} == before
        shown = client.get(f"/api/reviews/{review.request.review_id}{query}", headers=_bearer())
        assert shown.status_code == 400
