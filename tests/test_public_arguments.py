"""Every public constructor and method refuses an argument of the wrong type where it
enters, with the library's typed error naming the argument (helper-105's family)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import math
import secrets
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ReviewQueue,
    ScriptedProvider,
    Store,
    Tool,
    ToolContext,
    Worker,
    open_store,
)
from covonaut_es.errors import ConfigurationError, CovonautError, InvalidDecisionError
from covonaut_es.providers import RetryPolicy
from covonaut_es.service import (
    Action,
    Reviewer,
    ReviewSubmission,
    ThreadService,
    review_submission,
)
from covonaut_es.store._leases import WorkerRecord
from covonaut_es.store._log import StoreLog
from support import OBJECT_SCHEMA, answer, call, echo_tool, ticking_clock


class _Text(str):
    """A subclass of str, which no event can hold."""


WRONG: dict[str, object] = {
    "Text('x')": _Text("x"),
    "None": None,
    "0": 0,
    "-1": -1,
    "1.5": 1.5,
    "nan": math.nan,
    "''": "",
    "b'x'": b"x",
    "[]": [],
    "object()": object(),
}
"""The wrong values tried in each argument's place, by label."""


class ProcessDied(BaseException):
    """Stands in for the process dying inside a tool, leaving its call in doubt."""


def _pay(ctx: ToolContext, args: dict[str, Any]) -> str:
    return "paid"


def _transfer(ctx: ToolContext, args: dict[str, Any]) -> str:
    raise ProcessDied


class World:
    """What the calls act on, each part made when a call first needs it: a store with a
    thread ``t`` paused on a review of ``pay``, and an agent on it."""

    def __init__(self) -> None:
        self.verifier = HmacReviewerVerifier(secrets.token_bytes(32))
        self.token = self.verifier.issue_token("rita", ttl_seconds=600)
        self.store = open_store("memory://")

    def config(self, **options: Any) -> AgentConfig:
        tool = Tool("pay", "Pay", OBJECT_SCHEMA, _pay, requires_approval=True)
        return AgentConfig(
            provider=ScriptedProvider([call(("c1", "pay", "{}")), answer("done")]),
            tools=[tool, echo_tool()],
            checkpoint=CheckpointSettings(store=self.store, thread_id="t"),
            reviewer_verifier=self.verifier,
            state_store=self.store,
            clock=ticking_clock(),
            **options,
        )

    @functools.cached_property
    def agent(self) -> Agent:
        agent = Agent(self.config())
        agent.run("go")
        return agent

    @functools.cached_property
    def done(self) -> Agent:
        """An agent on thread ``s`` whose run ended, its state saved under ``s``."""
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider(respond=lambda request: answer("done")),
                checkpoint=CheckpointSettings(store=self.store, thread_id="s"),
                state_store=self.store,
            )
        )
        agent.run("go")
        agent.save_state("s")
        return agent

    @functools.cached_property
    def review_id(self) -> str:
        return self.agent.pending_reviews[0].review_id

    @functools.cached_property
    def in_doubt(self) -> Agent:
        """An agent on thread ``d`` whose call ``c1`` is in doubt."""
        tool = Tool("transfer", "Move money", OBJECT_SCHEMA, _transfer)

        def agent(script: list[Any]) -> Agent:
            return Agent(
                AgentConfig(
                    provider=ScriptedProvider(script),
                    tools=[tool],
                    checkpoint=CheckpointSettings(store=self.store, thread_id="d"),
                )
            )

        with contextlib.suppress(ProcessDied):
            agent([call(("c1", "transfer", "{}"))]).run("send it")
        restored = agent([answer("done")])
        restored.restore_latest_checkpoint()
        return restored

    @functools.cached_property
    def thread(self) -> Any:
        self.agent  # noqa: B018  (the thread exists)
        return self.store.load("t")


def _held(world: World, thread_id: object) -> None:
    with world.store.lease(thread_id):  # type: ignore[arg-type]
        pass


