"""The AG-UI endpoint: a thread run for a chat front end, its pauses ended with AG-UI
interrupts named by review id, and resumes that are verified, digest-bound decisions.

Requests go through Starlette's test client; the events are read back with the
``ag-ui-protocol`` package's own event types.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import re
import tempfile
import threading
import unicodedata
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import ag_ui.core as agui
import attrs
import pydantic
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    HmacReviewerVerifier,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Store,
    TextDelta,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)
from covonaut_es.agui import create_agui_app
from covonaut_es.domain import ThreadStatus
from covonaut_es.messages import StreamDelta, ToolCallDelta
from covonaut_es.runtime._config import bound_config
from covonaut_es.service import ThreadService
from hostile_text import hostile_text
from support import HIDDEN, HeldProvider, conversation, earlier_thread_id_rule, ticking_clock

SECRET = b"a reviewer secret of at least 32 bytes"
EVENTS: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(agui.Event)
REFUNDS = {"A-1": 30, "B-2": 45}


def model(request: ProviderRequest) -> ProviderResponse:
    """Refund both orders in one turn (two calls that need approval); once decided, call
    again each approved refund (with the reviewer's arguments, if edited); then report."""
    messages = request.messages
    if messages[-1].role is Role.USER:
        return ProviderResponse(
            content="Refunding both orders.",
            tool_calls=tuple(
                ToolCall(f"call-{order}", "refund", json.dumps({"order": order, "amount": amount}))
                for order, amount in REFUNDS.items()
            ),
        )
    asked = max(i for i, m in enumerate(messages) if m.role is Role.ASSISTANT)
    calls = {call.id: call for call in messages[asked].tool_calls}
    results = [m for m in messages[asked + 1 :] if m.role is Role.TOOL]
    again = []
    for result in results:
        if result.content.startswith("Approved") and result.tool_call_id in calls:
            edited = re.search(r"with edited arguments (\{.*?\})[.:]", result.content)
            arguments = edited.group(1) if edited else calls[result.tool_call_id].arguments
            again.append(ToolCall(f"{result.tool_call_id}-again", "refund", arguments))
    if again:
        return ProviderResponse(tool_calls=tuple(again))
    return ProviderResponse(content="Done: " + "; ".join(r.content for r in results))


class Shop:
    """The application behind the endpoint: its store, its refunds, its reviewers."""

    def __init__(self, tmp_path: Path, *, run_on_approval: bool = False) -> None:
        self.run_on_approval = run_on_approval
        self.store: Store = open_store(f"sqlite:///{tmp_path / 'threads.db'}")
        self.verifier = HmacReviewerVerifier(SECRET)
        self.refunded: list[dict[str, Any]] = []
        self.client = TestClient(create_agui_app(self.store, self.make_config, self.verifier))

    def refund(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        self.refunded.append(args)
        return f"refunded {args['amount']} on {args['order']}"

    def make_config(self, thread_id: str) -> AgentConfig:
        schema = {
            "type": "object",
            "properties": {"order": {"type": "string"}, "amount": {"type": "number"}},
        }
        return AgentConfig(
            provider=ScriptedProvider(respond=model),
            tools=[
                Tool(
                    "refund",
                    "Refund an order",
                    schema,
                    self.refund,
                    requires_approval=True,
                    run_on_approval=self.run_on_approval,
                )
            ],
            clock=ticking_clock(),
        )

    def token(self, reviewer: str = "alice") -> str:
        return self.verifier.issue_token(reviewer, ttl_seconds=600)

    def post(self, body: Any, token: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return self.client.post("/", json=body, headers=headers)

    def run(self, body: Any, token: str | None = None) -> list[Any]:
        """The events of one run request, decoded with the protocol's own types."""
        response = self.post(body, token)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/event-stream")
        return events_of(response.text)

    def version(self, thread_id: str) -> int:
        return self.store.load(thread_id).version if self.store.exists(thread_id) else 0


def events_of(text: str) -> list[Any]:
    frames = [frame for frame in text.split("\n\n") if frame.strip()]
    assert all(frame.startswith("data: ") for frame in frames)
    return [EVENTS.validate_json(frame.removeprefix("data: ")) for frame in frames]


def user_says(thread_id: str, text: str, message_id: str = "u-1", **fields: Any) -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "runId": f"run-{message_id}",
        "messages": [{"id": message_id, "role": "user", "content": text}],
        **fields,
    }


def of_type(events: list[Any], event_type: type[Any]) -> list[Any]:
    return [event for event in events if isinstance(event, event_type)]


def approvals(
    interrupts: list[agui.Interrupt], *, approved: bool = True, **payload: Any
) -> list[dict[str, Any]]:
    """A resume entry approving (or rejecting) each interrupt, bound to the digest it
    carries."""
    return [
        {
            "interruptId": interrupt.id,
            "status": "resolved",
            "payload": {
                "approved": approved,
                "digest": interrupt.metadata["covonaut"]["digest"],  # type: ignore[index]
                **payload,
            },
        }
        for interrupt in interrupts
    ]


@pytest.fixture
def shop(tmp_path: Path) -> Shop:
    return Shop(tmp_path)


def paused(shop: Shop, thread_id: str = "chat-1") -> list[agui.Interrupt]:
    """Run the thread until it pauses on its two reviews; their interrupts."""
    events = shop.run(user_says(thread_id, "Refund my two orders."))
    finished = events[-1]
    assert isinstance(finished, agui.RunFinishedEvent)
    assert isinstance(finished.outcome, agui.RunFinishedInterruptOutcome)
    return finished.outcome.interrupts


def test_a_run_streams_its_answer_and_its_tool_calls_in_the_protocols_order(shop: Shop) -> None:
    """A run is RUN_STARTED, the streamed text and tool calls, the snapshots, then
    RUN_FINISHED; the streamed text is the committed message's."""
    events = shop.run(user_says("chat-1", "Refund my two orders."))
    types = [event.type for event in events]
    assert types[0] == agui.EventType.RUN_STARTED
    assert types[-3:] == [
        agui.EventType.MESSAGES_SNAPSHOT,
        agui.EventType.STATE_SNAPSHOT,
        agui.EventType.RUN_FINISHED,
    ]
    text = "".join(e.delta for e in of_type(events, agui.TextMessageContentEvent))
    assert text == "Refunding both orders."
    (start,) = of_type(events, agui.TextMessageStartEvent)
    (end,) = of_type(events, agui.TextMessageEndEvent)
    assert start.message_id == end.message_id
    started = of_type(events, agui.ToolCallStartEvent)
    assert [(e.tool_call_id, e.tool_call_name) for e in started] == [
        ("call-A-1", "refund"),
        ("call-B-2", "refund"),
    ]
    assert {e.parent_message_id for e in started} == {start.message_id}
    for call in started:
        arguments = "".join(
            e.delta
            for e in of_type(events, agui.ToolCallArgsEvent)
            if e.tool_call_id == call.tool_call_id
        )
        assert json.loads(arguments)["order"] == call.tool_call_id.removeprefix("call-")
    assert len(of_type(events, agui.ToolCallEndEvent)) == 2
    (snapshot,) = of_type(events, agui.MessagesSnapshotEvent)
    assistant = next(m for m in snapshot.messages if m.role == "assistant")
    assert (assistant.id, assistant.content) == (start.message_id, text)
    assert types[1] == agui.EventType.STATE_SNAPSHOT  # what the deltas apply to
    versions = [e.delta[0].value for e in of_type(events, agui.StateDeltaEvent)]
    assert versions == sorted(versions)
    assert of_type(events, agui.StateSnapshotEvent)[-1].snapshot["version"] == versions[-1]


def test_a_pause_on_two_reviews_ends_with_two_interrupts_named_by_review_id(shop: Shop) -> None:
    """Two calls that need approval in one turn end the run with an interrupt outcome of
    two interrupts, whose ids are the thread's review ids, each bound to its call and
    its operation's digest; nothing ran."""
    interrupts = paused(shop)
    thread = shop.store.load("chat-1")
    pending = {review.request.review_id: review.request for review in thread.reviews.pending}
    assert {i.id for i in interrupts} == set(pending)
    for interrupt in interrupts:
        request = pending[interrupt.id]
        assert interrupt.reason == "tool_call"
        assert interrupt.tool_call_id == request.tool_call_id
        assert interrupt.metadata["covonaut"]["digest"] == request.digest  # type: ignore[index]
        assert interrupt.response_schema["properties"]["digest"] == {"const": request.digest}  # type: ignore[index]
    assert shop.refunded == []


def test_a_resume_with_two_verified_decisions_runs_both_calls_and_finishes(shop: Shop) -> None:
    """A resume approving both interrupts, with a reviewer's token, records two decisions
    under that reviewer, runs each call once and finishes with the answer."""
    interrupts = paused(shop)
    body = {**user_says("chat-1", "Refund my two orders."), "resume": approvals(interrupts)}
    events = shop.run(body, shop.token("alice"))
    finished = events[-1]
    assert isinstance(finished, agui.RunFinishedEvent)
    assert isinstance(finished.outcome, agui.RunFinishedSuccessOutcome)
    assert sorted(r["order"] for r in shop.refunded) == ["A-1", "B-2"]
    results = of_type(events, agui.ToolCallResultEvent)
    assert [r.tool_call_id for r in results] == [
        "call-A-1",  # the decisions, recorded as the reviewed calls' results
        "call-B-2",
        "call-A-1-again",
        "call-B-2-again",
    ]
    assert results[0].content.startswith("Approved by alice")
    (snapshot,) = of_type(events, agui.MessagesSnapshotEvent)
    stored = {m.id: m for m in snapshot.messages}
    for result in results:
        assert stored[result.message_id].tool_call_id == result.tool_call_id
        assert stored[result.message_id].content == result.content
    thread = shop.store.load("chat-1")
    assert thread.status is ThreadStatus.FINISHED
    decided = [e for e in shop.store.history("chat-1") if isinstance(e, AgentThread.ReviewDecided)]
    assert {(e.review_id, e.reviewer) for e in decided} == {(i.id, "alice") for i in interrupts}
    assert "Done: refunded 30 on A-1; refunded 45 on B-2" in "".join(
        e.delta for e in of_type(events, agui.TextMessageContentEvent)
    )


def test_a_resume_runs_calls_that_run_on_approval_without_calling_them_again(
    tmp_path: Path,
) -> None:
    """With run_on_approval, the resume's approvals run the reviewed calls themselves,
    one with the reviewer's edit; their results are the tools' own, then the answer."""
    shop = Shop(tmp_path, run_on_approval=True)
    interrupts = paused(shop)
    resume = approvals(interrupts[:1]) + approvals(
        interrupts[1:], editedArgs={"order": "B-2", "amount": 40}
    )
    events = shop.run({**user_says("chat-1", "Refund my orders."), "resume": resume}, shop.token())
    finished = events[-1]
    assert isinstance(finished, agui.RunFinishedEvent)
    assert isinstance(finished.outcome, agui.RunFinishedSuccessOutcome)
    results = of_type(events, agui.ToolCallResultEvent)
    assert [r.tool_call_id for r in results] == ["call-A-1", "call-B-2"]
    assert results[0].content == "refunded 30 on A-1"
    assert results[1].content.endswith("refunded 40 on B-2")
    assert sorted(r["amount"] for r in shop.refunded) == [30, 40]


def test_parallel_interrupts_are_routed_by_review_id_whatever_their_order(shop: Shop) -> None:
    """The decisions of one resume reach the reviews their ids name, in any order: one
    approval edited, one rejection, and only the approved operation runs."""
    interrupts = sorted(paused(shop), key=lambda i: i.tool_call_id or "", reverse=True)
    by_call = {i.tool_call_id: i for i in interrupts}
    reject = by_call["call-A-1"]
    resume = [
        {
            "interruptId": reject.id,
            "status": "resolved",
            "payload": {
                "approved": False,
                "digest": reject.metadata["covonaut"]["digest"],  # type: ignore[index]
                "reason": "Order A-1 was already refunded.",
            },
        },
        *approvals([by_call["call-B-2"]], editedArgs={"order": "B-2", "amount": 40}),
    ]
    events = shop.run({**user_says("chat-1", "x"), "resume": resume}, shop.token())
    assert isinstance(events[-1], agui.RunFinishedEvent)
    assert shop.refunded == [{"order": "B-2", "amount": 40}]


def test_a_reload_mid_run_picks_the_run_up_from_the_store(shop: Shop) -> None:
    """A request carrying only the messages the endpoint sent (a reloaded UI) runs
    nothing new while the thread is paused, and announces its interrupts again; a run
    cut short by a reload goes on, streamed, to where an uncut run gets."""
    interrupts = paused(shop)
    again = shop.run(user_says("chat-1", "Refund my two orders.", message_id="msg-0"))
    finished = again[-1]
    assert isinstance(finished.outcome, agui.RunFinishedInterruptOutcome)
    assert {i.id for i in finished.outcome.interrupts} == {i.id for i in interrupts}
    assert not of_type(again, agui.TextMessageContentEvent)

    held = HeldProvider(respond=model)
    config = bound_config(shop.make_config, shop.store, "chat-2")
    agent = Agent(attrs.evolve(config, provider=held))

    async def cut_after_the_first_piece() -> None:
        async with contextlib.aclosing(agent.astream("Refund my two orders.")) as items:
            async for item in items:
                if isinstance(item, TextDelta):
                    break
        held.go.set()

    asyncio.run(cut_after_the_first_piece())
    assert shop.store.load("chat-2").status is ThreadStatus.RUNNING
    events = shop.run(user_says("chat-2", "Refund my two orders.", message_id="msg-0"))
    text = "".join(e.delta for e in of_type(events, agui.TextMessageContentEvent))
    assert text == "Refunding both orders."
    assert isinstance(events[-1].outcome, agui.RunFinishedInterruptOutcome)
    assert len(events[-1].outcome.interrupts) == 2


class _ProcessDied(BaseException):
    """Stands in for the server's task cancelled, or its process killed, mid-call."""


def test_a_reload_of_a_run_cut_short_mid_call_announces_the_calls_in_doubt(shop: Shop) -> None:
    """A run cut short between a call and its result (the front end left while the tool
    ran) is, at its next reload, paused on each call in doubt, as a worker pauses it:
    the reload ends with a ``covonaut:in_doubt`` interrupt per call, which the reviewer
    queue lists too, and runs nothing. (Each reload answered RUN_ERROR
    ToolCallsInDoubtError, and the thread stayed running with nothing for a person to
    act on; helper-109.)"""

    def dies(ctx: ToolContext, args: dict[str, Any]) -> str:
        raise _ProcessDied

    config = bound_config(shop.make_config, shop.store, "cut")
    dying = Tool("refund", "Refund an order", {"type": "object"}, dies)
    with contextlib.suppress(_ProcessDied):
        Agent(attrs.evolve(config, tools=[dying])).run("Refund my two orders.")
    assert shop.store.load("cut").status is ThreadStatus.RUNNING

    events = shop.run(user_says("cut", "Refund my two orders.", message_id="msg-0"))
    finished = events[-1]
    assert isinstance(finished, agui.RunFinishedEvent)
    assert isinstance(finished.outcome, agui.RunFinishedInterruptOutcome)
    kinds = {i.reason for i in finished.outcome.interrupts}
    assert kinds == {"covonaut:in_doubt"}, kinds
    thread = shop.store.load("cut")
    assert thread.status is ThreadStatus.INTERRUPTED
    assert {p.interrupt.tool_call_id for p in thread.pauses} == {c.call.id for c in thread.in_doubt}
    assert shop.refunded == []


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    length=st.sampled_from([b"\xb2", b"\xd9\xa3", b"1" * 5000, b"-1", b" 9", b"0x10", b""])
    | st.binary(max_size=30)
)
def test_a_content_length_that_is_no_ascii_number_is_refused_as_missing(
    shop: Shop, length: bytes
) -> None:
    """A Content-Length that writes no whole number in ASCII digits (a superscript,
    another script's digit, 5,000 digits) is answered 411, or 413 when too large, never
    500 (the endpoint's ``int`` raised ValueError on what ``isdigit`` let through)."""
    body = json.dumps(user_says("c", "hi")).encode()
    before = shop.version("c")  # the shop serves every example: one may have run
    response = shop.client.post(
        "/", content=body, headers={"content-type": "application/json", "content-length": length}
    )
    assert response.status_code in (200, 400, 411, 413), response.text
    if response.status_code != 200:
        assert shop.version("c") == before


def test_a_reload_of_a_thread_given_up_offers_no_decision(shop: Shop) -> None:
    """A thread abandoned while it waited on reviews is, at its next reload, refused
    with the reason, and no interrupt asks the front end for a decision that every
    command would refuse (it ended with both reviews as interrupts; helper-120)."""
    paused(shop)
    ThreadService(shop.store).abandon("chat-1", "the customer withdrew")
    version = shop.version("chat-1")

    events = shop.run(user_says("chat-1", "Refund my two orders."))
    assert [type(e) for e in events] == [
        agui.RunStartedEvent,
        agui.StateSnapshotEvent,
        agui.RunErrorEvent,
    ]
    assert "abandoned" in events[-1].message
    assert shop.version("chat-1") == version
    assert shop.refunded == []


def test_a_request_that_is_no_run_input_is_refused_before_anything_runs(shop: Shop) -> None:
    """A body that is no RunAgentInput, JSON that names a key twice, a thread id that
    is none (a new thread's id with a space other than ASCII's too, 422 before the
    stream), and a new message that is not text are refused (422, or RUN_ERROR naming
    the error); nothing is stored."""
    missing = shop.client.post("/", json={"threadId": "chat-1"})
    assert missing.status_code == 422
    assert "RunAgentInput" in missing.json()["error"]
    twice = b'{"threadId": "chat-1", "threadId": "chat-2", "runId": "r", "messages": []}'
    repeated = shop.client.post("/", content=twice, headers={"content-type": "application/json"})
    assert repeated.status_code == 422
    assert "twice" in repeated.json()["error"]
    bad_id = shop.client.post("/", json=user_says("bad\nid", "hi"))
    assert bad_id.status_code == 422
    hidden_space = shop.post(user_says("chat\u00a01", "hi"))  # shows as "chat 1"
    assert hidden_space.status_code == 422
    assert "'\\xa0' at position 4" in hidden_space.json()["error"]
    assert not shop.store.exists("chat\u00a01")
    image = {"type": "image", "source": {"type": "url", "value": "https://example.com/a.png"}}
    events = shop.run(user_says("chat-1", [image]))  # type: ignore[arg-type]
    assert isinstance(events[-1], agui.RunErrorEvent)
    assert events[-1].code == "InvalidRunInputError"
    assert not shop.store.exists("chat-1")


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=8), HIDDEN)
def test_a_new_threads_id_that_hides_a_character_is_the_clients_error(
    shop: Shop, caplog: pytest.LogCaptureFixture, visible: str, hidden: str
) -> None:
    """A new thread's id holding a character that shows nothing or is not printable is
    refused with 422 naming the character, before the stream starts and with nothing
    logged at ERROR; a thread stored under such an id by an earlier version runs on.
    It was told as a run that failed on the server, its traceback logged (helper-175)."""
    thread_id = unicodedata.normalize("NFC", visible + hidden)
    assume(unicodedata.is_normalized("NFC", thread_id) and len(thread_id) > len(visible))
    caplog.clear()
    response = shop.post(user_says(thread_id, "hi"))
    assert response.status_code == 422, response.text
    assert repr(hidden) in response.json()["error"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not shop.store.exists(thread_id)


def test_a_thread_stored_under_an_id_accepted_before_runs_through_the_endpoint(
    shop: Shop,
) -> None:
    """The endpoint runs a thread an earlier version started under an id a new thread
    may no longer take (ADR 0126)."""
    with earlier_thread_id_rule():
        conversation(shop.store, "chat\u00a01", 1)
    events = shop.run(user_says("chat\u00a01", "Refund my two orders.", message_id="u-9"))
    assert isinstance(events[-1], agui.RunFinishedEvent), events[-1]
    assert len(shop.store.load("chat\u00a01").messages) > 4


def valid_resume(shop: Shop) -> tuple[dict[str, Any], int]:
    interrupts = paused(shop)
    body = {**user_says("chat-1", "Refund my two orders."), "resume": approvals(interrupts)}
    return body, shop.version("chat-1")


def assert_refused_and_nothing_recorded(shop: Shop, response: Any, version: int) -> None:
    """Refused, or (a request left without its decisions, whose message the thread ran
    already) read as a reload, which announces the pause again; nothing recorded."""
    if response.status_code == 200:
        events = events_of(response.text)
        announced = isinstance(events[-1], agui.RunFinishedEvent) and isinstance(
            events[-1].outcome, agui.RunFinishedInterruptOutcome
        )
        assert announced or isinstance(events[-1], agui.RunErrorEvent), events[-1]
    else:
        assert 400 <= response.status_code < 500
    assert shop.version("chat-1") == version
    assert shop.refunded == []


def test_an_unsigned_or_forged_resume_is_refused_with_nothing_recorded(shop: Shop) -> None:
    """A resume without a token, with a forged one or with another secret's is refused
    with 401, the token never echoed; nothing is recorded and nothing runs."""
    body, version = valid_resume(shop)
    other = HmacReviewerVerifier(b"another secret of at least 32 bytes!!").issue_token("x", 600)
    forged = shop.token()[:-4] + "AAAA"
    for token in (None, forged, other, "not a token"):
        response = shop.post(body, token)
        assert response.status_code == 401, response.text
        assert token is None or token not in response.text  # never echoed
        assert_refused_and_nothing_recorded(shop, response, version)


def test_a_wrong_digest_or_another_threads_review_is_refused_with_nothing_recorded(
    shop: Shop,
) -> None:
    """A decision bound to another digest, an interrupt id of another thread, or a
    resume leaving one interrupt out ends in RUN_ERROR; nothing is recorded."""
    body, version = valid_resume(shop)
    others = paused(shop, "chat-other")
    wrong_digest = copy.deepcopy(body)
    wrong_digest["resume"][0]["payload"]["digest"] = "0" * 64
    elsewhere = copy.deepcopy(body)
    elsewhere["resume"][0]["interruptId"] = others[0].id
    partial = copy.deepcopy(body)
    del partial["resume"][1]
    for hostile in (wrong_digest, elsewhere, partial):
        response = shop.post(hostile, shop.token())
        assert_refused_and_nothing_recorded(shop, response, version)
        assert "RunErrorEvent" not in response.text  # the protocol's names, not ours
    assert shop.version("chat-other") > 0


# Generated: every mutation of a valid resume body is refused whole -----------------------

PATHS = [
    ("resume", 0, "interruptId"),
    ("resume", 1, "interruptId"),
    ("resume", 0, "status"),
    ("resume", 0, "payload"),
    ("resume", 0, "payload", "approved"),
    ("resume", 0, "payload", "digest"),
    ("resume", 1, "payload", "digest"),
    ("resume", 0, "payload", "editedArgs"),
    ("resume", 0, "payload", "reason"),
    ("resume", 0, "payload", "answer"),
    ("resume", 1, "payload", "comment"),
    ("resume", 0, "payload", "extra"),
    ("threadId",),
    ("resume",),
]
AS_JSON_TEXT = object()
"""Stands for the field's own value written as JSON text: the same decision in the
shape a surface that reads text takes, which this one must not."""

HOSTILE_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.text(max_size=40),
    st.just("0" * 64),
    st.just(""),
    st.just("\u200b"),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
    st.just('{"order": "B-2", "amount": 40}'),  # an edit's JSON, as a string
    st.just(AS_JSON_TEXT),
)


