"""A review id is never a call id: the model chooses call ids, and a hostile one picks
ids equal to a review id it read, or to one it predicts, to confuse looking reviews up
and deciding them. Whatever ids it sends, the thread's review ids and call ids stay
apart, and each review is found and decided as the one its thread asked for."""

from __future__ import annotations

import re
import secrets
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Store,
    Tool,
    ToolCall,
    open_store,
)
from covonaut_es.domain._calls import event_key
from covonaut_es.service import ThreadService, review_submission
from support import ticking_clock

OBJECT: dict[str, Any] = {"type": "object"}
VERIFIER = HmacReviewerVerifier(secrets.token_bytes(32))
RITA = VERIFIER.issue_token("rita", ttl_seconds=3600)
SEEN = re.compile(r"[0-9a-f]{32}")

# How a hostile model picks a call id: one of the review ids it read in the thread, the
# review id it predicts for its pay call at some version (the key function is public
# knowledge), or any text.
hostile_id = st.one_of(
    st.tuples(st.just("seen"), st.integers(0, 3)),
    st.tuples(st.just("predicted"), st.integers(1, 40)),
    st.tuples(st.just("text"), st.text(min_size=0, max_size=12)),
)


def hostile_model(thread_id: str, plan: list[list[tuple[str, Any]]]) -> ScriptedProvider:
    """Each turn calls ``pay`` (which needs a review) with id ``p<turn>`` first, then
    ``note`` once per planned id; once the plan is spent it answers."""
    turns = iter(plan)

    def respond(request: ProviderRequest) -> ProviderResponse:
        seen = [m for msg in request.messages for m in SEEN.findall(msg.content)]
        ids = next(turns, None)
        if ids is None:
            return ProviderResponse(content="done")
        turn = sum(m.role is Role.ASSISTANT for m in request.messages) + 1
        pay = f"p{turn}"
        calls = [ToolCall(pay, "pay", '{"amount": 1}')]
        for kind, value in ids:
            if kind == "seen":
                call_id = seen[value % len(seen)] if seen else "nothing-seen"
            elif kind == "predicted":
                call_id = event_key(thread_id, value, pay)
            else:
                call_id = value
            calls.append(ToolCall(call_id, "note", "{}"))
        return ProviderResponse(tool_calls=tuple(calls))

    return ScriptedProvider(respond=respond)


def agent_on(store: Store, plan: list[list[tuple[str, Any]]], *, parallel: bool) -> Agent:
    return Agent(
        AgentConfig(
            provider=hostile_model("t", plan),
            tools=[
                Tool("pay", "Pay", OBJECT, lambda c, a: "paid", requires_approval=True),
                Tool("note", "Note", OBJECT, lambda c, a: "noted"),
            ],
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
            reviewer_verifier=VERIFIER,
            clock=ticking_clock(),
            parallel_tools=parallel,
        )
    )


def call_ids(store: Store) -> set[str]:
    state = store.state_at("t")
    return {call.id for m in state.messages for call in m.tool_calls} | {
        m.tool_call_id for m in state.messages if m.tool_call_id
    }


def drive(store: Store, plan: list[list[tuple[str, Any]]], *, parallel: bool) -> None:
    """Run the hostile model through its plan, a reviewer deciding each review as it is
    found by id alone; after every step, no review id is a call id."""
    agent = agent_on(store, plan, parallel=parallel)
    service = ThreadService(store, verifier=VERIFIER)
    rita = service.reviewer(RITA)
    output = agent.run("go")
    for _ in range(len(plan) + 2):
        state = store.state_at("t")
        review_ids = {r.request.review_id for r in state.reviews}
        assert not review_ids & call_ids(store), (review_ids & call_ids(store), plan)
        if output:
            return
        for review in [r for r in state.reviews if r.pending]:
            found = service.find_review(review.request.review_id)
            assert (found.thread_id, found.review.request) == ("t", review.request)
            service.decide(review.request.review_id, review_submission("approve"), reviewer=rita)
            decided = store.state_at("t").reviews
            assert [r.request.review_id for r in decided if r.decision] == [
                r.request.review_id for r in state.reviews if r.decision or r is review
            ]
        output = agent.resume()
    raise AssertionError("the plan never ended")


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    plan=st.lists(st.lists(hostile_id, min_size=1, max_size=4), min_size=1, max_size=3),
    parallel=st.booleans(),
)
def test_no_call_id_a_hostile_model_sends_is_ever_a_review_id(
    plan: list[list[tuple[str, Any]]], parallel: bool
) -> None:
    """Whatever ids the model sends (review ids it read, review ids it predicts, any
    text), in sequence or in parallel, review ids and call ids stay apart and each
    review is found and decided by its id as its thread asked for it."""
    with open_store("memory://") as store:
        drive(store, plan, parallel=parallel)


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
def test_a_predicted_and_a_read_review_id_are_never_call_ids(store: Store, parallel: bool) -> None:
    """On every store: the model predicts its pay call's review id in the same response,
    then, once it read the review id in the decision's text, sends it as a call id."""
    plan = [[("predicted", v) for v in range(1, 30)], [("seen", 0), ("seen", 1)]]
    drive(store, plan, parallel=parallel)
