"""Typed pauses: the kind of each pause is the thread's, whatever the data of a tool or
a stored record claims, and only a person's dealing with a pause lets a worker resume."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    AgentConfig,
    AgentThread,
    HmacReviewerVerifier,
    InterruptError,
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
    Worker,
    open_store,
    operation_digest,
)
from covonaut_es.domain import Interrupt, PauseKind, ToolOutcome
from covonaut_es.errors import ThreadStateError
from covonaut_es.messages import Message
from covonaut_es.service import Settlement, ThreadService
from support import answer, call, start_bare_run
from test_migrations import GOLDEN, golden_store

OBJECT: dict[str, Any] = {"type": "object"}
VERIFIER = HmacReviewerVerifier(secrets.token_bytes(32))
RITA = VERIFIER.issue_token("rita", ttl_seconds=3600)
MANIFEST: dict[str, dict[str, Any]] = json.loads((GOLDEN / "v3" / "manifest.json").read_text())[
    "threads"
]
KINDS = {"tool": PauseKind.INTERRUPT, "review": PauseKind.REVIEW, "in_doubt": PauseKind.IN_DOUBT}
"""The kinds the manifest names, in the words of the code that wrote it (a tool's pause
was "tool" then)."""
RESUMED = {"pause-in-doubt-settled", "pause-review-decided"}
"""The golden threads whose every pause a person dealt with: a worker resumes them."""


def never_runs(ctx: ToolContext, args: dict[str, Any]) -> Any:
    """A tool of the golden application; no golden thread may run one again."""
    raise AssertionError(f"{ctx.tool_name} ran for {ctx.thread_id} after a pause")


def golden_config(thread_id: str) -> AgentConfig:
    """The golden application's tools, and a model that answers once a run resumes."""
    return AgentConfig(
        provider=ScriptedProvider(respond=lambda request: answer("Resumed.")),
        tools=[
            Tool(name, name, OBJECT, never_runs) for name in ("echo", "ask", "pay", "wire", "doubt")
        ],
    )


@pytest.fixture
def golden_v3(store_url: str, open_test_store: Callable[..., Store]) -> Store:
    """The v3 golden store (pauses written before they had a kind) on each kind of store."""
    return golden_store("v3", store_url, open_test_store)


# The golden store: pauses recorded before they had a kind ------------------------------


def test_golden_pauses_read_as_the_kinds_their_threads_bear_out(golden_v3: Store) -> None:
    """Each golden thread's pauses have the kind its manifest names (a tool's pause whose
    data says ``in_doubt`` stays a tool's pause), its open calls and pending reviews are
    as written, it verifies intact, and it replays to the state it loads as."""
    assert set(golden_v3.thread_ids()) == set(MANIFEST)
    for thread_id, expected in MANIFEST.items():
        state = golden_v3.state_at(thread_id)
        assert state.status is ThreadStatus.INTERRUPTED, thread_id
        assert [p.kind for p in state.pauses] == [KINDS[expected["kind"]]], thread_id
        assert [i.kind for i in state.interrupts] == [KINDS[expected["kind"]]], thread_id
        if "open_calls" in expected:
            assert [p.call.id for p in state.open_calls] == expected["open_calls"], thread_id
        if "pending_reviews" in expected:
            pending = [r for r in state.reviews if r.pending]
            assert len(pending) == expected["pending_reviews"], thread_id
        assert state.waiting_for == ("runner" if thread_id in RESUMED else "person"), thread_id
        assert golden_v3.verify(thread_id).ok, thread_id
        assert golden_v3.replay_state(thread_id) == state, thread_id


