"""A thread that asked for a review outside a reviewer's scopes shows that reviewer
nothing of the review's operation, on any page or JSON answer of the inbox: its
messages hold the operation's arguments, so they are shown to no one who may not see
the thread; and a pause whose call that review governs (the review itself, the call
left in doubt after it was approved, a tool's pause the call raised) is neither listed
to them nor found, as they may not act on it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    InterruptError,
    ScriptedProvider,
    Store,
    Tool,
    ToolContext,
)
from covonaut_es.domain import PauseKind
from covonaut_es.service import ThreadService
from inbox_support import ProcessDied, ask_tool, current, inbox_client, sign_in
from support import call, ticking_clock
from test_approvals import PAY_SCHEMA, VERIFIER
from test_review_policy import LARGE, NO_SCOPE, POLICY, pay

HIDDEN = "HIDDEN-IBAN-7731"
GUARDED_CALL = ("c1", "pay", json.dumps({"amount": 5000, "to": HIDDEN}))

# thread -> the call its run makes once the guarded payment ran (None: it stays paused
# on the guarded review itself)
THREADS: dict[str, tuple[str, str, str] | None] = {
    "tool-pause": ("c2", "ask", '{"about": "refund"}'),
    "plain-review": ("c2", "pay_plain", '{"amount": 40, "to": "bob"}'),
    "guarded-pending": None,
}


# thread -> whether its guarded call's runner dies in it (a call in doubt), else the call
# pauses the run itself (a tool's pause): either pause shows the guarded operation
CALL_PAUSED = {"guarded-in-doubt": True, "guarded-asks": False}


def plain_pay() -> Tool:
    """A payment held for review with no policy: every reviewer may decide it."""
    return Tool(
        "pay_plain", "Send a small payment", PAY_SCHEMA, lambda ctx, args: "paid",
        requires_approval=True,
    )  # fmt: skip


def guarded_then(store: Store, thread_id: str, then: tuple[str, str, str] | None) -> str:
    """``thread_id``, paused on a review of 5000 to :data:`HIDDEN` that needs the scope
    ``payments``; unless ``then`` is None, that review approved and the payment run,
    and the thread paused again on the call ``then``. Returns the guarded review's id."""
    script = [call(GUARDED_CALL)] + ([call(then)] if then else [])
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=[pay([], POLICY), ask_tool(), plain_pay()],
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            clock=ticking_clock(),
            reviewer_verifier=VERIFIER,
        )
    )
    agent.run("Pay the invoice.")
    (review,) = agent.state.reviews
    if then is not None:
        agent.approve(review.request.review_id, reviewer=LARGE)
        agent.resume()
        assert agent.state.pauses and agent.state.pauses[0].interrupt.tool_call_id == then[0]
    return review.request.review_id


def guarded_call_pauses(store: Store, thread_id: str, *, dies: bool) -> str:
    """``thread_id``, whose guarded payment (approved, it runs at once) was left in
    doubt by its runner's death (``dies``), or paused the run itself; its review's id."""

    def run(ctx: ToolContext, args: dict[str, Any]) -> Any:
        if dies:
            raise ProcessDied
        raise InterruptError("which account?", {"to": args["to"]})

    guarded = Tool(
        "pay", "Send a payment", PAY_SCHEMA, run, requires_approval=True, review=POLICY,
        run_on_approval=True,
    )  # fmt: skip
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([call(GUARDED_CALL)]),
            tools=[guarded],
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            clock=ticking_clock(),
            reviewer_verifier=VERIFIER,
        )
    )
    agent.run("Pay the invoice.")
    (review,) = agent.state.reviews
    agent.approve(review.request.review_id, reviewer=LARGE)
    if dies:
        with pytest.raises(ProcessDied):
            agent.resume()
        ThreadService(store).pause_calls_in_doubt(thread_id, "the runner died")
    else:
        agent.resume()
    assert store.state_at(thread_id).pauses[0].kind is not PauseKind.REVIEW
    return review.request.review_id


