"""Builders shared by the tests: a fixed clock, scripted responses, tools, raw records."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    HmacReviewerVerifier,
    InterruptError,
    Message,
    ProviderRequest,
    ProviderResponse,
    ReviewQueue,
    ScriptedProvider,
    Store,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)
from covonaut_es._text import shown_escaped
from covonaut_es.domain import RunMode, _thread, check_thread_id, thread_aggregate_id
from covonaut_es.errors import CovonautError
from covonaut_es.messages import Role, StreamDelta, Usage
from covonaut_es.providers._protocol import Responder, ScriptItem
from covonaut_es.service import ThreadService, review_submission
from covonaut_es.store._mapper import MsgspecMapper

OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}

GOLDEN = Path(__file__).parent / "fixtures" / "golden"
"""Data written by older code, which the tests read and never change."""


@contextlib.contextmanager
def golden_database(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection that reads a golden SQLite file as it is, and writes nothing beside
    it: a plain connection to a file in WAL mode makes its ``-wal`` and ``-shm`` in the
    fixtures' directory, which a test in another worker, reading the same file,
    deleted or locked under it."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)) as db:
        yield db


HIDDEN = st.one_of(
    st.characters(categories=["Zs", "Zl", "Zp", "Cf", "Cc", "Co", "Cn"]).filter(
        lambda char: char != " "
    ),
    st.sampled_from("\u115f\u1160\u3164\uffa0\u2800\u034f\ufe0f\U000e0100"),
)
"""Characters that show nothing or are not printable, ASCII's space aside: spaces,
separators, controls, format, private-use and unassigned code points, the Hangul
fillers, the Braille blank and default-ignorable marks; no new thread's id holds one."""


@contextlib.contextmanager
def earlier_thread_id_rule() -> Iterator[None]:
    """Threads start under ids as earlier versions let them, as a store they wrote
    holds: a space other than ASCII's, a separator, a filler, a private-use code point
    (ADR 0126)."""
    with mock.patch.object(
        _thread, "check_thread_id", functools.partial(check_thread_id, new=False)
    ):
        yield


@contextlib.contextmanager
def golden_store(name: str, tmp_path: Path) -> Iterator[Store]:
    """The golden SQLite store ``GOLDEN/<name>/threads.db``, opened from a copy in
    ``tmp_path``, so that the test leaves the fixture as it was written."""
    shutil.copy(GOLDEN / name / "threads.db", tmp_path / "threads.db")
    opened = open_store(f"sqlite:///{tmp_path / 'threads.db'}")
    try:
        yield opened
    finally:
        opened.close()


def call_intents(events: Iterable[Any]) -> Iterator[tuple[str, int]]:
    """Each call whose intent ``events`` record, as its id and the version of the event
    that records it (from which its idempotency key derives): a ``ToolCalled``, or the
    ``TurnAnsweredWithCalls`` that holds the call (ADR 0072). Items of ``events`` that
    are no thread events are passed over."""
    for event in events:
        if isinstance(event, AgentThread.Event):
            for call_id in event.intended_calls:
                yield call_id, event.originator_version


def ticking_clock(start: datetime | None = None) -> Callable[[], datetime]:
    """A clock that advances one millisecond per reading, so times are distinct and
    tests are repeatable."""
    origin = start or datetime(2026, 1, 1, tzinfo=UTC)
    ticks: Iterator[int] = itertools.count()
    return lambda: origin + timedelta(milliseconds=next(ticks))


def answer(text: str, *, tokens: int = 0) -> ProviderResponse:
    """A final text answer."""
    return ProviderResponse(
        content=text, usage=Usage(tokens, tokens) if tokens else None, finish_reason="stop"
    )


def call(*calls: tuple[str, str, str]) -> ProviderResponse:
    """A response that calls tools: each item is (call id, tool name, JSON arguments)."""
    return ProviderResponse(
        tool_calls=tuple(ToolCall(i, n, a) for i, n, a in calls), finish_reason="tool_calls"
    )


def echo_tool(log: list[str] | None = None) -> Tool:
    """``echo``: returns its ``text`` argument and logs each execution."""

    def echo(ctx: ToolContext, args: dict[str, Any]) -> Any:
        if log is not None:
            log.append(ctx.tool_call_id)
        return {"echo": args["text"]}

    schema = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    }
    return Tool("echo", "Echo the text back", schema, echo)


def review_tool(log: list[str] | None = None, *, data: Any = None) -> Tool:
    """``review``: always interrupts, asking for a person's review."""

    def review(ctx: ToolContext, args: dict[str, Any]) -> Any:
        if log is not None:
            log.append(ctx.tool_call_id)
        raise InterruptError("human review required", data or {"request_id": ctx.tool_call_id})

    return Tool("review", "Ask a person to review", OBJECT_SCHEMA, review)


