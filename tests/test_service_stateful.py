"""A state machine of two processes on one store: runs of a model whose tools record
every execution outside the store, reviewers submitting hostile decisions from either
process, resumes, labels, forks, settlements of calls in doubt, leases lost mid-call and
runners that die inside a tool. After every step: every execution is a call the store
records, no call ran under two keys, every approval covers exactly what was accepted,
and every thread replays to the state it loads as."""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import tempfile
import threading
import uuid
from datetime import timedelta
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import event as note_event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

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
    ThreadStatus,
    Tool,
    ToolCall,
    ToolContext,
    Worker,
    open_store,
    operation_digest,
)
from covonaut_es.domain import Decision, ReviewDecision, thread_aggregate_id
from covonaut_es.domain._calls import event_key
from covonaut_es.errors import (
    InvalidDecisionError,
    LeaseLostError,
    ReviewNotFoundError,
    StaleReviewError,
    ThreadAbandonedError,
    ThreadBusyError,
    ThreadConflictError,
    ThreadStateError,
    ToolCallRunningError,
)
from covonaut_es.runtime import running_calls
from covonaut_es.service import Action, Settlement, ThreadService, review_submission
from covonaut_es.store._backends._memory_leases import _MEMORY
from covonaut_es.store._backends._postgres_leases import _key
from covonaut_es.store._backends._sqlite_leases import lease_directory
from support import call_intents

VERIFIER = HmacReviewerVerifier(secrets.token_bytes(32))
TOKENS = {name: VERIFIER.issue_token(name, ttl_seconds=3600) for name in ("rita", "sam")}
PROCESSES = ("A", "B")
PAY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"amount": {"type": "integer"}, "to": {"type": "string"}},
    "required": ["amount", "to"],
    "additionalProperties": False,
}
OBJECT: dict[str, Any] = {"type": "object"}
EDITED = "with edited arguments "


class Crash(BaseException):
    """Stands for the death of the runner's process inside a tool."""


@attrs.frozen
class Execution:
    """One execution of a tool, as the external system saw it."""

    process: str
    thread_id: str
    call_id: str
    tool: str
    key: str
    args: dict[str, Any]
    approval: ReviewDecision | None


class Blocked:
    """A runner of one process stopped inside its ``wire`` call until released."""

    def __init__(self, process: str, thread_id: str) -> None:
        self.process, self.thread_id = process, thread_id
        self.started, self.release = threading.Event(), threading.Event()
        self.outcome: list[object] = []
        self.lost = False  # its lease's lock was lost
        self.token: int | None = None  # its lease's: a newer one fences it
        self.runner: threading.Thread | None = None
        # Whether a run with new input could start on the thread: on one that could not,
        # the runner may first run a call sent to run again, then refuse the new input.
        self.free = True


# The model: a function of the history -----------------------------------------------------


def model(request: ProviderRequest) -> ProviderResponse:
    """Asked to "pay N", it wires, notes and pays N to bob in one batch; told a payment
    was approved it pays again (the edit, if the reviewer edited it), then answers."""
    messages = request.messages
    last = messages[-1]
    n = len(messages)  # call ids never repeat within a thread's history
    if last.role is Role.USER:
        amount = int(last.content.split()[-1])
        arguments = json.dumps({"amount": amount, "to": "bob"})
        return ProviderResponse(
            tool_calls=(
                ToolCall(f"w{n}", "wire", json.dumps({"amount": amount})),
                ToolCall(f"n{n}", "note", '{"text": "paying"}'),
                ToolCall(f"p{n}", "pay", arguments),
            )
        )
    asked = next(m for m in reversed(messages) if m.role is Role.ASSISTANT)
    results = {m.tool_call_id: m.content for m in messages if m.role is Role.TOOL}
    for tool_call in asked.tool_calls:
        result = results.get(tool_call.id, "")
        if tool_call.name == "pay" and result.startswith("Approved by"):
            arguments = tool_call.arguments
            if EDITED in result:
                edit, _ = json.JSONDecoder().raw_decode(result.split(EDITED, 1)[1])
                arguments = json.dumps(edit)
            return ProviderResponse(tool_calls=(ToolCall(f"p{n}", "pay", arguments),))
    return ProviderResponse(content="Done.")


