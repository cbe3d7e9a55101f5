"""What the fenced-lease tests share: a payment flow whose steps can be held at a gate,
a ledger of the payments made, a second runner in a thread of its own, and the ways a
lease is really lost (a PostgreSQL session terminated, a lock file removed, a memory
lease table's entry dropped)."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import attrs
import psycopg

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Store,
    Tool,
    ToolCall,
    ToolContext,
)
from covonaut_es.domain import thread_aggregate_id
from covonaut_es.domain._calls import event_key
from covonaut_es.store import Lease
from covonaut_es.store._backends._memory_leases import _MEMORY
from covonaut_es.store._backends._sqlite_leases import lease_directory
from support import call_intents, ticking_clock

T = TypeVar("T")

PAYMENTS = 2
"""Payments a run of the flow makes, one per turn, before it answers."""
ANSWER = "Both payments are made."
WAIT = 30.0
"""Seconds any wait of these tests may last before it fails the test."""
APPLICATION_PREFIX = "covonaut-es "
"""How a lease connection's ``application_name`` starts (the holder's name follows)."""
THREAD = "t"
HOLDER = "runner-a"
"""The first runner's name: its lease session is ``covonaut-es runner-a``."""
HOLDER_SCRIPT = Path(__file__).with_name("lease_holder.py")


class Gate:
    """Holds one step of a run (a payment, a model call) until the test opens it."""

    def __init__(self) -> None:
        self._reached = threading.Event()
        self._opened = threading.Event()

    def hold(self) -> None:
        """Called by the step: wait until the test opens the gate."""
        self._reached.set()
        if not self._opened.wait(WAIT):
            raise AssertionError(f"the gate was not opened within {WAIT}s")

    def wait_reached(self) -> None:
        """Wait until the run arrives at the gate."""
        if not self._reached.wait(WAIT):
            raise AssertionError(f"the run did not reach the gate within {WAIT}s")

    def open(self) -> None:
        """Let the step go on."""
        self._opened.set()


@attrs.frozen
class Payment:
    """One execution of the payment tool: who ran it, which call, under which key."""

    runner: str
    thread_id: str
    call_id: str
    key: str


class PaymentFlow:
    """Two payments, one per turn, then the answer. The model answers from the history
    alone, as a real model would, so a second runner that takes the thread over asks
    for the same calls. Every execution of a payment is written to :attr:`ledger`, the
    external system; a gate holds the first execution of a call, or a model call."""

    def __init__(self) -> None:
        self.ledger: list[Payment] = []
        self._lock = threading.Lock()
        self._tool_gates: dict[str, Gate] = {}
        self._model_gates: dict[int, Gate] = {}

    def hold_payment(self, call_id: str) -> Gate:
        """Hold the next execution of the call, after its side effect, in the tool."""
        gate = self._tool_gates[call_id] = Gate()
        return gate

    def hold_model(self, answered: int) -> Gate:
        """Hold the next model call made after ``answered`` answers of the model."""
        gate = self._model_gates[answered] = Gate()
        return gate

    def payments(self, runner: str) -> list[str]:
        """The calls ``runner`` executed, in order."""
        with self._lock:
            return [p.call_id for p in self.ledger if p.runner == runner]

    def agent(
        self, store: Store, thread_id: str, runner: str, *, durability: str = "step"
    ) -> Agent:
        """An agent of the flow on ``store``, whose payments are recorded as ``runner``'s."""

        def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
            with self._lock:
                payment = Payment(runner, ctx.thread_id, ctx.tool_call_id, ctx.idempotency_key)
                self.ledger.append(payment)
                gate = self._tool_gates.pop(ctx.tool_call_id, None)
            if gate is not None:
                gate.hold()
            return {"paid": args["amount"]}

        def model(request: ProviderRequest) -> ProviderResponse:
            answered = sum(m.role is Role.ASSISTANT for m in request.messages)
            with self._lock:
                gate = self._model_gates.pop(answered, None)
            if gate is not None:
                gate.hold()
            if answered < PAYMENTS:
                call = ToolCall(f"pay-{answered}", "pay", '{"amount": 5}')
                return ProviderResponse(tool_calls=(call,))
            return ProviderResponse(content=ANSWER)

        schema = {"type": "object", "properties": {"amount": {"type": "number"}}}
        return Agent(
            AgentConfig(
                provider=ScriptedProvider(respond=model),
                tools=[Tool("pay", "Pay", schema, pay, idempotent=True)],
                checkpoint=CheckpointSettings(
                    store=store,
                    thread_id=thread_id,
                    durability=durability,  # type: ignore[arg-type]
                ),
                clock=ticking_clock(),
            )
        )


def check_takeover(flow: PaymentFlow, store: Store, thread_id: str) -> None:
    """What holds once the second runner finished the thread: it is answered; no
    payment ran under two idempotency keys; every payment made has its result
    recorded; the thread verifies."""
    assert store.state_at(thread_id).messages[-1].content == ANSWER
    assert all(len(keys) == 1 for keys in keys_by_call(flow.ledger).values()), flow.ledger
    recorded = recorded_calls(store, thread_id)
    assert all(recorded.get(payment.key) for payment in flow.ledger), (flow.ledger, recorded)
    assert store.verify(thread_id).ok


def finish(agent: Agent, store: Store, thread_id: str) -> str:
    """Run the thread to its answer as a runner taking it over does: from the start if
    nothing of it was stored, else on from what was (a payment in doubt is retried with
    its key: the tool is idempotent)."""
    return agent.continue_run() if store.exists(thread_id) else agent.run("Pay twice.")