def mutated(body: dict[str, Any], path: tuple[Any, ...], value: Any, drop: bool) -> Any:
    result = copy.deepcopy(body)
    target = result
    for key in path[:-1]:
        target = target[key]
    if value is AS_JSON_TEXT:
        try:
            value = json.dumps(target[path[-1]])
        except (KeyError, IndexError):
            value = "{}"
    if drop:
        if isinstance(target, dict):
            target.pop(path[-1], None)
        else:
            del target[path[-1]]
    else:
        target[path[-1]] = value
    return result


def is_still_a_valid_decision(body: Any, valid: dict[str, Any]) -> bool:
    """A mutation that leaves a resume a valid set of decisions (say, a comment changed)
    is no attack; those are left out."""
    try:
        entries = body["resume"]
        return (
            body["threadId"] == valid["threadId"]
            and len(entries) == 2
            and [e["interruptId"] for e in entries] == [e["interruptId"] for e in valid["resume"]]
            and all(e["status"] == "resolved" for e in entries)
            and all(
                set(e["payload"]) <= {"approved", "digest", "comment", "editedArgs"}
                and e["payload"]["approved"] is True
                and e["payload"]["digest"] == v["payload"]["digest"]
                and isinstance(e["payload"].get("comment", ""), str)
                # left out: no edit; an object: the reviewer's edit, theirs to make (the
                # run checks it against the tool's schema before the tool sees it); null
                # or a string, refused as the inbox's API refuses them
                and isinstance(e["payload"].get("editedArgs", {}), dict)
                for e, v in zip(entries, valid["resume"], strict=True)
            )
        )
    except (KeyError, TypeError, IndexError):
        return False


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.sampled_from(PATHS), HOSTILE_VALUES, st.booleans(), st.booleans())
# An edit's JSON as a string, and null: the inbox's API refuses both (the edit is an
# object or left out), so this surface must too.
@example(("resume", 0, "payload", "editedArgs"), '{"order": "B-2", "amount": 40}', False, True)
@example(("resume", 0, "payload", "editedArgs"), None, False, True)
@example(("resume", 0, "payload"), AS_JSON_TEXT, False, True)
def test_every_mutation_of_a_valid_resume_is_refused_whole(
    tmp_path_factory: pytest.TempPathFactory,
    path: tuple[Any, ...],
    value: Any,
    drop: bool,
    signed: bool,
) -> None:
    """Whatever field of a valid resume is changed or dropped (ids, statuses, digests,
    decisions, payload shapes, the thread), with or without a token, the request is
    refused or is still exactly valid; a refusal records nothing and runs nothing."""
    shop = Shop(tmp_path_factory.mktemp("shop"))
    body, version = valid_resume(shop)
    hostile = mutated(body, path, value, drop)
    if signed and is_still_a_valid_decision(hostile, body):
        return
    response = shop.post(hostile, shop.token() if signed else None)
    assert_refused_and_nothing_recorded(shop, response, version)


