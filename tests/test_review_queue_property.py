"""The reviewer queue's law, on every store: after any sequence of runs, pauses,
decisions, forks and starts from a saved state, the queue lists exactly the pauses the
threads' aggregates say wait for a person, field for field, whatever text a tool, a
model or a person put in them (NUL included)."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    InterruptError,
    MemoryStateStore,
    ReviewQueue,
    ScriptedProvider,
    Store,
    ThreadStatus,
    Tool,
    ToolContext,
    create_cipher_key,
    open_store,
)
from covonaut_es._text import is_blank
from covonaut_es.domain import AgentThread, PauseKind, ToolOutcome
from covonaut_es.errors import CovonautError, ToolCallsInDoubtError
from covonaut_es.runtime import running_calls
from covonaut_es.service import Settlement, ThreadService, pause_token, review_submission
from support import answer, call, ticking_clock
from test_service import RITA, VERIFIER

OBJECT: dict[str, Any] = {"type": "object"}

# Text as tools, models and people may write it: NUL and other control characters,
# line and paragraph separators, bidi overrides, a BOM, the last code point, quotes and
# backslashes. No lone surrogate: the mapper refuses to encode one (msgspec), so no event
# can hold one (a tool's pause holding one is recorded as the tool's error instead).
ODD = "\x00\x01\x1b\x7f\x85\u2028\u2029\u202e\ufeff\U0010ffff\\\"'\n"
odd_text = st.text(
    st.one_of(st.just("\x00"), st.sampled_from(ODD), st.characters(exclude_categories=("Cs",))),
    max_size=6,
)


class ProcessDied(BaseException):
    """Stands for the runner's process dying inside a tool: nothing after it runs."""


