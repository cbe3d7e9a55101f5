"""The AG-UI endpoint against a hostile browser and a failing server: what the chat
front end is told of a failure, and which requests a page on another origin can make.

Requests go through Starlette's test client on a real SQLite store; the events are read
back with the ``ag-ui-protocol`` package's own event types.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import socket
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import ag_ui.core as agui
import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from covonaut_es import (
    AgentConfig,
    ProviderRequest,
    ProviderResponse,
    ScriptedProvider,
    Tool,
    ToolCall,
)
from covonaut_es.agui import create_agui_app
from covonaut_es.domain import AgentThread, ThreadStatus, thread_aggregate_id
from covonaut_es.errors import (
    IdentityProviderUnavailableError,
    ProviderConnectionError,
    ProviderError,
    ProviderRequestError,
    StoreUnavailableError,
    ThreadBusyError,
)
from covonaut_es.messages import Role, StreamDelta, ToolCallDelta
from covonaut_es.store._dictionary import ZstdDictionaryCompressor
from covonaut_es.store._topic_codes import stored_forms
from inbox_support import free_port
from support import HeldProvider, sqlite_key
from test_agui import Shop, approvals, events_of, model, paused, user_says

SECRET_TEXT = "sk-proj-DoNotShowThisKey"
"""What a failing provider or callback puts in its error: a stand-in for a key."""

RUNS = itertools.count()

FAILURES = st.sampled_from(
    [
        RuntimeError,
        KeyError,
        OSError,
        ValueError,
        ProviderError,
        ProviderRequestError,
        ProviderConnectionError,
        StoreUnavailableError,
    ]
)


def failing_app(shop: Shop, failure: type[Exception], secret: str) -> TestClient:
    """The shop's endpoint, with a provider that raises ``failure(secret)``."""

    def raising(request: ProviderRequest) -> ProviderResponse:
        raise failure(secret)

    def make_config(thread_id: str) -> AgentConfig:
        return attrs.evolve(shop.make_config(thread_id), provider=ScriptedProvider(respond=raising))

    app = create_agui_app(shop.store, make_config, shop.verifier)
    return TestClient(app, raise_server_exceptions=False)


@pytest.fixture
def shop(tmp_path: Path) -> Shop:
    return Shop(tmp_path)


@settings(
    max_examples=16,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    failure=FAILURES,
    secret=st.text(min_size=4, max_size=20).map(lambda s: SECRET_TEXT + s),
)
def test_a_failure_on_the_server_ends_the_run_with_an_error_that_tells_nothing_of_it(
    shop: Shop, failure: type[Exception], secret: str, caplog: Any
) -> None:
    """Whatever a provider raises mid-run (its error may quote a key), the stream ends
    with a RUN_ERROR that names the error's kind but none of its text nor the store's
    location; the server's log has the error."""
    client = failing_app(shop, failure, secret)
    thread_id = f"fail-{next(RUNS)}"
    with caplog.at_level(logging.ERROR, logger="covonaut_es"):
        response = client.post("/", json=user_says(thread_id, "hi"))
    assert response.status_code == 200
    events = events_of(response.text)
    assert isinstance(events[-1], agui.RunErrorEvent), events[-1]
    assert SECRET_TEXT not in response.text
    assert json.dumps(SECRET_TEXT)[1:-1] not in response.text
    assert shop.store.url not in response.text
    assert "server's log" in events[-1].message
    assert SECRET_TEXT in caplog.text  # the operator still learns what failed