def _wait(world: World, timeout: object) -> None:
    ReviewQueue(world.store.url).wait_until_current(world.store, timeout)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Entry:
    """One public call: ``call(world, **args)``, a valid ``args``, and per argument the
    labels of :data:`WRONG` it documents as valid, and the name its errors use when
    not the argument's own."""

    call: Callable[..., Any]
    args: dict[str, Any]
    valid: dict[str, tuple[str, ...]] = field(default_factory=dict)
    named: dict[str, str] = field(default_factory=dict)


NOW = datetime(2026, 1, 1, tzinfo=UTC)
EMPTY = ("''",)
OPTIONAL = ("None",)
ROOT_NAMED = {"root_thread_id": "thread_id"}
ROOT = lambda w, **a: w.agent and None  # noqa: E731  (thread t exists)
APPROVE = review_submission("approve")
RITA = Reviewer("rita")

_ENTRIES: dict[str, Entry] = {
    # Constructors ------------------------------------------------------------------
    "open_store": Entry(
        lambda w, **a: open_store(**a).close(),
        {"url": "memory://", "max_checkpoints_per_thread": 0, "cipher_key": None},
        {"max_checkpoints_per_thread": ("0",), "cipher_key": OPTIONAL},
    ),
    "Tool": Entry(
        lambda w, **a: Tool(**a),
        {"name": "t", "description": "d", "parameters": OBJECT_SCHEMA, "func": _pay},
        {"description": EMPTY},
    ),
    "Tool.options": Entry(
        lambda w, **a: Tool("t", "d", OBJECT_SCHEMA, _pay, **a),
        {
            "idempotent": False,
            "requires_approval": True,
            "run_on_approval": False,
            "timeout": 1.0,
            "review_deadline": timedelta(hours=1),
            "review": None,
            "pin": None,
        },
        {
            "timeout": ("None", "1.5"),
            "review_deadline": OPTIONAL,
            "review": OPTIONAL,
            "pin": OPTIONAL,
        },
    ),
    "RetryPolicy": Entry(
        lambda w, **a: RetryPolicy(**a),
        {"max_attempts": 3, "initial_delay": 0.5, "max_delay": 8.0, "multiplier": 2.0},
        {"initial_delay": ("0", "1.5"), "max_delay": ("0", "1.5"), "multiplier": ("1.5",)},
    ),
    "CheckpointSettings": Entry(
        lambda w, **a: CheckpointSettings(**a),
        {
            "store": None,  # replaced by the world's store below
            "thread_id": "t",
            "save_on_turn_start": False,
            "skip_save_on_turn_end": False,
            "durability": "step",
            "migrators": {},
        },
        {"thread_id": EMPTY},
    ),
    "AgentConfig": Entry(
        lambda w, **a: w.config(**a),
        {
            "model": "m",
            "name": "agent",
            "system_prompt": "",
            "max_turns": 3,
            "parallel_tools": False,
            "compactor": None,
            "max_tokens": 10,
            "temperature": 0.5,
            "on_event": None,
            "on_delta": None,
            "state_migrators": {},
            "tool_timeout": None,
            "tracer_provider": None,
            "trace_content": False,
            "mcp_servers": (),
            "output_type": None,
            "output_retries": 2,
        },
        {
            "model": EMPTY,
            "name": EMPTY,
            "system_prompt": EMPTY,
            "output_retries": ("0",),
            "compactor": OPTIONAL,
            "max_tokens": OPTIONAL,
            "temperature": ("None", "0", "1.5"),
            "on_event": OPTIONAL,
            "on_delta": OPTIONAL,
            "tool_timeout": ("None", "1.5"),
            "tracer_provider": OPTIONAL,
            "mcp_servers": ("[]",),
            "output_type": OPTIONAL,
        },
    ),
    "AgentConfig.core": Entry(
        lambda w, **a: AgentConfig(**a),
        {
            "provider": ScriptedProvider([]),
            "tools": (),
            "checkpoint": None,
            "clock": ticking_clock(),
            "reviewer_verifier": None,
            "state_store": None,
        },
        {
            "tools": ("[]",),
            "checkpoint": OPTIONAL,
            "reviewer_verifier": OPTIONAL,
            "state_store": OPTIONAL,
        },
    ),
    "Agent": Entry(lambda w, **a: Agent(**a), {"config": None}),
    "Worker": Entry(
        lambda w, **a: Worker(**a).close(),
        {
            "store": None,
            "make_config": lambda thread_id: None,
            "concurrency": 1,
            "poll_interval": 0.05,
            "worker_id": "w",
            "notifier": None,
            "notice_lead": timedelta(minutes=1),
            "clock": ticking_clock(),
        },
        {
            "poll_interval": ("1.5",),
            "worker_id": ("None",),
            "notifier": OPTIONAL,
            "notice_lead": OPTIONAL,
            "clock": OPTIONAL,
        },
    ),
    "ReviewQueue": Entry(
        lambda w, **a: ReviewQueue(**a).close(),
        {"store_url": "memory://q", "view_url": None, "cipher_key": None, "compress": None},
        {"view_url": ("None", "''"), "cipher_key": OPTIONAL, "compress": OPTIONAL},
    ),
    # Agent -------------------------------------------------------------------------
    "Agent.run": Entry(lambda w, **a: w.done.run(**a), {"input": "more"}),
    "Agent.arun": Entry(lambda w, **a: asyncio.run(w.done.arun(**a)), {"input": "more"}),
    "Agent.steer": Entry(lambda w, **a: w.agent.steer(**a), {"message": "x"}, {"message": EMPTY}),
    "Agent.approve": Entry(
        lambda w, **a: w.agent.approve(**{"review_id": w.review_id, **a}),
        {"reviewer": None, "comment": "ok", "arguments": None, "digest": None},
        {"comment": EMPTY, "arguments": OPTIONAL, "digest": OPTIONAL},
    ),
    "Agent.approve.review_id": Entry(
        lambda w, **a: w.agent.approve(**a, reviewer=w.token),
        {"review_id": None},
        {"review_id": EMPTY},
    ),
    "Agent.reject": Entry(
        lambda w, **a: w.agent.reject(**{"review_id": w.review_id, "reviewer": w.token, **a}),
        {"reason": "no", "digest": None},
        {"digest": OPTIONAL},
    ),
    "Agent.respond": Entry(
        lambda w, **a: w.agent.respond(**{"review_id": w.review_id, "reviewer": w.token, **a}),
        {"answer": "42", "digest": None},
        {"digest": OPTIONAL},
    ),
    "Agent.settle": Entry(
        lambda w, **a: w.in_doubt.settle(**a),
        {"tool_call_id": "c1", "retry": False, "ran": False},
    ),
    "Agent.restore_latest_checkpoint": Entry(
        lambda w, **a: w.done.restore_latest_checkpoint(**a),
        {"thread_id": "s"},
        {"thread_id": OPTIONAL},
    ),
    "Agent.save_state": Entry(lambda w, **a: w.done.save_state(**a), {"key": "k"}),
    "Agent.load_state": Entry(
        lambda w, **a: w.done.load_state(**a),
        {"key": "s", "thread_id": "from-s"},
        {"thread_id": OPTIONAL},
    ),
    # Store -------------------------------------------------------------------------
    "Store.load": Entry(
        lambda w, **a: ROOT(w) or w.store.load(**a),
        {"thread_id": "t", "version": 1, "snapshot_migrators": {}},
        {"version": OPTIONAL},
    ),
    "Store.find": Entry(
        lambda w, **a: ROOT(w) or w.store.find(**a),
        {"thread_id": "t", "version": 1, "snapshot_migrators": {}},
        {"version": ("None", "0", "-1")},  # a version no thread has: found is None
    ),
    "Store.exists": Entry(lambda w, **a: w.store.exists(**a), {"thread_id": "t"}),
    "Store.head_version": Entry(lambda w, **a: w.store.head_version(**a), {"thread_id": "t"}),
    "Store.events_after": Entry(
        lambda w, **a: ROOT(w) or w.store.events_after(**a),
        {"thread_id": "t", "version": 1},
        {"version": ("0",)},
    ),
    "Store.threads_with_review": Entry(
        lambda w, **a: w.store.threads_with_review(**a), {"review_id": "r"}
    ),
    "Store.list_threads": Entry(
        lambda w, **a: w.store.list_threads(**a),
        {"after": None, "limit": 10},
        {"after": ("None", "0")},
    ),
    "Store.checkpoints": Entry(
        lambda w, **a: ROOT(w) or w.store.checkpoints(**a), {"thread_id": "t"}
    ),
    "Store.history": Entry(lambda w, **a: ROOT(w) or w.store.history(**a), {"thread_id": "t"}),
    "Store.state_at": Entry(
        lambda w, **a: ROOT(w) or w.store.state_at(**a),
        {"thread_id": "t", "version": 1},
        {"version": OPTIONAL},
    ),
    "Store.replay_state": Entry(
        lambda w, **a: ROOT(w) or w.store.replay_state(**a), {"thread_id": "t"}
    ),
    "Store.save": Entry(lambda w, **a: w.store.save(**a), {"thread": None}),
    "Store.snapshot_if_due": Entry(
        lambda w, **a: w.store.snapshot_if_due(**{"thread": w.thread, **a}),
        {"at_rest": False},
    ),
    "Store.replay": Entry(lambda w, **a: ROOT(w) or list(w.store.replay(**a)), {"thread_id": "t"}),
    "Store.verify": Entry(lambda w, **a: ROOT(w) or w.store.verify(**a), {"thread_id": "t"}),
    "Store.fork": Entry(
        lambda w, **a: ROOT(w) or w.store.fork(**a),
        {
            "thread_id": "t",
            "at_version": 2,
            "at_checkpoint": None,
            "new_thread_id": "f",
            "now": NOW,
        },
        {
            "at_version": OPTIONAL,
            "at_checkpoint": OPTIONAL,
            "new_thread_id": OPTIONAL,
            "now": OPTIONAL,
        },
        {"new_thread_id": "thread_id"},
    ),
    "ThreadService.abandon": Entry(
        lambda w, **a: ROOT(w) or ThreadService(w.store).abandon(**a),
        {"thread_id": "t", "reason": "gone"},
        {"reason": EMPTY},
    ),
    "ThreadService.label": Entry(
        lambda w, **a: ROOT(w) or ThreadService(w.store).label(**a),
        {"thread_id": "t", "name": "good", "version": 1},
        {"version": OPTIONAL},
        {"name": "label"},
    ),
    "Store.parent": Entry(lambda w, **a: ROOT(w) or w.store.parent(**a), {"thread_id": "t"}),
    "Store.children": Entry(lambda w, **a: ROOT(w) or w.store.children(**a), {"thread_id": "t"}),
    "Store.path_to_root": Entry(
        lambda w, **a: ROOT(w) or w.store.path_to_root(**a), {"thread_id": "t"}
    ),
    "Store.leaves": Entry(
        lambda w, **a: ROOT(w) or w.store.leaves(**a), {"root_thread_id": "t"}, named=ROOT_NAMED
    ),
    "Store.branch_points": Entry(
        lambda w, **a: ROOT(w) or w.store.branch_points(**a),
        {"root_thread_id": "t"},
        named=ROOT_NAMED,
    ),
    "Store.tree": Entry(
        lambda w, **a: ROOT(w) or w.store.tree(**a), {"root_thread_id": "t"}, named=ROOT_NAMED
    ),
    "Store.tree_stats": Entry(
        lambda w, **a: ROOT(w) or w.store.tree_stats(**a), {"root_thread_id": "t"}, named=ROOT_NAMED
    ),
    "Store.lease": Entry(lambda w, **a: _held(w, **a), {"thread_id": "t"}),
    "Store.held_lease": Entry(lambda w, **a: w.store.held_lease(**a), {"thread_id": "t"}),
    "Store.name_lease_holder": Entry(
        lambda w, **a: w.store.name_lease_holder(**a), {"holder": "me"}
    ),
    "Store.publish_worker": Entry(lambda w, **a: w.store.publish_worker(**a), {"record": None}),
    "Store.submit": Entry(
        lambda w, **a: w.store.submit(**a), {"thread_id": "t", "text": "hi"}, {"text": EMPTY}
    ),
    "Store.write_state": Entry(
        lambda w, **a: w.store.write_state(**a), {"key": "k", "document": {"a": 1}}
    ),
    "Store.read_state": Entry(lambda w, **a: w.store.read_state(**a), {"key": "k"}),
    "Store.ping": Entry(lambda w, **a: w.store.ping(**a), {"timeout": 1.0}, {"timeout": ("1.5",)}),
    "Store.log_position": Entry(lambda w, **a: w.store.log_position(**a), {"consumer": "c"}),
    "Store.record_log_position": Entry(
        lambda w, **a: w.store.record_log_position(**a),
        {"consumer": "c", "position": 1},
        {"position": ("0",)},
    ),
    # ReviewQueue -------------------------------------------------------------------
    "ReviewQueue.wait_until_current": Entry(
        lambda w, **a: _wait(w, **a), {"timeout": 5.0}, {"timeout": ("1.5",)}
    ),
    "ReviewQueue.page": Entry(
        lambda w, **a: ReviewQueue(w.store.url).page(**a),
        {"after": None, "limit": 10, "newest_first": False, "where": None},
        {"after": OPTIONAL, "where": OPTIONAL},
    ),
    "ThreadService.decide": Entry(
        lambda w, **a: ThreadService(w.store).decide(**a),
        {"review_id": None, "submission": APPROVE, "reviewer": RITA, "thread_id": "t"},
        {"thread_id": OPTIONAL, "review_id": EMPTY},
    ),
    "ThreadService.decide_together": Entry(
        lambda w, **a: ThreadService(w.store).decide_together(**a),
        {"thread_id": "t", "decisions": None, "answers": (), "reviewer": RITA},
        {"answers": ("[]",)},
    ),
    "ReviewQueue.threads_with_review": Entry(
        lambda w, **a: ReviewQueue(w.store.url).threads_with_review(**{"store": w.store, **a}),
        {"review_id": "r"},
    ),
}
"""Every public constructor and method of Store, Agent, AgentConfig, CheckpointSettings,
Tool, Worker, ReviewQueue and ThreadService's decisions and thread commands that takes an
argument, with a valid call."""