# What a hostile model streams ------------------------------------------------------------

HOSTILE_TEXT = hostile_text(min_size=1, max_size=6)
PIECE = st.builds(StreamDelta, content=HOSTILE_TEXT) | st.builds(
    lambda id_, name, arguments: StreamDelta(
        tool_call_deltas=(ToolCallDelta(index=0, id=id_, name=name, arguments=arguments),)
    ),
    HOSTILE_TEXT,
    HOSTILE_TEXT,
    HOSTILE_TEXT,
)


@settings(max_examples=25, deadline=None)
@given(pieces=st.lists(PIECE, min_size=1, max_size=3))
def test_whatever_a_model_streams_the_response_ends_as_the_protocol_says(
    pieces: list[StreamDelta],
) -> None:
    """Property: whatever pieces a model streams (a lone surrogate among them, which no
    JSON encoder writes), every frame is an AG-UI event, the last a RUN_FINISHED or a
    RUN_ERROR, and the thread as stored is not left running. (A lone surrogate broke the
    response off inside the event encoder, with no RUN_ERROR and the run left running.)"""
    with tempfile.TemporaryDirectory() as directory:
        shop = Shop(Path(directory))

        def make_config(thread_id: str) -> AgentConfig:
            return attrs.evolve(
                shop.make_config(thread_id), provider=ScriptedProvider([tuple(pieces)])
            )

        client = TestClient(create_agui_app(shop.store, make_config, shop.verifier))
        response = client.post("/", json=user_says("hostile", "hello"))
        assert response.status_code == 200
        events = events_of(response.text)
        assert isinstance(events[-1], agui.RunFinishedEvent | agui.RunErrorEvent)
        assert shop.store.load("hostile").status is not ThreadStatus.RUNNING
        shop.store.close()