def test_a_thread_busy_with_another_run_is_refused_without_naming_the_store(
    shop: Shop,
) -> None:
    """A second run on a thread while a first one streams ends with RUN_ERROR
    ThreadBusyError, which says to try again but neither where the store is nor its
    file, nor which process on which host holds it; the first run goes on to its pause."""
    held = HeldProvider(respond=model)

    def make_config(thread_id: str) -> AgentConfig:
        return attrs.evolve(shop.make_config(thread_id), provider=held)

    client = TestClient(create_agui_app(shop.store, make_config, shop.verifier))
    first: dict[str, Any] = {}
    running = threading.Thread(
        target=lambda: first.update(
            r=client.post("/", json=user_says("busy", "Refund my two orders."))
        )
    )
    running.start()
    try:
        for _ in range(200):  # until the first run holds the thread's lease (at most 10 s)
            if shop.store.exists("busy"):
                break
            threading.Event().wait(0.05)
        second = client.post("/", json=user_says("busy", "Again.", message_id="u-2"))
    finally:
        held.go.set()
        running.join(30)
    events = events_of(second.text)
    assert isinstance(events[-1], agui.RunErrorEvent)
    assert events[-1].code == "ThreadBusyError"
    assert "try again" in events[-1].message
    assert shop.store.url not in second.text
    assert "threads.db" not in second.text
    assert socket.gethostname() not in second.text
    assert f"pid {os.getpid()}" not in second.text
    finished = events_of(first["r"].text)[-1]
    assert isinstance(finished, agui.RunFinishedEvent)


JSON_TYPES = ["application/json", "application/json; charset=utf-8", "Application/JSON"]
SIMPLE_TYPES = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
"""The types a page on another origin may POST with no CORS preflight."""


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    content_type=st.one_of(
        st.sampled_from([*SIMPLE_TYPES, "", "text/plain; charset=utf-8", "application/jsonx"]),
        st.from_regex(r"\A[a-z]{1,10}/[a-z+.-]{1,12}\Z").filter(
            lambda t: t.split(";")[0].lower() != "application/json"
        ),
    )
)
def test_a_run_request_that_is_not_typed_as_json_is_refused_before_anything_runs(
    shop: Shop, content_type: str
) -> None:
    """A run request is taken only as ``application/json``, a type no page on another
    origin can send without the browser asking the server first (CORS preflight): any
    other type, as a cross-site form or ``fetch`` in no-cors mode sends, is a 415 and
    runs and stores nothing."""
    body = json.dumps(user_says("csrf", "Refund everything.")).encode()
    headers = {"content-type": content_type} if content_type else {}
    response = shop.client.post("/", content=body, headers=headers)
    assert response.status_code == 415, response.text
    assert "application/json" in response.json()["error"]
    assert not shop.store.exists("csrf")


def test_a_run_request_typed_as_json_runs_whatever_its_parameters(shop: Shop) -> None:
    """``application/json`` is taken in any case of its letters and with parameters."""
    for number, content_type in enumerate(JSON_TYPES):
        body = json.dumps(user_says(f"typed-{number}", "Refund my two orders.")).encode()
        response = shop.client.post("/", content=body, headers={"content-type": content_type})
        assert response.status_code == 200, response.text
        assert isinstance(events_of(response.text)[-1], agui.RunFinishedEvent)


def served(app: Any) -> tuple[Any, threading.Thread, int]:
    """``app`` served by uvicorn on a free loopback port, in a thread of its own."""
    import uvicorn

    chosen = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=chosen, log_level="warning", ws="none")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    stop = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < stop, "uvicorn did not start"
        time.sleep(0.02)
    return server, thread, chosen


def lease_is_free(shop: Shop, thread_id: str) -> bool:
    """Whether a runner could take the thread's run lease now (it is let go at once)."""
    try:
        with shop.store.lease(thread_id):
            return True
    except ThreadBusyError:
        return False