def _valid_args(world: World, entry: Entry) -> dict[str, Any]:
    """The entry's valid arguments, with the world's store, verifier and config where
    the table holds a placeholder."""
    args = dict(entry.args)
    for name in ("store",):
        if name in args and args[name] is None:
            args[name] = world.store
    if args.get("reviewer", ...) is None:
        args["reviewer"] = world.token
    if args.get("config", ...) is None:
        args["config"] = world.config()
    if args.get("thread", ...) is None:
        args["thread"] = world.thread
    if args.get("record", ...) is None:
        args["record"] = WorkerRecord(
            worker_id="w", host="h", pid=1, started_at=NOW, heartbeat_at=NOW
        )
    if args.get("review_id", ...) is None:
        args["review_id"] = world.review_id
    if args.get("decisions", ...) is None:
        args["decisions"] = {world.review_id: APPROVE}
    return args


_CASES = sorted((name, argument) for name, entry in _ENTRIES.items() for argument in entry.args)


def test_every_valid_call_succeeds() -> None:
    """The table's valid calls succeed, so a refusal below is the wrong value's."""
    for entry in _ENTRIES.values():
        world = World()
        entry.call(world, **_valid_args(world, entry))


@contextlib.contextmanager
def _closing(world: World) -> Iterator[World]:
    try:
        yield world
    finally:
        world.store.close()