def test_a_factory_that_raises_is_told_by_its_kind_and_logged(
    shop: Shop, caplog: pytest.LogCaptureFixture
) -> None:
    """The application's own factory raising (not a library error) is answered as any
    other failure on the server: a JSON 500 telling its kind only, the rest logged."""

    def make_config(thread_id: str) -> AgentConfig:
        raise RuntimeError("the factory's secret detail")

    client = TestClient(create_agui_app(shop.store, make_config, shop.verifier))
    response = client.post("/", json=user_says("chat-1", "hello"))
    assert response.status_code == 500
    assert "RuntimeError" in response.json()["error"]
    assert "secret detail" not in response.text
    assert "secret detail" in caplog.text


# Two reviewers resuming one thread at once ----------------------------------------------


@settings(max_examples=8, deadline=None)
@given(first_approves=st.booleans(), second_approves=st.booleans(), reversed_=st.booleans())
def test_two_resumes_racing_are_each_recorded_whole_or_not_at_all(
    first_approves: bool, second_approves: bool, reversed_: bool
) -> None:
    """Property: two reviewers resuming one thread at once, their saves made to meet
    (each waits at its first save for the other), end with one resume recorded whole
    and the other refused with nothing recorded, whatever each decides and in whatever
    order their entries come. Decided one by one, each recorded its first decision and
    failed on its second, both were told their resume failed, and a refund ran on an
    approval its reviewer was told had failed (helper-109)."""
    with tempfile.TemporaryDirectory() as directory:
        shop = Shop(Path(directory))
        interrupts = paused(shop)
        meeting = threading.Barrier(2, timeout=10)
        to_meet = [1, 2]  # the first save of each resume's decisions
        save = shop.store.save

        def meeting_save(thread: AgentThread) -> None:
            with lock:
                meets = bool(to_meet) and to_meet.pop() > 0
            if meets:
                meeting.wait()
            save(thread)

        lock = threading.Lock()

        shop.store.save = meeting_save  # type: ignore[method-assign]
        ends: dict[str, Any] = {}

        def resume(reviewer: str, approved: bool, backwards: bool) -> None:
            payload = {} if approved else {"reason": "not today"}
            entries = approvals(interrupts, approved=approved, **payload)
            body = {
                **user_says("chat-1", "Refund my two orders."),
                "runId": reviewer,
                "resume": entries[::-1] if backwards else entries,
            }
            ends[reviewer] = shop.run(body, shop.token(reviewer))[-1]

        racers = [
            threading.Thread(target=resume, args=("dana", first_approves, False)),
            threading.Thread(target=resume, args=("erin", second_approves, reversed_)),
        ]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join(30)
        shop.store.save = save  # type: ignore[method-assign]
        thread = shop.store.load("chat-1")
        deciders = {thread.reviews.get(i.id).decision.reviewer for i in interrupts}  # type: ignore[union-attr]
        assert len(deciders) == 1, deciders
        (winner,) = deciders
        loser = "erin" if winner == "dana" else "dana"
        assert isinstance(ends[loser], agui.RunErrorEvent)
        assert ends[loser].code == "StaleReviewError"
        approved = first_approves if winner == "dana" else second_approves
        assert len(shop.refunded) == (2 if approved else 0)
        shop.store.close()


