"""What the reviewer queue shows of a review is the operation an approval binds to: the
copies of a review's pause (its ``Interrupted`` event, a fork's ``Forked`` event) that
the queue reads are refused by the fold when they differ from what the thread holds, and
listed as altered when they do not digest to the digest they show."""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ReviewQueue,
    ScriptedProvider,
    Store,
    Tool,
    open_store,
)
from covonaut_es.cli import main
from covonaut_es.domain import AgentThread, Interrupt, PauseKind, canonical_json
from covonaut_es.domain._shown import shown_operation_fits
from covonaut_es.errors import CovonautError
from covonaut_es.projections._items import pending_from
from covonaut_es.store._topic_codes import full_topic
from support import call
from test_read_fold import _leaves, _reseal

NOW = datetime(2026, 1, 1, tzinfo=UTC)
OBJECT = {"type": "object"}


def _paused_with_fork(store: Store) -> None:
    """Thread t paused on a review of ``pay`` (amount 40 to bob), and its fork f, which
    inherits that pause."""
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([call(("p1", "pay", '{"amount": 40, "to": "bob"}'))]),
            tools=[Tool("pay", "Pay", OBJECT, lambda ctx, args: "paid", requires_approval=True)],
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
        )
    )
    agent.run("pay bob")
    store.fork("t", new_thread_id="f")


_COPIES = {
    "interrupt": ("t", AgentThread.Interrupted.TOPIC),
    "interrupts": ("f", AgentThread.Forked.TOPIC),
    "request": ("t", AgentThread.ReviewRequested.TOPIC),
}
"""Where each field that holds the review (its pause's copies, its request) is stored."""


def _row(store: Store, field: str) -> Any:
    """The stored row that holds ``field``."""
    thread_id, topic = _COPIES[field]
    return next(
        record
        for record in store._records.stored_records(thread_id)
        if full_topic(record.topic) == topic
    )


def _leaf_of(store: Store, record: Any, field: str, n: int) -> int:
    """The index, among every leaf of the row's payload, of the ``n``-th leaf of its
    ``field``."""
    payload = msgspec.json.decode(store._records.mapper.plain_payload(record))
    every = _leaves(payload)
    ours = [i for i, leaf in enumerate(every) if leaf[0] == field]
    return ours[n % len(ours)]


def _waits_on_no_pause(thread: AgentThread, tool_call_id: str) -> bool:
    """Whether no pause of ``thread`` is on the call: its review's pause was moved to
    another call, which reads as a tool's pause (a gap ADR 0067 lists)."""
    return all(p.interrupt.tool_call_id != tool_call_id for p in thread.pauses)


def _kind_leaf(store: Store, record: Any) -> int:
    """The index, among every leaf of an Interrupted row's payload, of its pause's kind."""
    payload = msgspec.json.decode(store._records.mapper.plain_payload(record))
    return _leaves(payload).index(("interrupt", "kind"))