def test_a_client_gone_mid_answer_leaves_the_last_commit_and_frees_the_thread(
    shop: Shop,
) -> None:
    """A chat client that drops its connection mid-answer, over real HTTP, stops the
    run at its last commit: the thread is not left held (the next request is no
    ThreadBusyError), nothing of the cut answer is stored, and the next request runs
    on to where an uncut run gets."""
    held = HeldProvider(respond=model)

    def make_config(thread_id: str) -> AgentConfig:
        return attrs.evolve(shop.make_config(thread_id), provider=held)

    server, thread, port = served(create_agui_app(shop.store, make_config, shop.verifier))
    try:
        body = json.dumps(user_says("cut", "Refund my two orders.")).encode()
        request = (
            b"POST / HTTP/1.1\r\nHost: chat\r\nContent-Type: application/json\r\n"
            b"Accept: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body)
        ) + body
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(request)
            received = b""
            stop = time.monotonic() + 10
            while b"TEXT_MESSAGE_CONTENT" not in received:
                assert time.monotonic() < stop, received
                chunk = client.recv(4096)
                assert chunk, received
                received += chunk
        version = shop.version("cut")
        stop = time.monotonic() + 10
        while not lease_is_free(shop, "cut"):  # until the server stopped the run
            assert time.monotonic() < stop, "the run went on holding the thread"
            time.sleep(0.05)
        held.go.set()  # the model would go on: nothing may read it now
        time.sleep(0.2)
        assert shop.version("cut") == version
        thread_state = shop.store.load("cut")
        assert thread_state.status is ThreadStatus.RUNNING
        assert not [m for m in thread_state.messages if m.role is Role.ASSISTANT]
        events = shop.run(user_says("cut", "Refund my two orders.", message_id="msg-0"))
    finally:
        held.go.set()
        server.should_exit = True
        thread.join(10)
    assert isinstance(events[-1], agui.RunFinishedEvent), events[-1]
    assert isinstance(events[-1].outcome, agui.RunFinishedInterruptOutcome)
    assert len(events[-1].outcome.interrupts) == 2


# A hostile stored row -------------------------------------------------------------------

TAMPERINGS = st.one_of(
    st.sampled_from(["digest", "tool_name", "arguments"]).map(lambda key: ("drop", key, None)),
    st.tuples(
        st.just("set"),
        st.sampled_from(["digest", "tool_name", "arguments"]),
        st.one_of(
            st.none(),
            st.text(max_size=20),
            st.dictionaries(st.sampled_from(["order", "amount"]), st.integers(0, 10**6)),
        ),
    ),
)


def tamper_with_review_pause(shop: Shop, thread_id: str, change: tuple[str, str, Any]) -> None:
    """Rewrite the stored record of the thread's last review pause, as someone who can
    write the database but holds no key could: its data says other things than the
    review request does."""
    path = shop.store.url.removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        originator = sqlite_key(thread_aggregate_id(thread_id))
        version, state = db.execute(
            "SELECT originator_version, state FROM stored_events WHERE topic IN (?, ?) "
            "AND originator_id = ? ORDER BY originator_version DESC LIMIT 1",
            (*stored_forms([AgentThread.Interrupted]), originator),
        ).fetchone()
        compressor = ZstdDictionaryCompressor()  # the store's: its dictionary is public
        payload = json.loads(compressor.decompress(state))
        how, key, value = change
        if how == "drop":
            payload["interrupt"]["data"].pop(key)
        else:
            payload["interrupt"]["data"][key] = value
        db.execute(
            "UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = ?",
            (compressor.compress(json.dumps(payload).encode()), originator, version),
        )


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(change=TAMPERINGS)
def test_a_review_is_shown_and_decided_as_its_request_whatever_its_stored_pause_says(
    shop: Shop, change: tuple[str, str, Any]
) -> None:
    """A review pause whose stored data was altered (the digest, tool or arguments
    dropped or changed) is still shown as its review request holds it, the operation
    the digest is computed from, so the arguments a reviewer approves are the ones that
    run; the stream always ends with RUN_FINISHED or RUN_ERROR."""
    thread_id = f"tampered-{next(RUNS)}"
    paused(shop, thread_id)
    pending = shop.store.load(thread_id).reviews.pending
    requests = {review.request.review_id: review.request for review in pending}
    tamper_with_review_pause(shop, thread_id, change)
    events = shop.run(user_says(thread_id, "Refund my two orders.", message_id="msg-0"))
    finished = events[-1]
    assert isinstance(finished, agui.RunFinishedEvent | agui.RunErrorEvent), finished
    if isinstance(finished, agui.RunErrorEvent):
        return
    assert isinstance(finished.outcome, agui.RunFinishedInterruptOutcome)
    for interrupt in finished.outcome.interrupts:
        request = requests[interrupt.id]
        assert interrupt.metadata["covonaut"] == {  # type: ignore[index]
            "digest": request.digest,
            "tool_name": request.tool_name,
            "arguments": request.arguments,
        }