class DeadlineShop(Shop):
    """The shop, its refunds' reviews due an hour after they are asked for by the
    agent's clock (``now``, which the test moves), its store on another clock."""

    def __init__(self, tmp_path: Path, store_now: datetime) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)
        super().__init__(tmp_path)
        self.store.close()
        url = f"sqlite:///{tmp_path / 'threads.db'}"
        self.store = open_store(url, clock=lambda: store_now)
        self.client = TestClient(create_agui_app(self.store, self.make_config, self.verifier))

    def make_config(self, thread_id: str) -> AgentConfig:
        config = super().make_config(thread_id)
        (refund,) = config.tools
        assert isinstance(refund, Tool)
        tool = attrs.evolve(refund, review_deadline=timedelta(hours=1))
        return attrs.evolve(config, tools=[tool], clock=lambda: self.now)


@pytest.mark.parametrize("past_the_deadline", [False, True])
@pytest.mark.usefixtures("simulated_time")
def test_a_resume_judges_the_review_deadline_by_the_agents_clock(
    tmp_path: Path, past_the_deadline: bool
) -> None:
    """The agent's clock set the reviews' deadline, and judges a resume's decisions by
    it, as Agent.approve does: before it, the approvals run the refunds, though the
    store's clock is days past it; after it, the reviews are expired and nothing runs,
    though the store's clock is still before it."""
    store_now = (
        datetime(2025, 12, 1, tzinfo=UTC) if past_the_deadline else datetime(2026, 2, 1, tzinfo=UTC)
    )
    shop = DeadlineShop(tmp_path, store_now)
    body, _ = valid_resume(shop)
    shop.now += timedelta(hours=2 if past_the_deadline else 0, minutes=30)
    response = shop.post(body, shop.token())
    if past_the_deadline:
        assert shop.refunded == []
        assert "expired" in response.text, response.text
    else:
        events = events_of(response.text)
        assert isinstance(events[-1], agui.RunFinishedEvent), events[-1]
        assert sorted(r["order"] for r in shop.refunded) == ["A-1", "B-2"]