@settings(max_examples=30, deadline=None)
@given(
    field=st.sampled_from(sorted(_COPIES)),
    leaf=st.integers(min_value=0, max_value=200),
    value=st.one_of(
        st.integers(min_value=-1, max_value=41),
        st.sampled_from(["", "bob", "bobX", "p1", "p1X", "t", "f", "review", "interrupt"]),
        st.booleans(),
        st.none(),
    ),
    relabel=st.sampled_from([None, "interrupt", "in_doubt"]),
)
@example(field="interrupts", leaf=0, value=4, relabel=None)
@example(field="interrupt", leaf=0, value=4, relabel=None)
@example(field="interrupt", leaf=7, value=None, relabel=None)
@example(field="request", leaf=0, value=4, relabel=None)
@example(field="interrupt", leaf=0, value=4, relabel="interrupt")
# The review's pause moved to another call and relabelled a tool's pause: the gap ADR 0067
# leaves (the thread loads, its review waiting on no pause), set aside explicitly.
@example(field="interrupt", leaf=108, value="", relabel="interrupt")
def test_an_altered_pause_copy_is_refused_and_never_shown_as_another_operation(
    field: str, leaf: int, value: Any, relabel: str | None
) -> None:
    """Generated: one value of the pause copy in t's Interrupted row or in f's Forked row,
    or of t's review request, changed (and the pause's kind relabelled, or not), the
    chain sealed again: a load and verify agree on each thread; every review the queue
    shows with a digest shows arguments that digest to it, an approval of that digest on
    a thread that loads binds to exactly those arguments, and every review such a thread
    waits on is listed as a review."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "store.db"
        with open_store(f"sqlite:///{path}") as store:
            _paused_with_fork(store)
            if relabel is not None:
                record = _row(store, "interrupt")
                _reseal(store, path, record, _kind_leaf(store, record), relabel)
            record = _row(store, field)
            _reseal(store, path, record, _leaf_of(store, record, field, leaf), value)
        with open_store(f"sqlite:///{path}") as store:
            loaded: dict[str, AgentThread | None] = {}
            for thread_id in ("t", "f"):
                report = store.verify(thread_id)
                try:
                    loaded[thread_id] = store.load(thread_id)
                except CovonautError as exc:
                    assert not report.ok, exc
                    loaded[thread_id] = None
                else:
                    assert report.ok, report.findings
            queue = ReviewQueue(store.url)
            with queue.follow() as runner:  # a row that does not decode is passed over
                queue.wait_until_current(store, runner=runner)
            listed = {(i.thread_id, i.review_id) for i in queue.pending() if i.review_id}
            for thread_id, thread in loaded.items():
                for review in () if thread is None else thread.reviews.pending:
                    if _waits_on_no_pause(thread, review.request.tool_call_id):
                        continue  # the gap ADR 0067 leaves: the pause's ids both changed
                    assert (thread_id, review.request.review_id) in listed, thread_id
            for item in queue.pending():
                if item.kind is not PauseKind.REVIEW or item.digest is None:
                    continue
                assert isinstance(item.data, dict)
                assert shown_operation_fits(item.tool_name, item.data), item
                thread = loaded[item.thread_id]
                review = None if thread is None else thread.reviews.get(item.review_id or "")
                if review is not None and review.request.digest == item.digest:
                    shown = canonical_json(item.data["arguments"])
                    assert shown == canonical_json(review.request.arguments), item


def test_a_pause_copy_whose_arguments_do_not_digest_is_listed_as_altered() -> None:
    """A review's pause whose arguments are not the operation its digest covers is a
    queue item that says the pause was altered, with no arguments nor digest."""
    with (
        tempfile.TemporaryDirectory() as directory,
        open_store(f"sqlite:///{Path(directory) / 'store.db'}") as store,
    ):
        _paused_with_fork(store)
        [pause] = store.load("t").pauses
    data = dict(pause.interrupt.data)  # type: ignore[arg-type]
    faithful = pending_from(pause.interrupt, "t", NOW)
    assert (faithful.digest, faithful.data) == (data["digest"], data)
    forged = msgspec.structs.replace(
        pause.interrupt, data={**data, "arguments": {"amount": 4, "to": "bob"}}
    )
    item = pending_from(forged, "t", NOW)
    assert item.digest is None
    assert item.data == {"review_id": data["review_id"], "tool_call_id": "p1"}
    assert "altered" in item.reason
    assert item.review_id == data["review_id"]


def test_a_tools_pause_with_review_like_data_is_still_a_tools_pause() -> None:
    """A review claim that names no review of the thread (a tool's data in the form of
    a review request, as a record of version 1 whose kind was guessed) reads as the
    tool's pause, as before: only a copy of a review the thread holds is checked."""
    thread = AgentThread.start("t", now=NOW)
    data = {"review_id": "r", "digest": "d", "tool_call_id": "c", "arguments": {}}
    thread.trigger_event(
        AgentThread.Interrupted,
        interrupt=Interrupt("asked", data, "c", "ask", PauseKind.REVIEW),
        timestamp=NOW,
    )
    [pause] = thread.pauses
    assert pause.kind is PauseKind.INTERRUPT


def test_a_thread_whose_pause_copy_was_altered_leaves_the_others_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``reviews --json`` loads each listed thread for its pauses' tokens: the fork whose
    Forked row was altered (amount 4, resealed) is listed as altered with no token, and
    its parent's review is listed as it is, with its token, instead of the whole listing
    failing."""
    path = tmp_path / "store.db"
    with open_store(f"sqlite:///{path}") as store:
        _paused_with_fork(store)
        record = _row(store, "interrupts")
        payload = msgspec.json.decode(store._records.mapper.plain_payload(record))
        amount = _leaves(payload).index(("interrupts", 0, "data", "arguments", "amount"))
        _reseal(store, path, record, amount, 4)
    assert main(["reviews", "--json", "--store", f"sqlite:///{path}"]) == 0
    listed = {item["thread_id"]: item for item in json.loads(capsys.readouterr().out)}
    assert listed["t"]["arguments"] == {"amount": 40, "to": "bob"} and listed["t"]["pause"]
    assert (listed["f"]["arguments"], listed["f"]["digest"], listed["f"]["pause"]) == (
        None,
        None,
        None,
    )