@pytest.mark.parametrize(("name", "argument"), _CASES)
@settings(max_examples=len(WRONG), deadline=None)
@given(label=st.sampled_from(sorted(WRONG)))
def test_a_wrong_value_is_refused_naming_its_argument(name: str, argument: str, label: str) -> None:
    """Each argument of each public call, given a value of the wrong type (a subclass
    of str, None, 0, -1, 1.5, nan, "", b"x", [], object()), either takes it as
    documented or refuses it where it enters with a ``CovonautError`` whose message
    names the argument: never an AttributeError, TypeError or AssertionError from deep
    inside, nor a value silently taken for another (a version 1.5 read as 1)."""
    entry = _ENTRIES[name]
    # A value the argument documents, or "" for a str: of the right type, it may be
    # refused only for what it names (a thread that does not exist).
    typed = label in entry.valid.get(argument, ()) or (
        label == "''" and isinstance(entry.args[argument], str)
    )
    with _closing(World()) as world:
        args = {**_valid_args(world, entry), argument: WRONG[label]}
        try:
            entry.call(world, **args)
        except CovonautError as exc:
            said = entry.named.get(argument, argument).lower()
            told = str(exc).lower()
            assert typed or said in told or said.replace("_", " ") in told, (name, label, exc)
        else:
            assert typed, f"{name}({argument}={label}) was taken"