class AsyncScriptedProvider:
    """An ``async def complete`` provider: yields to the event loop, then plays the next
    item of a :class:`ScriptedProvider`'s script."""

    def __init__(self, script: Iterable[ScriptItem] = (), *, respond: Responder | None = None):
        self.scripted = ScriptedProvider(script, respond=respond)

    async def complete(self, request: ProviderRequest) -> ProviderResponse:
        """Answer after letting other tasks run."""
        await asyncio.sleep(0)
        return self.scripted.complete(request)

    @property
    def requests(self) -> list[ProviderRequest]:
        """Every request received, in order."""
        return self.scripted.requests


def agent_on(store: Store, thread_id: str, script: list[Any], **options: Any) -> Agent:
    """An agent with ``echo`` and ``review`` running ``script`` on the thread;
    ``options``: more of its ``AgentConfig``."""
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=[echo_tool(), review_tool()],
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            clock=ticking_clock(),
            max_turns=1000,
            **options,
        )
    )


def echo_script(turns: int) -> list[Any]:
    """A model's script that calls ``echo`` on each of ``turns`` turns, then answers
    "done"."""
    return [*(call((f"c{i}", "echo", '{"text": "x"}')) for i in range(turns)), answer("done")]


def conversation(store: Store, thread_id: str, turns: int) -> Agent:
    """A finished run of ``turns`` echo calls on the thread."""
    agent = agent_on(store, thread_id, echo_script(turns))
    agent.run("go")
    return agent


def sqlite_key(stream: UUID | str) -> bytes:
    """A stream id as the tables of a SQLite store created by this version key it: its
    16 bytes (ADR 0074)."""
    return (stream if isinstance(stream, UUID) else UUID(stream)).bytes


def raw_records(store: Store) -> list[bytes]:
    """Every stored event's bytes as the recorder holds them (all back ends)."""
    recorder = store._app.recorder
    return [n.state for n in recorder.select_notifications(None, 10_000)]


class HeldProvider(ScriptedProvider):
    """Streams the first two pieces of each answer, then holds the rest until ``go`` is
    set: a cut made meanwhile lands mid-answer, surely."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.go = threading.Event()

    def stream(self, request: ProviderRequest) -> Iterator[StreamDelta]:
        for number, delta in enumerate(super().stream(request), start=1):
            if number == 3:
                assert self.go.wait(10), "the test never let the answer go on"
            yield delta


def converse(store: Store, thread_id: str, *, save_on_turn_start: bool = False) -> Agent:
    """One run with a tool call on ``store``, its state then saved there under the
    thread's id. With ``save_on_turn_start`` each turn begins with its own
    ``TurnStarted``, so the call's intent is a ``ToolCalled`` of its own (ADR 0072)."""
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([call(("c1", "echo", '{"text": "x"}')), answer("done")]),
            tools=[echo_tool()],
            checkpoint=CheckpointSettings(
                store=store, thread_id=thread_id, save_on_turn_start=save_on_turn_start
            ),
            state_store=store,
            clock=ticking_clock(),
        )
    )
    agent.run("go")
    agent.save_state(thread_id)
    return agent


def append_raw_event(store: Store, thread_id: str, topic: str, payload: bytes) -> int:
    """Write a record behind the library's back, after the thread's last event, as data
    from other code (newer, or damaged) would be, compressed and encrypted as the store
    does; returns its version."""
    version = store.load(thread_id).version + 1
    mapper = store._app.mapper
    assert isinstance(mapper, MsgspecMapper)
    stored = mapper.stored_payload(payload)
    record = StoredEvent(thread_aggregate_id(thread_id), version, topic, stored)
    store._app.recorder.insert_events([record])
    return version


def put_raw_snapshot(store: Store, record: StoredEvent) -> None:
    """Write a snapshot record behind the library's back."""
    assert store._app.snapshots is not None
    store._app.snapshots.recorder.insert_events([record])


def start_bare_run(thread: AgentThread, *, now: datetime) -> None:
    """Start a run on ``thread`` before it holds any message, as a continue of the code
    before ADR 0142 did: the first events of the threads these tests grow a message at
    a time, which ``start_run`` now refuses to a continue."""
    thread.trigger_event(AgentThread.RunStarted, mode=RunMode.CONTINUE, timestamp=now)