# A hostile provider ------------------------------------------------------------------


def echo_config(shop: Shop, script: list[Any]) -> Any:
    """The shop's configuration with an ``echo`` tool (no review) and ``script``."""

    def make_config(thread_id: str) -> AgentConfig:
        echo = Tool("echo", "Echo", {"type": "object"}, lambda ctx, args: f"echoed {args['n']}")
        return attrs.evolve(
            shop.make_config(thread_id), provider=ScriptedProvider(script), tools=[echo]
        )

    return make_config


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    order=st.permutations(range(3)),
    ids=st.lists(st.sampled_from(["a", "b", "c", "", "msg-1"]), min_size=3, max_size=3),
)
def test_a_result_is_never_told_under_another_calls_streamed_id(
    shop: Shop, order: list[int], ids: list[str]
) -> None:
    """Whatever order a provider gives its whole calls in after streaming their pieces,
    and whatever ids (repeated, empty) the model sent, a TOOL_CALL_RESULT never names a
    streamed call other than the one it is the result of."""
    calls = [ToolCall(ids[n], "echo", json.dumps({"n": n})) for n in range(3)]
    pieces = [
        StreamDelta(
            tool_call_deltas=(ToolCallDelta(index=n, id=c.id, name=c.name, arguments=c.arguments),)
        )
        for n, c in enumerate(calls)
    ]
    whole = StreamDelta(tool_calls=tuple(calls[n] for n in order))
    app = create_agui_app(
        shop.store,
        echo_config(shop, [(*pieces, whole), ProviderResponse(content="done")]),
        shop.verifier,
    )
    events = events_of(
        TestClient(app).post("/", json=user_says(f"hostile-{next(RUNS)}", "go")).text
    )
    shown: dict[str, str] = {}
    for event in events:
        if isinstance(event, agui.ToolCallArgsEvent):
            shown[event.tool_call_id] = shown.get(event.tool_call_id, "") + event.delta
    results = [e for e in events if isinstance(e, agui.ToolCallResultEvent)]
    assert len(results) == 3
    for result in results:
        if result.tool_call_id in shown:
            assert result.content == f"echoed {json.loads(shown[result.tool_call_id])['n']}"


def test_an_identity_provider_outage_is_503_and_records_nothing(shop: Shop) -> None:
    """While the reviewers' identity provider cannot be reached, a resume is answered
    503 (the token is not at fault: no 401 that would send the user to sign in again),
    names no address of the provider, and records nothing."""
    interrupts = paused(shop)
    body = {**user_says("chat-1", "Refund my two orders."), "resume": approvals(interrupts)}
    version = shop.version("chat-1")

    class Outage:
        def verify(self, credential: Any) -> str:
            msg = "the keys could not be fetched from https://idp.internal.example/jwks"
            raise IdentityProviderUnavailableError(msg)

    app = create_agui_app(shop.store, shop.make_config, Outage())
    response = TestClient(app).post(
        "/", json=body, headers={"Authorization": f"Bearer {shop.token()}"}
    )
    assert response.status_code == 503, response.text
    assert "idp.internal.example" not in response.text
    assert shop.version("chat-1") == version
    assert shop.refunded == []