def tools(dies: list[bool]) -> list[Tool]:
    """``ask`` pauses with its arguments as reason and data; ``pay`` needs a review;
    ``transfer`` dies while ``dies`` holds True, else succeeds; so does ``wire``, which
    an approval runs."""

    def ask(ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise InterruptError(args["q"], {"q": args["q"], args["q"]: [args["q"], None, 1.5]})

    def transfer(ctx: ToolContext, args: dict[str, Any]) -> Any:
        if dies and dies[0]:
            raise ProcessDied
        return "sent"

    return [
        Tool("ask", "Ask a person", OBJECT, ask),
        Tool("pay", "Pay", OBJECT, lambda ctx, args: "paid", requires_approval=True),
        Tool("transfer", "Move money", OBJECT, transfer),
        Tool("wire", "Wire money", OBJECT, transfer, requires_approval=True, run_on_approval=True),
    ]


class World:
    """One store, its threads' agents and the commands a reviewer runs on them."""

    def __init__(self, store: Store, namespace: str) -> None:
        self.store = store
        self.namespace = namespace
        self.states = MemoryStateStore()
        self.service = ThreadService(store, verifier=VERIFIER)
        self.rita = self.service.reviewer(RITA)
        self.threads: list[str] = []
        # Each thread's versions between commands: where a fork reads a state some
        # command left, not one half written by a single save (ADR 0060 lists what a
        # fork inside one save still reads).
        self.between_commands: dict[str, list[int]] = {}
        self.names = itertools.count()

    def agent(self, thread_id: str, script: list[Any], dies: list[bool] | None = None) -> Agent:
        return Agent(
            AgentConfig(
                provider=ScriptedProvider(script),
                tools=tools(dies if dies is not None else []),
                parallel_tools=True,
                checkpoint=CheckpointSettings(store=self.store, thread_id=thread_id),
                state_store=self.states,
                reviewer_verifier=VERIFIER,
                clock=ticking_clock(),
            )
        )

    def new_thread(self) -> str:
        thread_id = f"{self.namespace}-t{next(self.names)}"
        self.threads.append(thread_id)
        return thread_id

    def pick(self, n: int) -> str | None:
        return self.threads[n % len(self.threads)] if self.threads else None

    # Threads that pause ---------------------------------------------------------------

    def run(self, text: str, kinds: tuple[str, ...], found: bool = True) -> None:
        """A new thread whose model calls each tool of ``kinds`` at once, with ``text`` in
        the call ids and arguments; a runner that dies in a ``transfer`` is found dead
        (its calls in doubt paused) or not yet."""
        thread_id = self.new_thread()
        arguments = json.dumps({"q": text, "memo": text})
        calls = [(f"c{i}{text}", kind, arguments) for i, kind in enumerate(kinds)]
        dies = ["transfer" in kinds]
        agent = self.agent(thread_id, [call(*calls), answer("done")], dies)
        try:
            agent.run(f"go {text}")
        except ProcessDied:
            dies[0] = False
            # A process that died runs no tool: the calls started beside the one that
            # "killed" it finish first (their threads outlive the exception here).
            deadline = time.monotonic() + 10
            while any(c.thread_id == thread_id for c in running_calls()):
                assert time.monotonic() < deadline, running_calls()
                time.sleep(0.001)
            if found:
                self.service.pause_calls_in_doubt(thread_id, f"its runner stopped: {text}")

    def from_state(self, n: int) -> None:
        """A new thread started from the saved state of an existing one."""
        source = self.pick(n)
        if source is None:
            return
        agent = self.agent(source, [])
        agent.restore_latest_checkpoint(source)
        if agent.status is ThreadStatus.ABANDONED:
            return
        try:
            agent.save_state(f"{self.namespace}-s{n}")
        except CovonautError:
            return  # a thread with calls in doubt cannot be saved
        loaded = self.agent("unused", [])
        thread_id = self.new_thread()
        loaded.load_state(f"{self.namespace}-s{n}", thread_id=thread_id)

    # What people and runners do --------------------------------------------------------

    def decide(self, n: int, text: str) -> None:
        """Deal with every pause of a thread that waits for a person: approve a review
        (reject it for every fourth ``n``), send a call in doubt to run again (odd ``n``)
        or settle it, answer a tool's pause."""
        thread_id = self.pick(n)
        if thread_id is None or self.store.state_at(thread_id).status is ThreadStatus.ABANDONED:
            return
        for pause in self.store.state_at(thread_id).pauses:
            if pause.resolved:
                continue
            interrupt = pause.interrupt
            call_id = interrupt.tool_call_id
            if interrupt.kind is PauseKind.REVIEW:
                review_id = interrupt.data["review_id"]  # type: ignore[index,call-overload]
                if n % 4 == 3:  # a rejection gives a reason
                    submission = review_submission("reject", text="no" if is_blank(text) else text)
                else:
                    submission = review_submission("approve", text=text)
                self.service.decide(review_id, submission, reviewer=self.rita, thread_id=thread_id)
            elif interrupt.kind is PauseKind.IN_DOUBT and n % 2:
                self.service.request_retry(thread_id, call_id, reviewer=self.rita)
            elif interrupt.kind is PauseKind.IN_DOUBT:
                note = Settlement.not_run(text)
                self.service.settle(thread_id, call_id, note, reviewer=self.rita)
            else:
                self.service.answer(
                    thread_id, call_id, "ok" if is_blank(text) else text, reviewer=self.rita
                )

    def resume(self, n: int, runner: str = "lives") -> None:
        """Resume a thread whose every pause was dealt with, as a worker does: a call in
        doubt that no runner may retry pauses it again. The ``runner`` may die in a
        ``transfer`` it runs again, and be found dead (its calls in doubt paused) or not
        yet."""
        thread_id = self.pick(n)
        if thread_id is None:
            return
        state = self.store.state_at(thread_id)
        if state.status is not ThreadStatus.INTERRUPTED or not all(
            p.resolved for p in state.pauses
        ):
            return
        agent = self.agent(thread_id, [answer("done")], [runner != "lives"])
        agent.restore_latest_checkpoint(thread_id)
        try:
            agent.resume()
        except ToolCallsInDoubtError:
            self.service.pause_calls_in_doubt(thread_id, "no runner may retry it")
        except ProcessDied:
            if runner == "dies":
                self.service.pause_calls_in_doubt(thread_id, "its runner stopped again")

    def retry(self, n: int) -> None:
        """A person sends each call in doubt to run again, paused on or not (its runner
        may be gone unfound), unless its retry is asked for already."""
        thread_id = self.pick(n)
        if thread_id is None or self.store.state_at(thread_id).status is ThreadStatus.ABANDONED:
            return
        thread = self.store.load(thread_id)
        for pending in thread.in_doubt:
            if pending.call.id not in thread.retries_requested:
                self.service.request_retry(thread_id, pending.call.id, reviewer=self.rita)

    def pause(self, n: int) -> None:
        """A runner finds the thread's runner gone, whatever a person did since, and
        pauses it on its calls in doubt (a call whose retry is asked for stays so)."""
        thread_id = self.pick(n)
        if thread_id is None or self.store.state_at(thread_id).status is ThreadStatus.ABANDONED:
            return
        self.service.pause_calls_in_doubt(thread_id, "its runner is gone")

    def note_heads(self) -> None:
        """Note each thread's head, once a command is over."""
        for thread_id in self.threads:
            versions = self.between_commands.setdefault(thread_id, [])
            head = self.store.state_at(thread_id).version
            if not versions or versions[-1] != head:
                versions.append(head)

    def fork(self, n: int, where: float) -> None:
        """Fork a thread at some version a command left it at."""
        thread_id = self.pick(n)
        if thread_id is None:
            return
        versions = self.between_commands[thread_id]
        version = versions[min(len(versions) - 1, int(where * len(versions)))]
        try:
            fork_id = self.store.fork(thread_id, at_version=version)
        except CovonautError:
            return  # abandoned by then
        self.threads.append(fork_id)
        self.between_commands[fork_id] = [v for v in versions if v <= version]

    def abandon(self, n: int) -> None:
        thread_id = self.pick(n)
        if thread_id is not None and self.store.state_at(thread_id).status is not (
            ThreadStatus.ABANDONED
        ):
            self.service.abandon(thread_id, "gone", reviewer=self.rita)


Step = tuple[Any, ...]
"""A method of :class:`World` and its arguments (printed as such when a case fails)."""

kinds = st.lists(st.sampled_from(["ask", "pay", "transfer", "wire"]), min_size=1, max_size=3)
indexes = st.integers(0, 7)
run = st.tuples(st.just("run"), odd_text, kinds.map(tuple), st.booleans())
steps: st.SearchStrategy[Step] = st.one_of(
    run,
    run,
    st.tuples(st.just("from_state"), indexes),
    st.tuples(st.just("decide"), indexes, odd_text),
    st.tuples(st.just("resume"), indexes),
    st.tuples(st.just("resume"), indexes, st.sampled_from(["dies", "dies unfound"])),
    st.tuples(st.just("retry"), indexes),
    st.tuples(st.just("pause"), indexes),
    st.tuples(st.just("fork"), indexes, st.floats(0, 1)),
    st.tuples(st.just("abandon"), indexes),
)


def expected(store: Store) -> set[tuple[Any, ...]]:
    """What the threads' aggregates say waits for a person: the independent oracle."""
    found = set()
    for thread_id in store.thread_ids():
        state = store.state_at(thread_id)
        if state.status is ThreadStatus.ABANDONED:
            continue
        for pause in state.pauses:
            if pause.resolved:
                continue
            i = pause.interrupt
            review = i.kind is PauseKind.REVIEW
            item_id = i.data["review_id"] if review else i.tool_call_id  # type: ignore[index,call-overload]
            found.add((thread_id, item_id, i.kind, i.tool_name, i.reason, json.dumps(i.data)))
    return found


def said_not_run(store: Store) -> set[tuple[str, str]]:
    """The calls that were in doubt, so may have run, and whose result says they did not
    run without a person's settlement saying so: there must be none."""
    found = set()
    for thread_id in store.thread_ids():
        in_doubt: set[str] = set()
        for event in store.history(thread_id):
            if isinstance(event, AgentThread.Interrupted) and event.interrupt.kind is (
                PauseKind.IN_DOUBT
            ):
                in_doubt.add(event.interrupt.tool_call_id)
            elif (
                type(event) is AgentThread.ToolResultRecorded
                and event.outcome is ToolOutcome.NOT_EXECUTED
                and event.tool_call_id in in_doubt
            ):
                found.add((thread_id, event.tool_call_id))
    return found


def pending_tokens(store: Store) -> set[tuple[str, str]]:
    """Each pause waiting for a person, as the token a page or listing names it by."""
    found = set()
    for thread_id in store.thread_ids():
        state = store.state_at(thread_id)
        found |= {
            (thread_id, pause_token(state.messages, p)) for p in state.pauses if not p.resolved
        }
    return found


def listed(queue: ReviewQueue) -> set[tuple[Any, ...]]:
    return {
        (p.thread_id, p.item_id, p.kind, p.tool_name, p.reason, json.dumps(p.data))
        for p in queue.pending()
    }


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[], Store]]:
    """Opens an empty store of one kind each time it is called (one per generated case,
    so that a failing case shrinks on its own); the replay law holds at the end of each."""
    opened: list[Store] = []
    databases: list[str] = []

    def open_() -> Store:
        if request.param == "memory":
            url = "memory://"
        elif request.param == "sqlite":
            url = f"sqlite:///{tmp_path_factory.mktemp('queue') / 'threads.db'}"
        else:
            import psycopg

            server: str = request.getfixturevalue("postgres_url")
            name = f"q_{uuid.uuid4().hex[:16]}"
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {name}")
            databases.append(name)
            url = server.rsplit("/", 1)[0] + f"/{name}"
        store = open_store(url)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()
    if databases:
        import psycopg

        with psycopg.connect(request.getfixturevalue("postgres_url"), autocommit=True) as conn:
            for name in databases:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=st.tuples(run, st.lists(steps, max_size=9)).map(lambda p: [p[0], *p[1]]))