def snapshotted_thread(store: Store, thread_id: str = "long", *, text: str = "hi") -> AgentThread:
    """A thread long enough for a snapshot, saved with one."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    thread = AgentThread.start(thread_id, now=now)
    start_bare_run(thread, now=now)
    for i in range(70):
        thread.append_message(Message(role="user", content=f"{text} {i}"), now=now)
    store.save(thread)
    assert store.snapshot_if_due(thread)
    return thread


def run_python(
    *args: str | Path,
    python: str | Path = sys.executable,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a fresh interpreter (this one, or ``python``) with these arguments and check
    that it exits 0."""
    result = subprocess.run(
        [python, *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result


def raw_in(text: str) -> list[str]:
    """The characters of ``text`` a terminal would get raw (each one
    :func:`~covonaut_es._text.shown_escaped` names), a line's end aside."""
    return [char for char in text.replace("\n", "") if shown_escaped(char)]


def entries_under(*folders: Path) -> dict[str, tuple[bytes | str | None, int, int]]:
    """Every entry under ``folders`` and the folders themselves: a link's target, a
    file's bytes or None for a directory, with its mode and its owner; for telling that
    nothing there changed."""
    found: dict[str, tuple[bytes | str | None, int, int]] = {}
    for path in (entry for folder in folders for entry in [folder, *folder.rglob("*")]):
        info = path.lstat()
        content = (
            os.readlink(path)
            if stat.S_ISLNK(info.st_mode)
            else path.read_bytes()
            if stat.S_ISREG(info.st_mode)
            else None
        )
        found[str(path)] = (content, stat.S_IMODE(info.st_mode), info.st_uid)
    return found


def is_utf8(data: bytes) -> bool:
    """Whether ``data`` decodes as UTF-8."""
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


class WriteFaults:
    """A store holding thread ``t`` paused on a review, and the commands that write to
    it (the fault tests': each a fresh call on each ask).

    Args:
        url: The store's URL.
    """

    def __init__(self, url: str) -> None:
        self.store = open_store(url)
        verifier = HmacReviewerVerifier(b"k" * 32)
        pay = Tool("pay", "Pay", {"type": "object"}, lambda c, a: "paid", requires_approval=True)
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider([call(("c1", "pay", "{}")), answer("done")]),
                tools=[pay],
                checkpoint=CheckpointSettings(store=self.store, thread_id="t"),
                reviewer_verifier=verifier,
            )
        )
        agent.run("Pay.")
        (request,) = agent.pending_reviews
        self.review_id = request.review_id
        self.service = ThreadService(self.store, verifier=verifier)
        self.reviewer = self.service.reviewer(verifier.issue_token("alice", ttl_seconds=900))
        self.store.history("t")  # the side tables are made before a fault

    def command(self, name: str) -> Callable[[], object]:
        """The command ``name``: save, decide, fork, run or queue."""
        store = self.store

        def save() -> None:
            thread = store.load("t")
            thread.append_message(Message(Role.USER, "more"), now=datetime.now(UTC))
            store.save(thread)

        def queue() -> None:
            queue = ReviewQueue(store.url)
            try:
                with queue.follow() as runner:
                    queue.wait_until_current(store, runner=runner)
            finally:
                queue.close()

        commands: dict[str, Callable[[], object]] = {
            "save": save,
            "decide": lambda: self.service.decide(
                self.review_id, review_submission("approve"), reviewer=self.reviewer
            ),
            "fork": lambda: store.fork("t", new_thread_id="f"),
            "run": lambda: agent_on(store, "r", [answer("done")]).run("go"),
            "queue": queue,
        }
        return commands[name]

    def survive_a_fault(
        self, name: str, arm: Callable[[], None], disarm: Callable[[], None]
    ) -> None:
        """Run the command ``name`` between ``arm()`` and ``disarm()`` of a fault: it
        succeeds or raises a CovonautError, what was stored before stays stored, and
        the command, if it failed, completes when run again."""
        before = self.store.load("t").state.messages
        arm()
        try:
            self.command(name)()
            failed = False
        except CovonautError:
            failed = True
        finally:
            disarm()
        assert self.store.load("t").state.messages[: len(before)] == before
        if failed:
            self.command(name)()
        assert self.store.verify("t").ok


@contextlib.contextmanager
def postgres_database_of(url: str) -> Iterator[str]:
    """The URL of a new, empty database on ``url``'s server (for one generated
    example), dropped when the block ends."""
    import psycopg

    name = f"e_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def subclasses(cls: type[Exception]) -> Iterator[type[Exception]]:
    """``cls`` and every class below it, each once."""
    seen: set[type[Exception]] = set()
    pending = [cls]
    while pending:
        found = pending.pop()
        if found not in seen:
            seen.add(found)
            pending.extend(found.__subclasses__())
            yield found


BUILTIN_ERRORS = (
    Exception,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    LookupError,
    ArithmeticError,
    ZeroDivisionError,
    RuntimeError,
    RecursionError,
    NotImplementedError,
    AssertionError,
    OSError,
    UnicodeError,
)
"""Builtin errors an application's code may raise, for tests over every kind."""

ERROR_KINDS = (*BUILTIN_ERRORS, *sorted(subclasses(CovonautError), key=lambda cls: cls.__name__))
"""Every kind of error an application's code may raise: builtins, and covonaut-es's own."""


def error_of(kind: type[Exception], message: str) -> Exception:
    """An error of ``kind`` with ``message``, whatever its ``__init__`` asks for."""
    return kind.__new__(kind, message)
