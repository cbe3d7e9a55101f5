"""A thread given up decides no review, on every path: the service, the agent's own
approve/reject/respond, a review a fork inherited, and a review a run's commit put after
the abandonment; and none of its reviews is found as waiting."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ProviderRequest,
    ProviderResponse,
    ReviewQueue,
    Role,
    ScriptedProvider,
    Store,
    ThreadStatus,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)
from covonaut_es.agui._events import interrupts
from covonaut_es.errors import ThreadAbandonedError, ThreadStateError
from covonaut_es.runtime._results import waiting_in
from covonaut_es.service import ThreadService, review_submission
from inbox_support import in_doubt, inbox_client, paused_on_tool, sign_in
from support import answer, call, ticking_clock
from test_approvals import ALICE, make_agent, paused_on_review

OBJECT: dict[str, Any] = {"type": "object"}
VERIFIER = HmacReviewerVerifier(secrets.token_bytes(32))
RITA = VERIFIER.issue_token("rita", ttl_seconds=3600)
PAY_40 = '{"amount": 40, "to": "bob"}'


def paying(store: Store, thread_id: str = "t") -> Agent:
    """An agent whose model asks to pay (a tool that requires approval)."""

    def model(request: ProviderRequest) -> ProviderResponse:
        if request.messages[-1].role is Role.TOOL:
            return answer("done")
        return call(("p1", "pay", PAY_40))

    return Agent(
        AgentConfig(
            provider=ScriptedProvider(respond=model),
            tools=[Tool("pay", "Pay", OBJECT, lambda c, a: "paid", requires_approval=True)],
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            reviewer_verifier=VERIFIER,
            clock=ticking_clock(),
        )
    )


def paused(store: Store, thread_id: str = "t") -> str:
    """A thread paused on the review of a payment; its review id."""
    agent = paying(store, thread_id)
    assert agent.run("Pay bob 40.") == ""
    [request] = agent.pending_reviews
    return request.review_id


Decide = Callable[[Store, str, str | None], object]


def _service(action: str) -> Decide:
    def decide(store: Store, review_id: str, thread_id: str | None) -> object:
        commands = ThreadService(store, verifier=VERIFIER)
        submission = review_submission(action, text="a reason")
        return commands.decide(
            review_id, submission, reviewer=commands.reviewer(RITA), thread_id=thread_id
        )

    return decide


def _agent(action: str) -> Decide:
    def decide(store: Store, review_id: str, thread_id: str | None) -> object:
        agent = paying(store, thread_id or "t")
        if action == "approve":
            return agent.approve(review_id, reviewer=RITA)
        if action == "reject":
            return agent.reject(review_id, reviewer=RITA, reason="no")
        return agent.respond(review_id, reviewer=RITA, answer="paid by hand")

    return decide


SURFACES: dict[str, Decide] = {
    f"{surface.__name__.strip('_')}.{action}": surface(action)
    for surface in (_service, _agent)
    for action in ("approve", "reject", "respond")
}


@pytest.mark.parametrize("surface", sorted(SURFACES))
@pytest.mark.parametrize("named", [True, False], ids=["thread named", "no thread named"])
def test_a_review_of_a_thread_given_up_is_never_decided(
    store: Store, surface: str, named: bool
) -> None:
    """Every way of deciding a review refuses once its thread is abandoned, naming that,
    and records nothing; the thread waits for nobody."""
    review_id = paused(store)
    ThreadService(store).abandon("t", "customer left")
    before = store.history("t")
    with pytest.raises(ThreadStateError, match="abandoned"):
        SURFACES[surface](store, review_id, "t" if named else None)
    assert store.history("t") == before
    state = store.state_at("t")
    assert state.reviews[0].decision is None and state.waiting_for == ""


@pytest.mark.parametrize("surface", sorted(SURFACES))
@pytest.mark.parametrize("given_up", ["parent", "fork"])
def test_a_review_inherited_by_a_fork_is_decided_only_where_it_still_waits(
    store: Store, surface: str, given_up: str
) -> None:
    """Parent and fork both hold the pending review; one is given up. The review is
    found waiting in the other alone, deciding it without a thread id lands there, and
    naming the abandoned one is refused."""
    review_id = paused(store, "parent")
    store.fork("parent", new_thread_id="fork")
    ThreadService(store).abandon(given_up, "gone")
    alive = "fork" if given_up == "parent" else "parent"
    commands = ThreadService(store, verifier=VERIFIER)
    found = commands.find_review(review_id)
    assert (found.thread_id, found.review.pending) == (alive, True)
    before = store.history(given_up)
    with pytest.raises(ThreadStateError, match="abandoned"):
        SURFACES[surface](store, review_id, given_up)
    assert store.history(given_up) == before
    SURFACES[surface](store, review_id, None if surface.startswith("service") else alive)
    assert store.state_at(alive).reviews[0].decision is not None
    assert store.state_at(given_up).reviews[0].decision is None


@pytest.fixture
def two_stores(store_url: str) -> Iterator[tuple[Store, Store]]:
    """Two store objects on one database, as two processes would have."""
    runner = open_store(store_url)
    other = runner if store_url == "memory://" else open_store(store_url)
    yield runner, other
    runner.close()
    if other is not runner:
        other.close()


@pytest.mark.parametrize("durability", ["step", "checkpoint"])
def test_a_review_a_run_asked_for_after_the_abandonment_is_never_decided(
    two_stores: tuple[Store, Store], durability: str
) -> None:
    """A parallel batch asks for a review and runs a slow tool; the thread is given up
    while the tool runs. The run's commit is put after the abandonment, and the review
    it holds is never decided, on any surface."""
    runner, other = two_stores
    started, gate, outcome = threading.Event(), threading.Event(), {}

    def slow(ctx: ToolContext, args: dict[str, Any]) -> str:
        started.set()
        gate.wait(10)
        return "slow done"

    script = [
        ProviderResponse(tool_calls=(ToolCall("p1", "pay", PAY_40), ToolCall("s1", "slow", "{}"))),
        ProviderResponse(content="end"),
    ]
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=[
                Tool("pay", "Pay", OBJECT, lambda c, a: "paid", requires_approval=True),
                Tool("slow", "Slow", OBJECT, slow),
            ],
            parallel_tools=True,
            checkpoint=CheckpointSettings(store=runner, thread_id="t", durability=durability),
        )
    )

    def run() -> None:
        try:
            outcome["output"] = agent.run("go")
        except Exception as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    assert started.wait(10)
    ThreadService(other).abandon("t", "customer left")
    gate.set()
    worker.join(10)
    assert isinstance(outcome.get("error"), ThreadAbandonedError), outcome
    state = runner.state_at("t")
    assert state.status is ThreadStatus.ABANDONED and state.waiting_for == ""
    [review] = state.reviews
    before = runner.history("t")
    for surface in sorted(SURFACES):
        with pytest.raises(ThreadStateError, match="abandoned"):
            SURFACES[surface](runner, review.request.review_id, None)
    assert runner.history("t") == before
    assert runner.replay_state("t") == runner.state_at("t")
    queue = ReviewQueue(runner.url)
    with queue.follow():
        queue.wait_until_current(runner)
        assert queue.pending() == ()  # an abandoned thread waits for nobody
    queue.close()


PAUSING: dict[str, Callable[[Store, str], object]] = {
    "review": lambda store, thread_id: paused_on_review(store, [], [], thread_id=thread_id),
    "tool's pause": paused_on_tool,
    "call in doubt": in_doubt,
}


def waiting_as_each_reader_shows_it(store: Store, thread_id: str) -> dict[str, object]:
    """What each reader of a thread shows as waiting for a person, empty when nothing."""
    agent = make_agent(store, [], [], thread_id=thread_id)
    state = store.state_at(thread_id)
    [summary] = [s for s in store.list_threads().threads if s.thread_id == thread_id]
    queue = ReviewQueue(store.url)
    with queue.follow():
        queue.wait_until_current(store)
        queued = [item for item in queue.pending() if item.thread_id == thread_id]
    queue.close()
    return {
        "inbox review": inbox_reviews_offered(store, thread_id),
        "Agent.pending_reviews": agent.pending_reviews,
        "Agent.awaiting_person": agent.awaiting_person,
        "ThreadState.awaiting_person": state.awaiting_person,
        "ThreadState.waiting_for": state.waiting_for,
        "listing": (summary.unresolved_pauses, summary.waiting_for),
        "AG-UI interrupts": interrupts(agent),
        "reviewer queue": queued,
        "a run's result": waiting_in(store.load(thread_id)),
    }


def inbox_reviews_offered(store: Store, thread_id: str) -> tuple[str, ...]:
    """The thread's reviews that the inbox's review API calls pending and whose page
    offers a decision."""
    offered = []
    with inbox_client(store) as client:
        sign_in(client, ALICE)
        for review in store.load(thread_id).reviews.reviews:
            named = {"id": review.request.review_id, "thread": thread_id}
            shown = client.get(f"/api/reviews/{named['id']}", params={"thread": thread_id})
            page = client.get("/review", params=named).text
            if shown.json()["status"] == "pending" and 'id="approve-form"' in page:
                offered.append(review.request.review_id)
    return tuple(offered)


@pytest.mark.parametrize("kind", sorted(PAUSING))
@pytest.mark.parametrize("given_up", ["thread", "fork"])
def test_every_reader_shows_a_thread_given_up_waiting_for_nobody(
    store: Store, kind: str, given_up: str
) -> None:
    """Each reader that shows what waits for a person agrees with the commands, which
    all refuse a decision on a thread given up: before, the agent, AG-UI and a run's
    result still offered its pauses."""
    PAUSING[kind](store, "t")
    thread_id = "t" if given_up == "thread" else store.fork("t", new_thread_id="f")
    before = waiting_as_each_reader_shows_it(store, thread_id)
    shown = {name for name, waiting in before.items() if waiting}
    reviews_only = {"Agent.pending_reviews", "inbox review"}
    assert shown == set(before) - (reviews_only if kind != "review" else set())
    ThreadService(store).abandon(thread_id, "given up")
    after = waiting_as_each_reader_shows_it(store, thread_id)
    assert after == {
        name: (0, "") if name == "listing" else "" if name.endswith("waiting_for") else ()
        for name in after
    } | {"AG-UI interrupts": [], "reviewer queue": []}