# The machine ------------------------------------------------------------------------------

hostile_arguments = st.sampled_from(
    [
        '{"amount": 5, "amount": 6, "to": "bob"}',
        '{"amount": 5, "to": {"x": 1, "x": 2}}',
        '{"amount": NaN, "to": "bob"}',
        '{"amount": Infinity, "to": "bob"}',
        '{"amount": 1e400, "to": "bob"}',
        '{"amount": 18446744073709551616, "to": "bob"}',
        '{"amount": 5, "to": "\\ud800"}',
        "[5]",
        "{",
        '{"amount": 5, "to": ' + "[" * 70 + "]" * 70 + "}",
    ]
)
texts = st.one_of(
    st.sampled_from(["ok", "Paid by hand.", "Not today."]),
    st.sampled_from(["ok", "Paid by hand.", "Not today."]),
    st.sampled_from(["", " ", "\n\t", "no \udc80"]),
    st.integers(10_001, 10_009).map(lambda length: "x" * length),
)

EDITS = ("none", "equal text", "equal mapping", "unequal")
# A submission: (action, text, arguments, digest), as a careful reviewer sends it or with
# any part hostile.
submissions = st.one_of(
    st.tuples(
        st.just(Action.APPROVE),
        st.sampled_from(["", "ok"]),
        st.sampled_from(EDITS),
        st.sampled_from(["none", "right"]),
    ),
    st.tuples(
        st.sampled_from([Action.REJECT, Action.RESPOND]),
        st.sampled_from(["Not today.", "Paid by hand."]),
        st.just("none"),
        st.sampled_from(["none", "right"]),
    ),
    st.tuples(
        st.sampled_from(list(Action)),
        texts,
        st.sampled_from(EDITS) | hostile_arguments,
        st.sampled_from(["none", "right", "wrong"]),
    ),
)