# A call in doubt sent to run again, whose tool then pauses: the pause waits, not the doubt.
@example(plan=[("run", "", ("transfer", "ask")), ("decide", 1, ""), ("resume", 0)])
# A fork once a decision was made, of a thread paused again since.
@example(
    plan=[
        ("run", "", ("pay",)),
        ("decide", 0, ""),
        ("run", "", ("ask",)),
        ("fork", 0, 0.875),
        ("resume", 2),
    ]
)
# A call in doubt sent to run again, whose runner dies in the retry: found dead, the call
# is paused anew; not found yet, nobody is asked to settle it while a runner may.
@example(plan=[("run", "", ("transfer",)), ("decide", 1, ""), ("resume", 0, "dies")])
@example(plan=[("run", "", ("transfer",)), ("decide", 1, ""), ("resume", 0, "dies unfound")])
# The same in a fork taken once the retry was asked for.
@example(
    plan=[
        ("run", "", ("transfer",)),
        ("decide", 1, ""),
        ("fork", 0, 1.0),
        ("resume", 1, "dies unfound"),
        ("resume", 1),
    ]
)
# A call an approval ran, left in doubt, retried in a fork (which asks for a review of its
# own) and refused there: still in doubt, never recorded as not run, and paused anew.
@example(
    plan=[
        ("run", "", ("wire",)),
        ("decide", 0, ""),
        ("resume", 0, "dies"),
        ("fork", 0, 1.0),
        ("decide", 1, ""),
        ("resume", 1),
        ("decide", 3, ""),
        ("resume", 1),
    ]
)
def test_the_queue_lists_exactly_what_the_aggregates_say_is_pending(
    fresh_store: Callable[[], Store], plan: list[Step]
) -> None:
    """Property: on every store, after any steps, the queue's items are the pauses the
    loaded threads say wait for a person, no more and no fewer, their text unchanged;
    and a pause dealt with never comes back under the same token, which a page loaded
    for it would then act on."""
    store = fresh_store()
    world = World(store, "e")
    queue = ReviewQueue(store.url)
    waiting: set[tuple[str, str]] = set()
    dealt_with: set[tuple[str, str]] = set()
    try:
        with queue.follow():
            for name, *args in plan:
                getattr(world, name)(*args)
                world.note_heads()
                now = pending_tokens(store)
                assert not now & dealt_with, (name, args)
                dealt_with |= waiting - now
                waiting = now
            queue.wait_until_current(store)
        assert len(queue.pending()) == len(listed(queue))
        assert listed(queue) == expected(store)
        assert said_not_run(store) == set()
        for thread_id in store.thread_ids():
            assert store.replay_state(thread_id) == store.state_at(thread_id), thread_id
    finally:
        queue.close()
        store.close()


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
@pytest.mark.parametrize("text", ["\x00", "a\x00b", "\x00\x00\\0\\u0000", "\x01\x00"])
def test_a_pause_with_nul_in_its_text_is_listed_exactly(
    store_url: str, text: str, sealed: bool
) -> None:
    """A tool's pause, a review and a call in doubt whose reason, data, arguments and call
    id hold NUL are listed as the thread records them, and leave once dealt with, in a
    plain queue and in the sealed queue of an encrypted store."""
    key = create_cipher_key() if sealed else None
    store = open_store(store_url, cipher_key=key)
    world = World(store, "nul")
    queue = ReviewQueue(store.url, cipher_key=key)
    with queue.follow():
        world.run(text, ("ask", "pay", "transfer"))
        queue.wait_until_current(store)
        assert len(queue.pending()) == 3
        assert listed(queue) == expected(store)
        world.decide(0, f"ok {text}")  # a decision's comment that shows something
        queue.wait_until_current(store)
        assert queue.pending() == ()
    queue.close()
    store.close()


@pytest.mark.parametrize(
    ("kinds", "n"),
    [(("pay",), 0), (("ask",), 0), (("transfer",), 0), (("transfer",), 1), (("ask", "pay"), 0)],
    ids=["review-decided", "pause-answered", "doubt-settled", "retry-requested", "both"],
)
def test_a_fork_inherits_only_the_pauses_still_waiting_for_a_person(
    store: Store, kinds: tuple[str, ...], n: int
) -> None:
    """A fork taken after a pause was dealt with (and before the thread resumed) records
    and lists none of the dealt-with pauses; one taken before lists them all."""
    world = World(store, "f")
    queue = ReviewQueue(store.url)
    with queue.follow():
        world.run("x", kinds)
        (paused,) = world.threads
        before = store.fork(paused, new_thread_id="before")
        world.decide(n, "ok")
        after = store.fork(paused, new_thread_id="after")
        queue.wait_until_current(store)
    assert store._records.forked_event(after).interrupts == ()  # type: ignore[union-attr]
    assert len(store._records.forked_event(before).interrupts) == len(kinds)  # type: ignore[union-attr]
    assert {p[0] for p in listed(queue)} == {before}
    assert listed(queue) == expected(store)
    queue.close()