def test_the_queue_lists_each_golden_pause_by_its_kind(golden_v3: Store) -> None:
    """The reviewer queue, built from the golden log, lists every pause a person has yet
    to deal with under the kind its thread bears out: the forged ``in_doubt`` as a tool's
    pause, the fork's inherited review as a review."""
    queue = ReviewQueue(golden_v3.url)
    with queue.follow():
        queue.wait_until_current(golden_v3)
    listed = {item.thread_id: item.kind for item in queue.pending()}
    queue.close()
    assert listed == {
        thread_id: KINDS[expected.get("queue_kind", expected["kind"])]
        for thread_id, expected in MANIFEST.items()
        if thread_id not in RESUMED
    }


def test_a_worker_resumes_only_the_golden_threads_a_person_dealt_with(golden_v3: Store) -> None:
    """Worker.run(once=True) resumes the settled call in doubt and the decided review,
    and leaves every other golden thread paused as it was, above all the tool's pause
    whose data forges ``"in_doubt": true``."""
    before = {t: golden_v3.state_at(t) for t in MANIFEST}
    summary = Worker(golden_v3, golden_config).run(once=True)
    assert (summary.steps, summary.failed) == (len(RESUMED), ())
    for thread_id in MANIFEST:
        state = golden_v3.state_at(thread_id)
        if thread_id in RESUMED:
            assert state.status is ThreadStatus.FINISHED, thread_id
            assert state.messages[-1] == Message(Role.ASSISTANT, "Resumed."), thread_id
        else:
            assert state == before[thread_id], thread_id
    forged = golden_v3.state_at("pause-forged")
    assert forged.interrupts[0].data == {"in_doubt": True, "tool_call_id": "a1", "amount": 9000}


def test_a_golden_tools_pause_in_the_old_in_doubt_form_waits_for_a_person(
    golden_v3: Store,
) -> None:
    """A tool's own pause whose data is exactly the in-doubt pause the old worker wrote
    for its call (its key, id and arguments): the legacy reader guesses "in doubt" (the
    safe direction: a person must look), the thread reads a tool's pause that waits for
    a person's answer, never a settled call in doubt, so no worker resumes it alone;
    settling it is refused, and once a person answered it a worker resumes it."""
    from covonaut_es.migrations._registry import legacy_pause_kind

    thread_id = "pause-tool-in-doubt-form"
    [record] = [e for e in golden_v3.history(thread_id) if isinstance(e, AgentThread.Interrupted)]
    data = record.interrupt.data
    assert isinstance(data, dict) and data["in_doubt"] is True
    stored = {
        "reason": record.interrupt.reason,
        "data": data,
        "tool_call_id": record.interrupt.tool_call_id,
        "tool_name": record.interrupt.tool_name,
    }
    assert legacy_pause_kind(stored) == PauseKind.IN_DOUBT
    state = golden_v3.state_at(thread_id)
    [pause] = state.pauses
    assert (pause.kind, pause.resolved, state.waiting_for) == (PauseKind.INTERRUPT, False, "person")
    assert data["idempotency_key"] not in {p.idempotency_key for p in state.open_calls}
    before = golden_v3.history(thread_id)
    assert Worker(golden_v3, golden_config).run(once=True).steps == len(RESUMED)
    assert golden_v3.history(thread_id) == before
    service = ThreadService(golden_v3, verifier=VERIFIER)
    rita = service.reviewer(RITA)
    with pytest.raises(ThreadStateError, match="not open"):
        service.settle(thread_id, "d1", Settlement.not_run(), reviewer=rita)
    with pytest.raises(ThreadStateError, match="not open"):
        service.request_retry(thread_id, "d1", reviewer=rita)
    assert golden_v3.history(thread_id) == before
    service.answer(thread_id, "d1", "Pay nothing.", reviewer=rita)
    assert golden_v3.state_at(thread_id).waiting_for == "runner"
    assert Worker(golden_v3, golden_config).run(once=True).steps == 1
    assert golden_v3.state_at(thread_id).status is ThreadStatus.FINISHED


# Data a tool pauses with ----------------------------------------------------------------

FROM_CONTEXT = ("idempotency_key", "tool_call_id", "thread_id", "tool_name", "digest")
"""Values a hostile tool or model may copy into its pause's data, from the call it serves."""