@pytest.mark.parametrize(
    "submission",
    [
        ReviewSubmission("approved"),  # type: ignore[arg-type]
        ReviewSubmission(Action.REJECT, text=""),
        ReviewSubmission(Action.RESPOND, text="   "),
        ReviewSubmission(Action.APPROVE, arguments={"to": {1, 2}}),
        ReviewSubmission(Action.REJECT, text="no", arguments={}),
        ReviewSubmission(Action.APPROVE, digest=""),
    ],
    ids=["unknown-action", "empty-reason", "blank-answer", "set", "edit-on-reject", "blank-digest"],
)
def test_a_submission_made_directly_is_read_by_the_one_reader(
    submission: ReviewSubmission,
) -> None:
    """A ``ReviewSubmission`` built directly, not by ``review_submission``, is held to
    its rules when decided: an unknown action was a bare KeyError, and an empty reason,
    a blank answer or a set in an edit were recorded (helper-114). Nothing is."""
    with _closing(World()) as world:
        before = world.store.load("t").version if world.agent else 0
        with pytest.raises(InvalidDecisionError):
            ThreadService(world.store).decide(world.review_id, submission, reviewer=RITA)
        assert world.store.load("t").version == before


HOSTILE: dict[str, object] = {
    "None": None,
    "True": True,
    "-1": -1,
    "2**63": 2**63,
    "2**70": 2**70,
    "1.5": 1.5,
    "'x'": "x",
    "'\\ud800'": "\ud800",
    "b'x'": b"x",
    "[1]": [1],
    "object()": object(),
}
"""Hostile values tried in the place of each argument of the store's log port."""