class TwoProcesses(RuleBasedStateMachine):
    """Two processes (a store each) on one database, and the people deciding. Process
    A's runs call a batch's tools at once, B's in turn."""

    kind: ClassVar[str] = "sqlite"
    server: ClassVar[str] = ""  # the PostgreSQL server's URL, for kind "postgres"

    def __init__(self) -> None:
        super().__init__()
        self._cleanup = contextlib.ExitStack()
        self.url = self._open_database()
        self.stores: dict[str, Store] = {}
        for process in PROCESSES:
            store = self._cleanup.enter_context(open_store(self.url))
            store.name_lease_holder(f"process {process}")
            self.stores[process] = store
        self.services = {p: ThreadService(s, verifier=VERIFIER) for p, s in self.stores.items()}
        self.threads: list[str] = []
        self.ledger: list[Execution] = []
        self.traps: dict[str, str] = {}  # thread id -> what its next wire call does
        self.blocked: Blocked | None = None
        self.accepted: set[tuple[str, str]] = set()  # (review id, digest) decided
        self.lock = threading.Lock()

    # Set-up and tear-down --------------------------------------------------------------

    def _open_database(self) -> str:
        if self.kind == "memory":
            return f"memory://stateful-{uuid.uuid4().hex}"
        if self.kind == "sqlite":
            directory = tempfile.mkdtemp(prefix="stateful-")
            self._cleanup.callback(shutil.rmtree, directory, ignore_errors=True)
            return f"sqlite:///{directory}/threads.db"
        import psycopg

        name = f"s_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")

        def drop() -> None:
            with psycopg.connect(self.server, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

        self._cleanup.callback(drop)
        return self.server.rsplit("/", 1)[0] + f"/{name}"

    def teardown(self) -> None:
        """Let a blocked runner finish, then close both stores and drop the database."""
        try:
            if self.blocked is not None:
                self._finish_blocked()
        finally:
            self._cleanup.close()

    # The application ---------------------------------------------------------------------

    def _tools(self, process: str) -> list[Tool]:
        def record(ctx: ToolContext, args: dict[str, Any]) -> None:
            with self.lock:
                self.ledger.append(
                    Execution(
                        process,
                        ctx.thread_id,
                        ctx.tool_call_id,
                        ctx.tool_name,
                        ctx.idempotency_key,
                        args,
                        ctx.approval,
                    )
                )

        def wire(ctx: ToolContext, args: dict[str, Any]) -> Any:
            record(ctx, args)
            trap = self.traps.pop(ctx.thread_id, None)
            if trap == "crash":
                raise Crash
            if trap == "block" and self.blocked is not None:
                self.blocked.started.set()
                assert self.blocked.release.wait(timeout=60)
            return {"wired": args["amount"]}

        def note(ctx: ToolContext, args: dict[str, Any]) -> Any:
            record(ctx, args)
            return "noted"

        def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
            record(ctx, args)
            return {"paid": args["amount"]}

        return [
            Tool("wire", "Wire money", OBJECT, wire),
            Tool("note", "Take a note", OBJECT, note, idempotent=True),
            Tool("pay", "Pay", PAY_SCHEMA, pay, requires_approval=True),
        ]

    def make_config(self, process: str) -> Any:
        def config(thread_id: str) -> AgentConfig:
            return AgentConfig(
                provider=ScriptedProvider(respond=model),
                tools=self._tools(process),
                parallel_tools=process == "A",  # a batch's calls at once, or in turn
                reviewer_verifier=VERIFIER,
            )

        return config

    def agent(self, process: str, thread_id: str) -> Agent:
        config = self.make_config(process)(thread_id)
        settings_ = CheckpointSettings(store=self.stores[process], thread_id=thread_id)
        return Agent(attrs.evolve(config, checkpoint=settings_))

    def _states(self) -> dict[str, Any]:
        store = self.stores["A"]
        return {t: store.state_at(t) for t in store.thread_ids()}

    # Rules --------------------------------------------------------------------------------

    def _held(self, thread_id: str) -> bool:
        """Whether the blocked runner's call holds the thread: the runner's own, or a fork
        of it, at any depth, made while the call ran, which holds the call open too (ADR
        0145)."""
        blocked = self.blocked
        if blocked is None:
            return False
        if thread_id == blocked.thread_id:
            return True
        store = self.stores["A"]
        running = {c.tool_call_id for c in running_calls() if c.thread_id == blocked.thread_id}
        state = store.state_at(thread_id)
        held_open = {pending.call.id for pending in state.open_calls}
        parent = state.parent if running & held_open else None
        while parent is not None and parent.thread_id != blocked.thread_id:
            parent = store.state_at(parent.thread_id).parent
        return parent is not None

    def _free(self, thread_id: str) -> bool:
        """Whether a run with new input may start on the thread now."""
        state = self.stores["A"].state_at(thread_id)
        held = self._held(thread_id)
        return not (held or state.interrupts or state.open_calls) and state.status in (
            ThreadStatus.FINISHED,
            ThreadStatus.ERROR,
        )

    @rule(
        process=st.sampled_from(PROCESSES),
        amount=st.integers(1, 99),
        trap=st.sampled_from(["", "", "crash", "block"]),
        anywhere=st.integers(0, 4),
        data=st.data(),
    )
    def run(self, process: str, amount: int, trap: str, anywhere: int, data: st.DataObject) -> None:
        """Start a run with new input on a new thread or one free for it (now and then
        on any thread, which may refuse); its wire call may crash the runner or block it
        until released (one blocked runner at a time)."""
        free = [t for t in self.threads if self._free(t)]
        fresh = [f"t{len(self.threads)}"] if len(self.threads) < 8 else []
        choices = self.threads if (self.threads and not anywhere) else free + fresh
        thread_id = data.draw(st.sampled_from(choices or self.threads))
        if trap == "block" and self.blocked is not None:
            trap = ""
        if trap:
            self.traps[thread_id] = trap
        agent = self.agent(process, thread_id)
        if trap == "block":
            self._start_blocked(
                process,
                thread_id,
                lambda: agent.run(f"pay {amount}"),
                free=thread_id in free + fresh,
            )
            return
        try:
            agent.run(f"pay {amount}")
        except Crash:
            assert trap == "crash"
        except (ThreadStateError, ThreadBusyError):
            assert thread_id not in free + fresh  # paused, in doubt, given up or held
        finally:
            self.traps.pop(thread_id, None)
        if thread_id not in self.threads and self.stores[process].exists(thread_id):
            self.threads.append(thread_id)

    def _start_blocked(self, process: str, thread_id: str, run: Any, *, free: bool = True) -> None:
        blocked = self.blocked = Blocked(process, thread_id)
        blocked.free = free

        def target() -> None:
            try:
                blocked.outcome.append(run())
            except BaseException as exc:
                blocked.outcome.append(exc)

        blocked.runner = threading.Thread(target=target, daemon=True)
        blocked.runner.start()
        while not blocked.started.wait(0.01) and blocked.runner.is_alive():
            pass
        blocked.token = self._token(thread_id)
        if not blocked.started.is_set():  # refused before its wire call
            blocked.runner.join(timeout=30)
            [outcome] = blocked.outcome
            assert isinstance(outcome, str | ThreadStateError | ThreadBusyError), outcome
            self.blocked = None
            self.traps.pop(thread_id, None)
        if thread_id not in self.threads and self.stores[process].exists(thread_id):
            self.threads.append(thread_id)

    @precondition(lambda self: self.blocked is not None)
    @rule()
    def release(self) -> None:
        """The blocked runner's wire call returns: it goes on, or (its lease taken by the
        other process) stops before writing anything more."""
        self._finish_blocked()

    def _finish_blocked(self) -> None:
        blocked = self.blocked
        assert blocked is not None and blocked.runner is not None
        before = (
            self.stores["A"].history(blocked.thread_id) if blocked.thread_id in self.threads else ()
        )
        blocked.release.set()
        blocked.runner.join(timeout=60)
        assert not blocked.runner.is_alive()
        self.blocked = None
        [outcome] = blocked.outcome
        taken = self._token(blocked.thread_id) != blocked.token  # by the other process
        note_event(f"blocked runner ended: {type(outcome).__name__}, lease taken: {taken}")
        if taken:  # fenced: it stopped, and wrote nothing more
            assert isinstance(outcome, LeaseLostError | ThreadConflictError), outcome
            assert self.stores["A"].history(blocked.thread_id) == before
        elif blocked.free:
            assert isinstance(outcome, str | ThreadAbandonedError | LeaseLostError), outcome
        else:  # it ran a call sent to run again, which paused the thread: no new input
            assert isinstance(outcome, str | ThreadStateError | LeaseLostError), outcome

    @precondition(lambda self: self.blocked is not None and not self.blocked.lost)
    @rule()
    def lose_lease(self) -> None:
        """The blocked runner's lease is lost (its lock gone from under it), and the other
        process's worker takes the thread over."""
        blocked = self.blocked
        assert blocked is not None
        thread_id = blocked.thread_id
        store = self.stores[blocked.process]
        if self.kind == "memory":
            del _MEMORY[store._app.recorder].leases[thread_id]
        elif self.kind == "sqlite":
            path = self.url.removeprefix("sqlite:///")
            lock = lease_directory(path) / f"{thread_aggregate_id(thread_id).hex}.lock"
            lock.unlink()
        else:
            import psycopg

            key = _key(thread_aggregate_id(thread_id)) & 0xFFFFFFFFFFFFFFFF
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = "
                    "'advisory' AND granted AND classid = %s AND objid = %s AND objsubid = 1 "
                    "AND database = (SELECT oid FROM pg_database WHERE datname = "
                    "current_database())",
                    (key >> 32, key & 0xFFFFFFFF),
                )
        blocked.lost = True
        other = "B" if blocked.process == "A" else "A"
        Worker(self.stores[other], self.make_config(other)).run(once=True)

    def _token(self, thread_id: str) -> int | None:
        recorder: Any = self.stores["A"]._app.recorder
        token: int | None = recorder.lease_token(thread_aggregate_id(thread_id))
        return token

    @rule(process=st.sampled_from(PROCESSES))
    def work(self, process: str) -> None:
        """A worker of one process runs every thread that is ready."""
        Worker(self.stores[process], self.make_config(process)).run(once=True)

    @rule(process=st.sampled_from(PROCESSES), data=st.data())
    def resume(self, process: str, data: st.DataObject) -> None:
        """An agent of one process resumes a thread; refused unless a person dealt with
        every pause of it and no call is left in doubt that may not run again (a
        worker pauses such a thread on it)."""
        if not self.threads:
            return
        states = {t: self.stores[process].state_at(t) for t in self.threads}
        waiting = [t for t, state in states.items() if state.waiting_for == "runner"]
        thread_id = data.draw(st.sampled_from(waiting or self.threads))
        state, thread = states[thread_id], self.stores[process].load(thread_id)
        stuck = [
            p.call.id
            for p in thread.in_doubt
            if p.call.name != "note" and p.call.id not in thread.retries_requested
        ]
        ready = (
            state.status is ThreadStatus.INTERRUPTED and state.waiting_for == "runner" and not stuck
        )
        held = self._held(thread_id)
        try:
            self.agent(process, thread_id).resume()
        except (ThreadStateError, ThreadBusyError) as exc:
            assert held or not ready, exc

    @rule(
        process=st.sampled_from(PROCESSES),
        reviewer=st.sampled_from(sorted(TOKENS)),
        submission=submissions,
        named=st.booleans(),
        data=st.data(),
    )
    def decide(
        self,
        process: str,
        reviewer: str,
        submission: tuple[Action, str, str, str],
        named: bool,
        data: st.DataObject,
    ) -> None:
        """A reviewer of either process decides a pending review with what a hostile
        person may submit; a refused submission records nothing."""
        action, text, arguments, digest = submission
        store = self.stores[process]
        pending = [
            (t, review.request)
            for t in self.threads
            for review in store.state_at(t).reviews
            if review.pending and store.state_at(t).status is not ThreadStatus.ABANDONED
        ]
        if not pending:
            return
        thread_id, request = data.draw(st.sampled_from(pending))
        edited: Any = {
            "none": None,
            "equal text": json.dumps(dict(reversed(list(request.arguments.items()))), indent=1),
            "equal mapping": dict(reversed(list(request.arguments.items()))),
            "unequal": {"to": "bob", "amount": request.arguments["amount"] + 1},
        }.get(arguments, arguments)
        named_digest = {"none": None, "right": request.digest, "wrong": "0" * 64}[digest]
        refused = (
            (action is not Action.APPROVE and not text.strip())
            or "\udc80" in text
            or len(text) > 10_000
            or (edited is not None and action is not Action.APPROVE)
            or arguments not in EDITS
            or digest == "wrong"
            # a call that may have run is approved as requested or rejected: an edit
            # would run another operation under the first one's idempotency key
            or (request.may_have_run and arguments == "unequal")
        )
        before = {t: store.history(t) for t in self.threads}
        commands = self.services[process]
        try:
            submission = review_submission(action, text=text, arguments=edited, digest=named_digest)
            decided = commands.decide(
                request.review_id,
                submission,
                reviewer=commands.reviewer(TOKENS[reviewer]),
                thread_id=thread_id if named else None,
            )
        except InvalidDecisionError:
            note_event("decision refused")
            assert refused
            assert {t: store.history(t) for t in self.threads} == before
            return
        except (StaleReviewError, ReviewNotFoundError):
            assert not named  # ambiguous (a fork holds it too), or decided in the fork
            return
        assert not refused, (action, text, arguments, digest)
        if submission.arguments is None or action is not Action.APPROVE:
            expected = request.digest
        else:
            expected = operation_digest(request.tool_name, submission.arguments)
        assert decided.digest == expected
        assert decided.reviewer == reviewer
        self.accepted.add((request.review_id, expected))
        note_event(f"decision recorded: {action}")

    @rule(process=st.sampled_from(PROCESSES), data=st.data())
    def label(self, process: str, data: st.DataObject) -> None:
        """Label a thread: it commutes with a run going on it."""
        if self.threads:
            thread_id = data.draw(st.sampled_from(self.threads))
            self.services[process].label(thread_id, f"label-{uuid.uuid4().hex[:6]}")

    @rule(process=st.sampled_from(PROCESSES), data=st.data())
    def fork(self, process: str, data: st.DataObject) -> None:
        """Fork a thread at its head (a call in doubt or a pending review included)."""
        if self.threads and len(self.threads) < 8:
            parent = data.draw(st.sampled_from(self.threads))
            fork_id = f"f{len(self.threads)}"
            try:
                self.stores[process].fork(parent, new_thread_id=fork_id)
            except ToolCallRunningError:  # a run holds it with its call open (helper-253)
                assert self.blocked is not None and parent == self.blocked.thread_id
                return
            except ThreadStateError:
                assert self.stores[process].state_at(parent).status is ThreadStatus.ABANDONED
                return
            self.threads.append(fork_id)

    @rule(
        process=st.sampled_from(PROCESSES),
        how=st.sampled_from(["ran", "not run", "retry", "pause"]),
        data=st.data(),
    )
    def settle(self, process: str, how: str, data: st.DataObject) -> None:
        """A person settles a call in doubt (it ran, it did not, run it again), or a
        runner pauses the thread on its calls in doubt; refused while a runner holds it,
        or once it is given up."""
        store, commands = self.stores[process], self.services[process]
        doubtful = [(t, p.call.id) for t in self.threads for p in store.load(t).in_doubt]
        if not doubtful:
            return
        thread_id, call_id = data.draw(st.sampled_from(doubtful))
        rita = commands.reviewer(TOKENS["rita"])
        try:
            if how == "ran":
                commands.settle(thread_id, call_id, Settlement.ran_with("it ran"), reviewer=rita)
            elif how == "not run":
                commands.settle(thread_id, call_id, Settlement.not_run("bank says no"))
            elif how == "retry":
                commands.request_retry(thread_id, call_id, reviewer=rita)
            else:
                commands.pause_calls_in_doubt(thread_id, "checking")
        except ThreadBusyError:
            assert self._held(thread_id)
        except ThreadStateError:
            given_up = store.state_at(thread_id).status is ThreadStatus.ABANDONED
            assert given_up or how == "retry"  # given up, or its retry asked for already

    @rule(process=st.sampled_from(PROCESSES), now=st.integers(0, 4), data=st.data())
    def abandon(self, process: str, now: int, data: st.DataObject) -> None:
        """Now and then, give a thread up: it commutes with a run going on it."""
        if self.threads and not now:
            thread_id = data.draw(st.sampled_from(self.threads))
            with contextlib.suppress(ThreadStateError):  # given up already
                self.services[process].abandon(thread_id, "gave up")

    # Invariants ----------------------------------------------------------------------------

    def _recorded_calls(self) -> dict[str, tuple[str, str]]:
        """Every call the store records: its idempotency key -> (thread, call id)."""
        owners = {thread_aggregate_id(t): t for t in self.stores["A"].thread_ids()}
        recorded = {}
        for thread_id in owners.values():
            # A fork's inherited events are its parent's: their calls are the parent's.
            own = [
                event
                for event in self.stores["A"].history(thread_id)
                if owners[event.originator_id] == thread_id
            ]
            for call_id, version in call_intents(own):
                recorded[event_key(thread_id, version, call_id)] = (thread_id, call_id)
        return recorded

    @invariant()
    def every_execution_is_a_recorded_call(self) -> None:
        """(a) Each execution's key is a call the store records, which has its result
        or is open in the thread that ran it; (b) no call ran under two keys."""
        with self.lock:
            ledger = list(self.ledger)
        recorded = self._recorded_calls()
        states = self._states()
        keys: dict[tuple[str, str], set[str]] = {}
        for execution in ledger:
            assert execution.key in recorded, execution
            assert recorded[execution.key][1] == execution.call_id, execution
            state = states[execution.thread_id]
            opened = {p.idempotency_key for p in state.open_calls}
            results = {m.tool_call_id for m in state.messages if m.role is Role.TOOL}
            assert execution.key in opened or execution.call_id in results, execution
            keys.setdefault((execution.thread_id, execution.call_id), set()).add(execution.key)
        assert all(len(found) == 1 for found in keys.values()), keys
        if len(ledger) > len({e.key for e in ledger}):
            note_event("a call ran twice under its one key")

    @invariant()
    def every_decision_covers_what_was_accepted(self) -> None:
        """(c) Every decision in any thread is one a reviewer's accepted submission made,
        with the digest of the arguments it parsed to (the request's when not edited),
        and every payment ran on an approval of exactly its arguments."""
        for state in self._states().values():
            for review in state.reviews:
                if review.decision is not None:
                    decided = (review.request.review_id, review.decision.digest)
                    assert decided in self.accepted, decided
                    if review.decision.decision is not Decision.APPROVED:
                        assert review.decision.digest == review.request.digest
        with self.lock:
            payments = [e for e in self.ledger if e.tool == "pay"]
        if payments:
            note_event("a payment ran")
        for payment in payments:
            assert payment.approval is not None, payment
            assert payment.approval.decision is Decision.APPROVED
            assert payment.approval.digest == operation_digest("pay", payment.args), payment
            assert (payment.approval.review_id, payment.approval.digest) in self.accepted

    @invariant()
    def every_thread_replays_to_its_state(self) -> None:
        """(d) Every thread replays from its events to the state it loads as, through
        either process."""
        for process in PROCESSES:
            store = self.stores[process]
            for thread_id in store.thread_ids():
                assert store.replay_state(thread_id) == store.state_at(thread_id), thread_id


def machine(kind: str, server: str = "") -> type[TwoProcesses]:
    """The machine on a back end."""
    return type(f"TwoProcesses_{kind}", (TwoProcesses,), {"kind": kind, "server": server})


# Each step runs agents and workers on a real store: minutes of examples would not find
# more than these bounded runs, which keep the module near a minute on two cores.
HEALTH = [HealthCheck.too_slow, HealthCheck.filter_too_much]
DEADLINE = timedelta(seconds=30)  # one example's whole run of steps

TestOnSqlite = machine("sqlite").TestCase
TestOnSqlite.settings = settings(
    max_examples=30, stateful_step_count=20, deadline=DEADLINE, suppress_health_check=HEALTH
)

TestInMemory = machine("memory").TestCase
TestInMemory.settings = settings(
    max_examples=10, stateful_step_count=15, deadline=DEADLINE, suppress_health_check=HEALTH
)


@pytest.mark.postgres
def test_two_processes_on_postgres(postgres_url: str) -> None:
    """The same machine, smaller, on PostgreSQL (leases lost by ending their session)."""
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        machine("postgres", postgres_url),
        settings=settings(
            max_examples=8, stateful_step_count=12, deadline=DEADLINE, suppress_health_check=HEALTH
        ),
    )