@pytest.fixture
def hidden(store: Store) -> Iterator[tuple[Any, set[str]]]:
    """The inbox over the threads of :data:`THREADS` and :data:`CALL_PAUSED`, and their
    guarded reviews' ids."""
    guarded = {guarded_then(store, thread, then) for thread, then in THREADS.items()}
    guarded |= {guarded_call_pauses(store, t, dies=d) for t, d in CALL_PAUSED.items()}
    with inbox_client(store) as client:
        current(client)
        yield client, guarded


def reachable(store: Store) -> list[tuple[str, dict[str, str]]]:
    """Every GET of the inbox a reviewer could make about the threads: their pages and
    live statuses, for every call and every review each thread has."""
    paths: list[tuple[str, dict[str, str]]] = [("/", {}), ("/rows", {})]
    for thread in [*THREADS, *CALL_PAUSED]:
        paths.append(("/thread", {"id": thread}))
        state = store.state_at(thread)
        for call_id in ("c1", "c2"):
            paths.append(("/pause", {"thread": thread, "call": call_id}))
            paths.append(("/pause/status", {"thread": thread, "call": call_id, "token": "x"}))
        for review in state.reviews:
            named = {"id": review.request.review_id, "thread": thread}
            paths += [("/review", named), ("/review/status", named)]
    return paths


def test_no_answer_to_a_reviewer_outside_the_scopes_shows_the_hidden_operation(
    store: Store, hidden: tuple[Any, set[str]]
) -> None:
    """Every page, live status and JSON answer about the threads, asked by a reviewer
    without the scope: none holds the guarded operation's arguments, nor its review's id
    unless the request named it;
    the pages of what they may act on say that the messages are hidden."""
    client, guarded = hidden
    csrf = sign_in(client, NO_SCOPE)
    answers = [client.get(path, params=params) for path, params in reachable(store)]
    bearer = {"Authorization": f"Bearer {NO_SCOPE}"}
    answers += [client.get(path, headers=bearer) for path in ("/api/reviews", "/api/pauses")]
    for review in guarded:  # a decision with a wrong digest names not the right one
        sent = {"digest": "0" * 64}
        answers.append(client.post(f"/api/reviews/{review}/approve", json=sent, headers=bearer))
    digests = {
        r.request.digest
        for thread in [*THREADS, *CALL_PAUSED]
        for r in store.state_at(thread).reviews
        if r.request.review_id in guarded
    }
    for thread in CALL_PAUSED:  # acting on it is refused, and the refusal shows nothing
        act = {"csrf": csrf, "thread": thread, "call": "c1", "pause": "x", "action": "retry"}
        answers.append(client.post("/pause", data=act, headers={"Origin": "http://inbox.test"}))
    for answer in answers:
        assert HIDDEN not in answer.text, (answer.request.url, answer.text)
        assert not any(digest in answer.text for digest in digests), answer.request.url
        assert "erin" not in answer.text, answer.request.url  # who decided a hidden review
        named = str(answer.request.url)  # a refusal may name what it was asked for
        assert not any(r in answer.text and r not in named for r in guarded), named
        assert answer.status_code in (200, 403, 404, 409), (answer.request.url, answer.status_code)
    pause = client.get("/pause", params={"thread": "tool-pause", "call": "c2"})
    assert pause.status_code == 200 and 'id="messages-hidden"' in pause.text
    held = client.get("/pause", params={"thread": "guarded-pending", "call": "c1"})
    assert held.status_code == 404


def test_a_reviewer_in_scope_sees_the_messages_of_every_thread(
    store: Store, hidden: tuple[Any, set[str]]
) -> None:
    """The same pages for a reviewer who holds the scope show the thread's messages,
    the guarded operation among them (so the test above looks where it is)."""
    client, _ = hidden
    sign_in(client, LARGE)
    pause = client.get("/pause", params={"thread": "tool-pause", "call": "c2"})
    assert pause.status_code == 200 and HIDDEN in pause.text
    assert 'id="messages-hidden"' not in pause.text
    plain = next(
        r for r in store.state_at("plain-review").reviews if r.request.tool_name == "pay_plain"
    )
    page = client.get("/review", params={"id": plain.request.review_id, "thread": "plain-review"})
    assert page.status_code == 200 and HIDDEN in page.text