_LOG_CALLS: dict[str, tuple[Callable[..., object], dict[str, Any]]] = {
    "position_and_end": (lambda s, **a: s.log.position_and_end(**a), {"consumer": "c"}),
    "notifications": (
        lambda s, **a: list(s.log.notifications(**a)),
        {"after": 0, "stop": 10},
    ),
    "next_batch": (
        lambda s, **a: s.log.next_batch(**a),
        {"after": 0, "end": 0, "limit": 10},
    ),
    "has_events_after": (
        lambda s, **a: s.log.has_events_after(**a),
        {"position": 0, "follower": "f"},
    ),
    "thread_id_of": (lambda s, **a: s.log.thread_id_of(**a), {"stream": uuid.uuid4()}),
    "stored_records": (lambda s, **a: s.log.stored_records(**a), {"thread_id": "t"}),
    "read_record": (lambda s, **a: s.log.read_record(**a), {"record": None}),
    "fold": (
        lambda s, **a: s.log.fold(**a),
        {"events": (), "thread_id": "t", "parent": lambda _: None},
    ),
    "insert_threads": (lambda s, **a: s.log.insert_threads(**a), {"records": {}}),
    "record_log_position": (
        lambda s, **a: s.record_log_position(**a),
        {"consumer": "c", "position": 1},
    ),
    "log_position": (lambda s, **a: s.log_position(**a), {"consumer": "c"}),
}
"""Every public method of ``store.log`` that takes an argument, and the store's
methods of consumers' positions, with a valid call."""