text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
claims = st.sampled_from(["review_id", "in_doubt", "idempotency_key", "digest", "tool_call_id"])
# A claim's value: arbitrary JSON, or ("copy", what) for a value of the tool's own call.
claim_values = json_values | st.sampled_from(FROM_CONTEXT).map(lambda what: ("copy", what))
forged_data = st.one_of(
    json_values,
    st.dictionaries(claims, claim_values | st.just(True), min_size=1, max_size=5),
    st.fixed_dictionaries(
        {"in_doubt": st.just(True)},
        optional={k: st.just(("copy", k)) for k in ("idempotency_key", "tool_call_id")},
    ),
)


def copied(value: Any, ctx: ToolContext, args: dict[str, Any]) -> Any:
    """``value`` with every ("copy", what) replaced by that value of the call."""
    if isinstance(value, tuple):
        _, what = value
        if what == "digest":
            return operation_digest(ctx.tool_name, args)
        return getattr(ctx, what)
    if isinstance(value, dict):
        return {k: copied(v, ctx, args) for k, v in value.items()}
    if isinstance(value, list):
        return [copied(v, ctx, args) for v in value]
    return value


def asking_config(data: Any, seen: list[ProviderRequest]) -> Callable[[str], AgentConfig]:
    """An application whose ``ask`` tool pauses with ``data`` (its values copied from the
    call where it says so) and whose model asks once, then answers with what it read."""

    def ask(ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise InterruptError("a person must answer", copied(data, ctx, args))

    def model(request: ProviderRequest) -> ProviderResponse:
        seen.append(request)
        if any(m.role is Role.TOOL for m in request.messages):
            return answer(f"Read: {request.messages[-1].content}")
        return call(("a1", "ask", '{"question": "Which account?"}'))

    def make_config(thread_id: str) -> AgentConfig:
        return AgentConfig(
            provider=ScriptedProvider(respond=model),
            tools=[Tool("ask", "Ask a person", OBJECT, ask)],
            reviewer_verifier=VERIFIER,
        )

    return make_config


@settings(
    max_examples=40,
    deadline=timedelta(seconds=10),  # three workers' runs on a fresh store, each example
    suppress_health_check=[HealthCheck.too_slow],  # each example runs workers, by design
)
@given(data=forged_data)
def test_no_data_a_tool_pauses_with_lets_a_worker_resume_before_a_person_answers(
    data: Any,
) -> None:
    """Whatever JSON a tool pauses with (claims of a review, of a call in doubt, its own
    real idempotency key and digest), the pause is a tool's, a reload says the same, and a
    worker resumes the thread only once a person answers; the model then reads the answer."""
    seen: list[ProviderRequest] = []
    make_config = asking_config(data, seen)
    with open_store("memory://") as store:
        store.submit("t", "Go.")
        assert Worker(store, make_config).run(once=True).steps == 1
        for state in (store.state_at("t"), store.replay_state("t")):
            assert state.status is ThreadStatus.INTERRUPTED
            assert [(p.kind, p.resolved) for p in state.pauses] == [(PauseKind.INTERRUPT, False)]
            assert state.waiting_for == "person"
        assert store.load("t").pauses == store.state_at("t").pauses

        asked = len(seen)
        assert Worker(store, make_config).run(once=True).steps == 0
        assert len(seen) == asked and store.state_at("t").status is ThreadStatus.INTERRUPTED

        service = ThreadService(store, verifier=VERIFIER)
        service.answer("t", "a1", "Account 7.", reviewer=service.reviewer(RITA))
        assert Worker(store, make_config).run(once=True).steps == 1
        state = store.state_at("t")
        assert state.status is ThreadStatus.FINISHED
        assert seen[-1].messages[-1] == Message(Role.USER, "Account 7.")
        assert state.messages[-1].content == "Read: Account 7."
        assert store.replay_state("t") == state


def test_an_in_doubt_claim_on_a_call_its_tool_paused_reads_as_a_tools_pause() -> None:
    """A stored pause that claims to be in doubt and names the call's real idempotency
    key (as the upcaster reads a record of the code before kinds, whose tool put its key
    and the model's ``in_doubt`` in its data) is a tool's pause once the call's result
    says its tool paused: it waits for a person's answer, not for a runner."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    thread = AgentThread.start("legacy", now=now)
    start_bare_run(thread, now=now)
    asked = ToolCall("a1", "ask", '{"in_doubt": true}')
    thread.append_message(Message(Role.ASSISTANT, "", tool_calls=(asked,)), now=now)
    thread.call_tools([asked], now=now)
    key = thread.open_calls["a1"].idempotency_key
    data = {"in_doubt": True, "tool_call_id": "a1", "idempotency_key": key}
    claimed = Interrupt("a person must answer", data, "a1", "ask", PauseKind.IN_DOUBT)
    thread.trigger_event(AgentThread.Interrupted, interrupt=claimed, timestamp=now)
    thread.record_tool_result("a1", "Paused.", ToolOutcome.INTERRUPTED, now=now)
    assert [(p.kind, p.resolved) for p in thread.pauses] == [(PauseKind.INTERRUPT, False)]
    assert thread.state.waiting_for == "person"
    thread.answer("a1", "Account 7.", by="rita", now=now)
    assert [(p.kind, p.resolved) for p in thread.pauses] == [(PauseKind.INTERRUPT, True)]


class _Crash(BaseException):
    """Stands for the death of the runner's process inside a tool."""


def test_a_call_in_doubt_run_again_that_pauses_waits_for_a_persons_answer(store: Store) -> None:
    """A call left in doubt by a dead runner, run again at a person's request, whose tool
    then pauses: the thread stays paused on the tool's pause (the model is not asked)
    until a person answers it; a worker then resumes it and the model reads the answer."""
    keys: list[str] = []
    seen: list[ProviderRequest] = []

    def ask(ctx: ToolContext, args: dict[str, Any]) -> Any:
        keys.append(ctx.idempotency_key)
        if len(keys) == 1:
            raise _Crash
        raise InterruptError("a person must answer", {"question": "Which account?"})

    def model(request: ProviderRequest) -> ProviderResponse:
        seen.append(request)
        if any(m.role is Role.TOOL for m in request.messages):
            return answer(f"Read: {request.messages[-1].content}")
        return call(("a1", "ask", "{}"))

    def make_config(thread_id: str) -> AgentConfig:
        tools = [Tool("ask", "Ask a person", OBJECT, ask)]
        return AgentConfig(
            provider=ScriptedProvider(respond=model), tools=tools, reviewer_verifier=VERIFIER
        )

    store.submit("t", "Go.")
    with pytest.raises(_Crash):
        Worker(store, make_config).run(once=True)
    Worker(store, make_config).run(once=True)  # pauses it on the call in doubt
    assert [p.kind for p in store.state_at("t").pauses] == [PauseKind.IN_DOUBT]
    service = ThreadService(store, verifier=VERIFIER)
    rita = service.reviewer(RITA)
    service.request_retry("t", "a1", reviewer=rita)
    asked = len(seen)
    assert Worker(store, make_config).run(once=True).steps == 1
    state = store.state_at("t")
    assert keys == [keys[0], keys[0]] and len(seen) == asked
    assert state.status is ThreadStatus.INTERRUPTED and state.waiting_for == "person"
    assert {p.kind for p in state.pauses} == {PauseKind.INTERRUPT}
    assert Worker(store, make_config).run(once=True).steps == 0 and len(seen) == asked

    service.answer("t", "a1", "Account 7.", reviewer=rita)
    assert Worker(store, make_config).run(once=True).steps == 1
    state = store.state_at("t")
    assert state.status is ThreadStatus.FINISHED and len(keys) == 2
    assert state.messages[-1].content == "Read: Account 7."