async def _sent(events: list[agui.BaseEvent]) -> list[dict[str, Any]]:
    from ag_ui.encoder import EventEncoder

    from covonaut_es.agui._app import _encoded

    async def given() -> Any:
        for event in events:
            yield event

    frames = [frame async for frame in _encoded(EventEncoder(), given())]
    return [json.loads(frame.removeprefix("data: ")) for frame in frames]


@settings(max_examples=12, deadline=None)
@given(depth=st.integers(1, 400))
def test_a_value_the_encoder_cannot_write_ends_the_run_in_an_error(depth: int) -> None:
    """A state nested past what the protocol's encoder writes (an imported thread's, a
    row a writer of the database changed) ends the stream with RUN_ERROR naming it,
    never with the stream stopped and nothing said."""
    nested: Any = "leaf"
    for _ in range(depth):
        nested = [nested]
    events = [
        agui.RunStartedEvent(thread_id="t", run_id="r"),
        agui.StateSnapshotEvent(snapshot={"value": nested}),
        agui.RunFinishedEvent(thread_id="t", run_id="r"),
    ]
    sent = asyncio.run(_sent(events))
    assert sent[0]["type"] == "RUN_STARTED"
    assert sent[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR")
    if sent[-1]["type"] == "RUN_ERROR":
        assert "StateSnapshotEvent could not be sent" in sent[-1]["message"]