def recorded_calls(store: Store, thread_id: str) -> dict[str, bool]:
    """The idempotency key of every call the thread records as called, and whether
    its result is recorded (else it is open: in doubt)."""
    found: dict[str, bool] = {}
    open_keys: dict[str, str] = {}
    if not store.exists(thread_id):
        return found
    for event in store.history(thread_id):
        for call_id, version in call_intents([event]):
            key = event_key(thread_id, version, call_id)
            found[key] = False
            open_keys[call_id] = key
        if isinstance(event, AgentThread.ToolResultRecorded):  # settlements too
            found[open_keys.pop(event.tool_call_id)] = True
    return found


def keys_by_call(ledger: list[Payment]) -> dict[tuple[str, str], set[str]]:
    """The idempotency keys each call (of a thread) was executed under."""
    keys: dict[tuple[str, str], set[str]] = {}
    for payment in ledger:
        keys.setdefault((payment.thread_id, payment.call_id), set()).add(payment.key)
    return keys


def head(store: Store, thread_id: str) -> int | None:
    """The thread's stored version; None when nothing of it is stored."""
    return store.load(thread_id).version if store.exists(thread_id) else None


def in_thread(function: Callable[[], T]) -> Future[T]:
    """Run ``function`` in a thread of its own (a new context: no lease held)."""
    future: Future[T] = Future()

    def target() -> None:
        try:
            future.set_result(function())
        except BaseException as exc:  # reported to whoever waits for the future
            future.set_exception(exc)

    threading.Thread(target=target, daemon=True).start()
    return future


class SecondRunner:
    """Another runner of a thread, in a thread of its own: a task's leases live in its
    own context, so a lease taken in the test's thread would be the first runner's.
    :meth:`take` takes the thread's lease; :meth:`do` runs a function under it."""

    def __init__(self, store: Store, thread_id: str) -> None:
        self.store, self.thread_id = store, thread_id
        self._jobs: queue.Queue[Callable[[], Any] | None] = queue.Queue()
        self._results: queue.Queue[tuple[Any, BaseException | None]] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.lease: Lease | None = None

    def _serve(self) -> None:
        try:
            with self.store.lease(self.thread_id) as lease:
                self.lease = lease
                self._results.put((lease, None))
                while (job := self._jobs.get()) is not None:
                    try:
                        self._results.put((job(), None))
                    except BaseException as exc:  # handed to the test's thread
                        self._results.put((None, exc))
        except BaseException as exc:  # the lease was refused
            self._results.put((None, exc))

    def _result(self) -> Any:
        value, error = self._results.get(timeout=WAIT)
        if error is not None:
            raise error
        return value

    def take(self) -> Lease:
        """Take the thread's lease, or raise why not (``ThreadBusyError``)."""
        self._thread.start()
        lease: Lease = self._result()
        return lease

    def do(self, job: Callable[[], T]) -> T:
        """Run ``job`` under the lease and give back what it returns (or raise)."""
        self._jobs.put(job)
        result: T = self._result()
        return result

    def release(self) -> None:
        """Give the lease back."""
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join(WAIT)


# Losing a lease -----------------------------------------------------------------------


def backends(url: str, *application_names: str) -> list[int]:
    """The server processes of the database's sessions with these names."""
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = ANY(%s) AND pid <> pg_backend_pid()",
            (list(application_names),),
        ).fetchall()
    return [int(row[0]) for row in rows]


def terminate(url: str, pids: list[int]) -> None:
    """End those sessions, waiting until each has ended (its locks released)."""
    with psycopg.connect(url, autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s, %s)", (pid, int(WAIT * 1000)))


def terminate_lease_session(url: str, holder: str) -> None:
    """End the session holding the leases of the store whose holder is ``holder``,
    found by its ``application_name``."""
    pids = backends(url, APPLICATION_PREFIX + holder)
    assert len(pids) == 1, f"expected one lease session of {holder!r}, found {pids}"
    terminate(url, pids)


def wait_until_gone(url: str, application_name: str) -> None:
    """Wait until the server has ended every session of that name by itself."""
    deadline = time.monotonic() + WAIT
    while backends(url, application_name):
        if time.monotonic() > deadline:
            raise AssertionError(f"session {application_name!r} still up after {WAIT}s")
        time.sleep(0.05)


def lock_file(database: Path, thread_id: str) -> Path:
    """The lock file of the thread's lease on a SQLite file."""
    return lease_directory(str(database)) / f"{thread_aggregate_id(thread_id).hex}.lock"


def drop_memory_lease(store: Store, thread_id: str) -> None:
    """Drop the thread's entry from the lease table of an in-memory store."""
    tables = _MEMORY[store._app.recorder]
    with tables.lock:
        del tables.leases[thread_id]


def lose_lease(store: Store, url: str, thread_id: str) -> None:
    """Lose the lease ``store`` holds on the thread, as each back end loses one."""
    if url.startswith("memory:"):
        drop_memory_lease(store, thread_id)
    elif url.startswith("sqlite:"):
        lock_file(Path(url.removeprefix("sqlite:///")), thread_id).unlink()
    else:
        terminate_lease_session(url, HOLDER)


# A process holding a lease on a SQLite file -----------------------------------------


class Holder:
    """A process holding (or refused) a thread's lease through one name of a file."""

    def __init__(self, database: Path, thread_id: str = THREAD) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(HOLDER_SCRIPT), str(database), thread_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def said(self) -> str:
        """Its next line."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        assert line, self.finished()
        return line

    def release(self) -> None:
        """Have it release its lease and exit."""
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()

    def finished(self) -> str:
        """Wait for it to exit 0; what it wrote to standard error."""
        _, errors = self.process.communicate(timeout=WAIT)
        assert self.process.returncode == 0, errors
        return errors