_TAKEN_AS_DOCUMENTED = {
    ("notifications", "after", "None"),
    ("notifications", "stop", "None"),
    ("stored_records", "thread_id", "'x'"),
    ("fold", "thread_id", "'x'"),
    ("position_and_end", "consumer", "'x'"),
    ("log_position", "consumer", "'x'"),
    ("has_events_after", "follower", "'x'"),
    ("record_log_position", "consumer", "'x'"),
}


def test_every_method_of_the_log_port_taking_an_argument_is_tried() -> None:
    """The hostile-value test below covers each public method of StoreLog that takes
    an argument, so a new one cannot escape it."""
    public = {
        name
        for name, member in inspect.getmembers(StoreLog, inspect.isfunction)
        if not name.startswith("_") and len(inspect.signature(member).parameters) > 1
    }
    assert public <= set(_LOG_CALLS), public - set(_LOG_CALLS)


@pytest.mark.parametrize(
    ("name", "argument"), sorted((n, a) for n, (_, args) in _LOG_CALLS.items() for a in args)
)
@settings(max_examples=len(HOSTILE), deadline=None)
@given(label=st.sampled_from(sorted(HOSTILE)))
def test_the_log_port_refuses_a_hostile_argument_typed(
    name: str, argument: str, label: str
) -> None:
    """Each argument of each public method of ``store.log``, and of the store's
    consumers' positions, given a hostile value (None, a bool, -1, past 2**63-1, a
    float, text where a number goes, a lone surrogate, bytes, a list, an object), is
    taken as documented or refused with a CovonautError: never a TypeError,
    OverflowError, UnicodeEncodeError or AttributeError from deep inside, nor a
    position -1 read as one before the log (helper-167)."""
    call, args = _LOG_CALLS[name]
    with open_store("memory://") as store:
        store.submit("t", "hi")
        try:
            call(store, **{**args, argument: HOSTILE[label]})
        except CovonautError:
            pass
        else:
            assert (name, argument, label) in _TAKEN_AS_DOCUMENTED, f"{name}({argument}={label})"


_NAME_CALLS: dict[str, Callable[[Store, str], object]] = {
    "record_log_position": lambda store, name: store.record_log_position(name, 0),
    "log_position": lambda store, name: store.log_position(name),
    "position_and_end": lambda store, name: store.log.position_and_end(name),
    "has_events_after": lambda store, name: store.log.has_events_after(0, follower=name),
}
"""Every call taking a consumer's or a follower's name (``check_name``)."""


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    call=st.sampled_from(sorted(_NAME_CALLS)),
    before=st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=8),
    hidden=st.characters(categories=("Cc", "Cs")),
    after=st.text(max_size=8),
)
def test_a_consumers_name_with_a_control_character_is_refused_naming_its_index(
    store: Store, call: str, before: str, hidden: str, after: str
) -> None:
    """A consumer's or follower's name holding a control character (NUL among them) or a
    lone surrogate is refused on every back end with ConfigurationError naming the
    character and its index; a name of visible text is kept. PostgreSQL raised its raw
    DataError on a NUL (helper-170, helper-171)."""
    name = before + hidden + after
    with pytest.raises(ConfigurationError, match=rf"at index {len(before)}: "):
        _NAME_CALLS[call](store, name)
    _NAME_CALLS[call](store, before + secrets.token_hex(4))  # a position is recorded once
