"""Workers and run leases: worker processes answer every thread once, survive kills,
stop gracefully, and no two runners ever run one thread at once."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from itertools import product
from pathlib import Path
from typing import Any

import attrs
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import worker_app
from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    HmacReviewerVerifier,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Store,
    ThreadBusyError,
    ThreadStatus,
    Tool,
    ToolContext,
    Worker,
    create_cipher_key,
    open_store,
)
from covonaut_es.cli._json import SCHEMAS
from covonaut_es.domain import PauseKind, RunMode
from covonaut_es.domain._submissions import InputTaken
from covonaut_es.errors import ConfigurationError, InvalidSubmissionError, LeaseLostError
from covonaut_es.runtime._config import bound_config
from covonaut_es.service import ThreadService
from covonaut_es.store import WorkerRecord
from covonaut_es.store._backends._memory_leases import MemoryLeases
from covonaut_es.store._backends._sqlite_leases import lease_directory
from covonaut_es.store._leases import MAX_WORKER_ID_BYTES
from covonaut_es.workers import _candidates
from covonaut_es.workers._step import step
from support import answer, call, echo_tool

ROOT = Path(__file__).resolve().parent.parent
WORKER = (sys.executable, "-m", "covonaut_es", "worker")
TOKEN = HmacReviewerVerifier(worker_app.SECRET).issue_token("rita", ttl_seconds=3600)


def agent(store: Store, thread_id: str) -> Agent:
    """An agent of the worker tests' application, bound to ``thread_id``."""
    config = worker_app.make_config(thread_id)
    return Agent(
        attrs.evolve(config, checkpoint=CheckpointSettings(store=store, thread_id=thread_id))
    )


def pause(store: Store, *thread_ids: str) -> None:
    """Run each thread until it pauses on its payment's review."""
    for thread_id in thread_ids:
        paused = agent(store, thread_id)
        paused.run("Pay 5.")
        assert paused.pending_reviews


def decide(store: Store, *thread_ids: str) -> None:
    """Approve each thread's pending review, as a reviewer would."""
    for thread_id in thread_ids:
        deciding = agent(store, thread_id)
        deciding.approve(deciding.pending_reviews[0].review_id, reviewer=TOKEN)


def answers(store: Store, thread_id: str) -> int:
    """How many times the thread's final answer was given."""
    messages = store.state_at(thread_id).messages
    return sum(m.role is Role.ASSISTANT and m.content == worker_app.ANSWER for m in messages)


def run_modes(store: Store, thread_id: str) -> list[RunMode]:
    """The modes of the thread's runs, in order."""
    history = store.history(thread_id)
    return [e.mode for e in history if isinstance(e, AgentThread.RunStarted)]


def payments(ledger: Path) -> dict[str, Counter[str]]:
    """The idempotency keys each thread paid under, with how often."""
    paid: dict[str, Counter[str]] = {}
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    for line in lines:
        thread_id, key = line.rsplit(" ", 1)
        paid.setdefault(thread_id, Counter())[key] += 1
    return paid


class Fleet:
    """Worker processes of ``covonaut-es worker`` on one store."""

    def __init__(self, url: str, tmp_path: Path, delay: float = 0.0) -> None:
        self.url, self.tmp_path = url, tmp_path
        self.ledger = tmp_path / "ledger"
        self.hold = tmp_path / "hold"
        """While this file exists, the workers' model waits (see ``worker_app``)."""
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
            "WORKER_TEST_LEDGER": str(self.ledger),
            "WORKER_TEST_DELAY": str(delay),
            "WORKER_TEST_HOLD": str(self.hold),
        }
        self.processes: list[subprocess.Popen[str]] = []
        self.last_listed: list[dict[str, Any]] | None = None

    def start(self, *options: str) -> subprocess.Popen[str]:
        log = open(self.tmp_path / f"worker-{len(self.processes)}.log", "w")  # noqa: SIM115
        process = subprocess.Popen(
            [*WORKER, "--store", self.url, "--app", "worker_app:make_config", *options],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            text=True,
        )
        log.close()
        self.processes.append(process)
        return process

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "covonaut_es", *args, "--store", self.url],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def logs(self) -> str:
        """Each worker process's exit status, or that it runs, and its log."""
        return "\n".join(
            f"worker {n} (pid {process.pid}, exit {process.poll()}):\n"
            + (self.tmp_path / f"worker-{n}.log").read_text()[-4000:]
            for n, process in enumerate(self.processes)
        )

    def listed(self) -> list[dict[str, Any]]:
        """The workers ``covonaut-es workers --json`` lists; its error output when it fails."""
        result = self.cli("workers", "--json")
        assert result.returncode == 0, result.stderr
        listed: list[dict[str, Any]] = json.loads(result.stdout)
        self.last_listed = listed
        return listed

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)


@pytest.fixture
def fleet(shared_url: str, tmp_path: Path) -> Iterator[Callable[..., Fleet]]:
    made: list[Fleet] = []

    def make(delay: float = 0.0) -> Fleet:
        made.append(Fleet(shared_url, tmp_path, delay))
        return made[-1]

    yield make
    for each in made:
        each.stop()


def wait_for(
    condition: Callable[[], bool],
    what: str,
    timeout: float = 60.0,
    seen: Callable[[], str] = str,
) -> None:
    """Wait until ``condition()`` holds; past ``timeout``, fail with what ``seen()`` says
    of the moment (the workers' logs, say), for a failure in CI to explain itself."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for {what} after {timeout}s\n{seen()}")
        time.sleep(0.05)


def finished(store: Store, thread_ids: list[str]) -> Callable[[], bool]:
    return lambda: all(store.state_at(t).status is ThreadStatus.FINISHED for t in thread_ids)


@pytest.mark.slow
def test_worker_processes_answer_every_thread_exactly_once(
    shared_url: str, fleet: Callable[..., Fleet]
) -> None:
    """Two worker processes resume threads whose reviews are decided and run submitted
    input: every thread is answered once and pays once; `workers` lists both with the
    threads they hold; SIGTERM stops each with exit 0 and withdraws it."""
    workers = fleet(delay=0.05)
    paused = [f"customer-{n}" for n in range(6)]
    submitted = ["walk-in-1", "walk-in-2"]
    with open_store(shared_url) as store:
        pause(store, *paused)
        running = [workers.start("--concurrency", "2") for _ in range(2)]
        for thread_id in submitted:
            assert store.submit(thread_id, "Pay 5.") == 1
        wait_for(
            lambda: (
                all(agent(store, t).pending_reviews for t in submitted if store.exists(t))
                and all(store.exists(t) for t in submitted)
            ),
            "the submitted threads to pause",
        )
        wait_for(
            lambda: len(workers.listed()) == 2,
            "both workers listed",
            seen=lambda: f"listed: {workers.last_listed}\n{workers.logs()}",
        )
        decide(store, *paused, *submitted)
        listed = workers.listed()
        jsonschema.validate(listed, SCHEMAS["workers"])
        assert {w["pid"] for w in listed} == {p.pid for p in running}
        wait_for(finished(store, paused + submitted), "every thread's answer")
        assert all(answers(store, t) == 1 for t in paused + submitted)
        paid = payments(workers.ledger)
        assert paid == {t: Counter({next(iter(paid[t])): 1}) for t in paused + submitted}
        for process in running:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
        assert json.loads(workers.cli("workers", "--json").stdout) == []


@pytest.mark.slow
def test_workers_killed_at_random_never_pay_twice_under_different_keys(
    shared_url: str, fleet: Callable[..., Fleet]
) -> None:
    """Worker processes SIGKILLed at random moments (seeded, 24 kills) while they run
    decided threads: another worker takes each thread over; every thread ends with
    one answer, or is left with its calls in doubt; no payment ran under two keys."""
    rng = random.Random(17)
    workers = fleet(delay=0.1)
    thread_ids: list[str] = []
    kills = 0
    with open_store(shared_url) as store:
        live = [workers.start("--concurrency", "2") for _ in range(2)]
        for round_ in range(4):
            batch = [f"r{round_}-t{n}" for n in range(6)]
            thread_ids += batch
            pause(store, *batch)
            decide(store, *batch)
            for kill in range(6):
                if kill == 0:  # one kill a round lands on a worker inside a run, surely
                    victim = _runner_inside_a_run(store, live)
                    live.remove(victim)
                else:
                    time.sleep(rng.uniform(0.05, 0.4))
                    victim = live.pop(rng.randrange(len(live)))
                victim.kill()
                victim.wait(timeout=30)
                kills += 1
                live.append(workers.start("--concurrency", "2"))
        assert kills >= 20
        wait_for(
            lambda: all(
                store.state_at(t).status is ThreadStatus.FINISHED or store.load(t).in_doubt
                for t in thread_ids
            ),
            "every thread to finish or be left in doubt",
        )
        taken_over = [t for t in thread_ids if RunMode.CONTINUE in run_modes(store, t)]
        assert taken_over, "no kill landed in the middle of a run: the test did not test"
        paid = payments(workers.ledger)
        for thread_id in thread_ids:
            assert len(paid.get(thread_id, ())) <= 1, (thread_id, paid[thread_id])
            if store.state_at(thread_id).status is ThreadStatus.FINISHED:
                assert answers(store, thread_id) == 1
                assert len(paid[thread_id]) == 1


def _runner_inside_a_run(store: Store, live: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    """The worker process that holds a thread whose run has started, once one does: a
    kill at a random moment may land between runs, and the test must kill inside one."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        by_pid = {process.pid: process for process in live}
        for worker in store.live_workers():
            running = [
                t for t in worker.threads if store.state_at(t).status is ThreadStatus.RUNNING
            ]
            if worker.pid in by_pid and running:
                return by_pid[worker.pid]
        time.sleep(0.005)
    raise AssertionError("no worker was inside a run within 30 s")


@pytest.mark.slow
def test_sigterm_finishes_the_step_under_way_and_releases_its_lease(
    shared_url: str, fleet: Callable[..., Fleet]
) -> None:
    """While a step runs, `workers` lists the thread its worker holds; SIGTERM in the
    middle of the step: the worker finishes it (the thread is answered), releases the
    lease and exits 0."""
    workers = fleet()
    with open_store(shared_url) as store:
        pause(store, "slow")
        workers.hold.touch()  # the step stays under way until the signal was sent
        process = workers.start()
        decide(store, "slow")
        wait_for(lambda: store.state_at("slow").status is ThreadStatus.RUNNING, "the resume")

        # The worker's record lists what it holds from its next heartbeat, which it
        # beats as soon as it takes a lease: a moment after the run starts, under load.
        def listed() -> list[tuple[int, list[str]]]:
            return [
                (w["pid"], w["threads"])
                for w in json.loads(workers.cli("workers", "--json").stdout)
            ]

        wait_for(lambda: listed() == [(process.pid, ["slow"])], "the worker's record")
        process.send_signal(signal.SIGTERM)
        workers.hold.unlink()
        assert process.wait(timeout=30) == 0
        assert store.state_at("slow").status is ThreadStatus.FINISHED
        with store.lease("slow"):
            pass  # free again


@pytest.mark.slow
def test_once_drains_what_is_ready_and_exits(shared_url: str, fleet: Callable[..., Fleet]) -> None:
    """--once runs every ready thread (decided reviews, submitted input) and exits 0,
    leaving the threads that wait for a person paused."""
    workers = fleet()
    with open_store(shared_url) as store:
        pause(store, "decided", "undecided")
        decide(store, "decided")
        store.submit("submitted", "Pay 5.")
        process = workers.start("--once")
        assert process.wait(timeout=60) == 0
        assert store.state_at("decided").status is ThreadStatus.FINISHED
        assert agent(store, "undecided").pending_reviews
        assert agent(store, "submitted").pending_reviews  # ran to its own review


def test_a_second_runner_gets_thread_busy_and_nothing_runs(store: Store) -> None:
    """While one runner holds a thread's lease, another agent's run, resume or settle
    raises ThreadBusyError naming the thread and the holder, before any model or tool
    call, and stores nothing; async alike; once released, the run goes ahead."""
    tool_log: list[str] = []
    provider = ScriptedProvider([call(("c1", "echo", '{"text": "x"}')), answer("done")])
    config = AgentConfig(
        provider=provider,
        tools=[echo_tool(tool_log)],
        checkpoint=CheckpointSettings(store=store, thread_id="contested"),
    )
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with open_store(store.url) as other:
            other.name_lease_holder("worker w-1")
            with other.lease("contested"):
                held.set()
                release.wait(timeout=30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(timeout=30)
        runner = Agent(config)
        with pytest.raises(ThreadBusyError) as busy:
            runner.run("Echo x.")
        assert busy.value.thread_id == "contested"
        assert busy.value.holder == "worker w-1"
        with pytest.raises(ThreadBusyError):
            asyncio.run(runner.arun("Echo x."))
        assert provider.requests == [] and tool_log == []
        assert not store.exists("contested")
    finally:
        release.set()
        holder.join(timeout=30)
    assert Agent(config).run("Echo x.") == "done"
    assert tool_log == ["c1"]


def test_a_worker_in_process_resumes_decided_threads_and_binds_its_store(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker(store, make_config).run(once=True) resumes a thread whose review was
    decided, runs submitted input on a new thread, and leaves undecided ones alone."""
    monkeypatch.setenv("WORKER_TEST_LEDGER", str(tmp_path / "ledger"))
    pause(store, "a", "b")
    decide(store, "a")
    store.submit("c", "Pay 5.")
    Worker(store, worker_app.make_config, concurrency=2).run(once=True)
    assert store.state_at("a").status is ThreadStatus.FINISHED
    assert answers(store, "a") == 1
    assert agent(store, "b").pending_reviews and agent(store, "c").pending_reviews
    assert list(payments(tmp_path / "ledger")) == ["a"]


def test_submit_refuses_what_cannot_be_stored(store: Store) -> None:
    """submit() refuses a non-string or text with a lone surrogate, naming why."""
    with pytest.raises(InvalidSubmissionError, match="must be a string"):
        store.submit("t", b"bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidSubmissionError, match="not valid text"):
        store.submit("t", "bad \udc80")
    assert store.submit("t", "fine") == 1 and store.submit("t", "again") == 2


def test_an_encrypted_stores_registry_seals_the_threads_held(tmp_path: Path) -> None:
    """In an encrypted store, a worker record's threads are sealed under the store's
    key: no lease or registry file holds a thread id in clear, and the store with its
    key lists them."""
    url = f"sqlite:///{tmp_path / 'sealed.db'}"
    now = datetime.now(UTC)
    record = WorkerRecord(
        worker_id="w-1", host="h", pid=1, started_at=now, heartbeat_at=now, threads=("ann-42",)
    )
    with open_store(url, cipher_key=create_cipher_key()) as store:
        with store.lease("ann-42"):
            store.publish_worker(record)
        assert [w.threads for w in store.live_workers()] == [("ann-42",)]
        leases = lease_directory(str(tmp_path / "sealed.db"))
        files = [path for path in leases.rglob("*") if path.is_file()]
        assert files and all(b"ann-42" not in path.read_bytes() for path in files)


def test_the_worker_commands_refuse_bad_input_in_one_line(tmp_path: Path) -> None:
    """worker refuses an --app that is not MODULE:FACTORY or cannot be imported, and
    workers a store that does not exist, each with exit 2, one line and no traceback;
    nothing is created."""
    missing = f"sqlite:///{tmp_path / 'missing.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for args, expected in (
        (["worker", "--app", "worker_app"], "takes MODULE:FACTORY"),
        (
            ["worker", "--app", "no_such_module:make"],
            "its module 'no_such_module' cannot be imported",
        ),
        (["worker", "--app", "json:no_such_factory"], "has no 'no_such_factory'"),
        (["workers"], "there is no SQLite file"),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "covonaut_es", *args, "--store", missing],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 2, result.stderr
        assert expected in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


_USER_MODULES = {
    "a module that raises": "raise RuntimeError('config missing')\n",
    "a module without the name": "OTHER = 1\n",
    "a module whose name is no class or function": "App = 1\nmake = 1\n",
    "a module that does not parse": "def (:\n",
}
"""Code of the user's a command may be named to import, each wrong in its own way."""


@pytest.mark.parametrize("module", sorted(_USER_MODULES))
@pytest.mark.parametrize(
    "command",
    [
        ["threads", "--application", "usermod:App"],
        ["worker", "--app", "usermod:make", "--store", "memory://x"],
    ],
    ids=["--application", "worker --app"],
)
def test_the_users_code_named_wrong_is_refused_alike_by_every_command(
    tmp_path: Path, module: str, command: list[str]
) -> None:
    """``--application MODULE:CLASS`` and ``worker --app MODULE:FACTORY`` import the
    user's code alike, from the working directory first, as ``python -m`` does: a module
    that raises or does not parse, a name it lacks, or one of the wrong kind exits 2 in
    one line naming the option, never a traceback. ``--application`` gave a module's own
    error as a traceback and did not look in the working directory (helper-199)."""
    (tmp_path / "usermod.py").write_text(_USER_MODULES[module])
    result = subprocess.run(
        [sys.executable, "-m", "covonaut_es", *command],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert f": {command[1]} 'usermod:" in result.stderr, result.stderr


@pytest.mark.parametrize("where", ["a directory all may write", "another user's", "my own"])
@pytest.mark.parametrize("installed", [True, False], ids=["installed too", "only there"])
def test_the_users_code_is_imported_from_the_working_directory_only_if_its_own(
    tmp_path: Path, where: str, installed: bool
) -> None:
    """The console script imports ``--application``'s module from the import path
    first, then from the working directory only if it is the user's own and not every
    user may write in it (``/tmp``): a module another user planted there, or in a folder
    they made, never runs as the operator, even under the name of one on the import
    path. ``--application`` ran such a module (helpers 201, 203); a module that exits
    while imported is a usage error, not a silent exit 0."""
    here = tmp_path / "here"
    here.mkdir()
    here.chmod(0o1777 if where == "a directory all may write" else 0o755)
    marker = tmp_path / "ran"
    (here / "usermod.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit(0)\n")
    if where == "another user's":  # made in /tmp by someone else, say
        os.chown(here, 65534, 65534)
    path = [str(ROOT / "src")]
    if installed:
        (tmp_path / "site").mkdir()
        (tmp_path / "site" / "usermod.py").write_text("App = 1\n")
        path.append(str(tmp_path / "site"))
    script = Path(sys.executable).parent / "covonaut-es"
    result = subprocess.run(
        [str(script), "threads", "--application", "usermod:App"],
        cwd=here,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert marker.exists() == (where == "my own" and not installed), result.stderr
    if marker.exists():
        assert "SystemExit" in result.stderr


def test_a_working_directory_the_user_cannot_read_is_passed_over(tmp_path: Path) -> None:
    """A command run from a working directory its user cannot look at (``sudo -u`` from
    root's home), or one since removed, imports the user's code from the import path
    as ever: it was a PermissionError traceback (helper-203)."""
    here = tmp_path / "gone"
    here.mkdir()
    script = Path(sys.executable).parent / "covonaut-es"
    code = (
        "import os, sys, subprocess; os.chdir(sys.argv[1]); os.rmdir(sys.argv[1]); "
        "sys.exit(subprocess.run(sys.argv[2:]).returncode)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(here), str(script), "threads", "--application",
         "json:JSONDecoder"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "not a subclass of covonaut_es.AgentApplication" in result.stderr


class _Crash(BaseException):
    """Stands for the death of the runner's process inside a tool."""


def test_calls_in_doubt_of_a_dead_runner_pause_the_thread_in_the_review_queue(
    tmp_path: Path,
) -> None:
    """A runner dies inside a tool that is not idempotent: the worker that takes the
    thread over runs nothing, pauses it with an interrupt naming the call in doubt,
    which `reviews` lists; once a person settles the call, a worker resumes it."""
    url = f"sqlite:///{tmp_path / 'doubt.db'}"
    ran: list[str] = []

    def charge(ctx: ToolContext, args: dict[str, object]) -> object:
        ran.append(ctx.idempotency_key)
        if len(ran) == 1:
            raise _Crash
        return "charged"

    def make_config(thread_id: str) -> AgentConfig:
        def model(request: ProviderRequest) -> ProviderResponse:
            if request.messages[-1].role is Role.TOOL:
                return answer("Charged.")
            return call(("c1", "charge", "{}"))

        return AgentConfig(
            provider=ScriptedProvider(respond=model),
            tools=[Tool("charge", "Charge", {"type": "object"}, charge)],
        )

    with open_store(url) as store:
        settings = CheckpointSettings(store=store, thread_id="t")
        with pytest.raises(_Crash):
            Agent(attrs.evolve(make_config("t"), checkpoint=settings)).run("Charge me.")
        Worker(store, make_config).run(once=True)
        state = store.state_at("t")
        assert state.status is ThreadStatus.INTERRUPTED and len(ran) == 1
        assert [i.kind for i in state.interrupts] == [PauseKind.IN_DOUBT]
        listed = subprocess.run(
            [sys.executable, "-m", "covonaut_es", "reviews", "--json", "--store", url],
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        [item] = json.loads(listed.stdout)
        assert (item["thread_id"], item["tool_call_id"], item["kind"]) == ("t", "c1", "in_doubt")
        assert "in doubt" in item["reason"]
        settler = Agent(attrs.evolve(make_config("t"), checkpoint=settings))
        settler.settle("c1", result="charged once, found in the ledger")
        Worker(store, make_config).run(once=True)
        assert store.state_at("t").status is ThreadStatus.FINISHED and len(ran) == 1


def test_a_worker_carries_an_edited_approval_and_a_response_to_the_answer(
    store: Store,
) -> None:
    """Decisions made in the inbox's two new ways reach their answers through a worker:
    an edited approval runs the tool once with exactly the edit, and a response is the
    call's result with the tool never run."""
    paid: list[tuple[str, object]] = []

    def pay(ctx: ToolContext, args: dict[str, object]) -> object:
        paid.append((ctx.thread_id, args["amount"]))
        return {"paid": args["amount"]}

    def model(request: ProviderRequest) -> ProviderResponse:
        last = request.messages[-1]
        if last.role is not Role.TOOL:
            return call(("c1", "pay", '{"amount": 40}'))
        if "edited arguments" in last.content:
            return call(("c2", "pay", '{"amount": 20}'))
        return answer(f"Done: {last.content}")

    def make_config(thread_id: str) -> AgentConfig:
        pay_tool = Tool("pay", "Pay", {"type": "object"}, pay, requires_approval=True)
        return AgentConfig(
            provider=ScriptedProvider(respond=model),
            tools=[pay_tool],
            reviewer_verifier=HmacReviewerVerifier(worker_app.SECRET),
        )

    def paused(thread_id: str) -> Agent:
        settings = CheckpointSettings(store=store, thread_id=thread_id)
        bound = Agent(attrs.evolve(make_config(thread_id), checkpoint=settings))
        bound.run("Pay 40.")
        return bound

    edited, responded = paused("edited"), paused("responded")
    edited.approve(edited.pending_reviews[0].review_id, reviewer=TOKEN, arguments={"amount": 20})
    responded.respond(
        responded.pending_reviews[0].review_id, reviewer=TOKEN, answer="Paid by hand."
    )
    Worker(store, make_config, concurrency=2).run(once=True)

    assert paid == [("edited", 20)]
    assert store.state_at("edited").messages[-1].content == 'Done: {"paid":20}'
    assert store.state_at("responded").messages[-1].content == "Done: Paid by hand."
    for thread_id in ("edited", "responded"):
        assert store.state_at(thread_id).status is ThreadStatus.FINISHED


def test_a_step_that_fails_with_nothing_recorded_is_stepped_again_by_the_live_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step that raises before anything could record it (here its configuration, as a
    full disk fails a save) leaves the thread as it was: the running worker steps it
    again a while later, with no new event to wake it, and runs the input then."""
    monkeypatch.setattr(_candidates, "FAILED_RETRY", 0.2)
    failures: list[str] = []

    def make_config(thread_id: str) -> AgentConfig:
        if not failures:
            failures.append(thread_id)
            raise OSError(28, "No space left on device")
        return AgentConfig(provider=ScriptedProvider([answer("Done.")]))

    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        store.submit("t", "Do it.")
        worker = Worker(store, make_config)
        running = threading.Thread(target=worker.run)
        running.start()
        try:
            deadline = time.monotonic() + 30
            while (found := store.find("t")) is None or found.status is not ThreadStatus.FINISHED:
                assert time.monotonic() < deadline, found
                time.sleep(0.05)
        finally:
            worker.stop()
            running.join(timeout=30)
        assert failures == ["t"]


@pytest.mark.parametrize("removed", ["the registry", "the whole lease directory"])
def test_a_workers_record_removed_behind_it_is_written_again_at_its_next_heartbeat(
    tmp_path: Path, removed: str
) -> None:
    """A cleaner of temporary files removes the worker registry, or the whole lease
    directory, while a worker lives: its next heartbeat lists it again, so that a
    person's settling or retry sees the calls it still runs."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    now = datetime.now(UTC)
    record = WorkerRecord(
        worker_id="w-1", host="h", pid=os.getpid(), started_at=now, heartbeat_at=now, threads=()
    )
    with open_store(url) as store:
        store.publish_worker(record)
        assert [w.worker_id for w in store.live_workers()] == ["w-1"]
        leases = lease_directory(str(tmp_path / "threads.db"))
        shutil.rmtree(leases / "workers" if removed == "the registry" else leases)
        assert store.live_workers() == ()
        store.publish_worker(record)  # the next heartbeat
        assert [w.worker_id for w in store.live_workers()] == ["w-1"]


STALE_POINTS = ("before reading its submissions", "before taking input", "before running it")
"""Where a runner is paused (a GC pause, SIGSTOP, a slow VM) while its lease is lost."""


def _answering(runs: list[str]) -> Callable[[str], AgentConfig]:
    """A configuration whose model answers each input, noting it in ``runs``."""

    def make_config(thread_id: str) -> AgentConfig:
        def respond(request: ProviderRequest) -> ProviderResponse:
            runs.append(request.messages[-1].content)
            return ProviderResponse(content="ok")

        return AgentConfig(provider=ScriptedProvider(respond=respond))

    return make_config


def _run_with_a_stale_runner(
    tmp_path: Path, point: str, inputs: int, late: bool
) -> tuple[list[str], list[str], Exception | None]:
    """Runner A takes thread "t" of ``inputs`` submissions and is paused at ``point``;
    its lease lost (its lock file removed), worker B runs the thread (and input
    submitted meanwhile, if ``late``); A goes on, then B runs what is left. Returns the
    inputs submitted, every model call's input, and what A's step raised."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    runs: list[str] = []
    make_config = _answering(runs)
    texts = [f"input {n}" for n in range(inputs + late)]
    a, b = open_store(url), open_store(url)
    for text in texts[:inputs]:
        a.submit("t", text)
    reached, go = threading.Event(), threading.Event()

    def paused(method: Callable[..., Any], *, after: bool) -> Callable[..., Any]:
        def at_point(*args: Any) -> Any:
            if not after:
                reached.set()
                go.wait(30)
            result = method(*args)
            if after:
                reached.set()
                go.wait(30)
            return result

        return at_point

    submissions = a._submissions
    if point == STALE_POINTS[0]:
        submissions.submitted = paused(submissions.submitted, after=False)  # type: ignore[method-assign]
    else:
        submissions.take = paused(submissions.take, after=point == STALE_POINTS[2])  # type: ignore[method-assign]
    raised: list[Exception] = []

    def runner_a() -> None:
        try:
            with a.lease("t"):
                step(a, bound_config(make_config, a, "t"), "t")
        except Exception as exc:
            raised.append(exc)
        finally:
            reached.set()

    running = threading.Thread(target=runner_a)
    running.start()
    try:
        assert reached.wait(30)
        for lock in lease_directory(str(tmp_path / "threads.db")).glob("*.lock"):
            lock.unlink()  # A's lease is lost
        if late:
            b.submit("t", texts[-1])
        Worker(b, make_config).run(once=True)
    finally:
        go.set()
        running.join(30)
    Worker(b, make_config).run(once=True)
    a.close()
    b.close()
    return texts, runs, raised[0] if raised else None


def test_a_runner_that_lost_its_lease_before_taking_input_takes_none(tmp_path: Path) -> None:
    """A runner paused between reading a thread's submissions and taking one, whose
    lease is lost meanwhile and whose inputs another worker runs, records no take when
    it goes on: it stops with LeaseLostError, and no input is run a second time."""
    texts, runs, raised = _run_with_a_stale_runner(tmp_path, STALE_POINTS[1], 2, late=False)
    assert isinstance(raised, LeaseLostError)
    assert runs == texts
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        stream = store.submissions.submitted("t").inputs[0].originator_id
        takes = [e for e in store._app.events.get(stream) if isinstance(e, InputTaken)]
        assert [e.submitted_version for e in takes] == [1, 2]  # B's two, none of A's


def test_a_take_recorded_out_of_date_moves_nothing_back(tmp_path: Path) -> None:
    """A take recorded after a later one (by a runner fenced out, before takes were
    checked when written) does not count: the latest input taken stays the one taken
    last, and no worker runs it, or the one after, again."""
    runs: list[str] = []
    make_config = _answering(runs)
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        store.submit("t", "one")
        store.submit("t", "two")
        Worker(store, make_config).run(once=True)
        stale = store._submissions._append(
            store.submissions.submitted("t").inputs[0].originator_id,
            InputTaken,
            thread_id="t",
            submitted_version=1,
            thread_version=0,
        )
        submitted = store.submissions.submitted("t")
        assert submitted.version == stale
        assert submitted.taken is not None
        assert submitted.taken.submitted_version == 2
        assert submitted.waiting() is None
        assert Worker(store, make_config).run(once=True).steps == 0
    assert runs == ["one", "two"]


@pytest.mark.parametrize(
    ("point", "inputs", "late"), list(product(STALE_POINTS, (1, 2, 3), (False, True)))
)
def test_a_runner_paused_anywhere_in_its_step_while_its_lease_is_lost_runs_nothing_twice(
    tmp_path: Path, point: str, inputs: int, late: bool
) -> None:
    """Whichever point of its step a runner is paused at while its lease is lost and
    another worker runs the thread (input submitted meanwhile or not), every input is
    run exactly once, and no model call is made twice."""
    texts, runs, _ = _run_with_a_stale_runner(tmp_path, point, inputs, late)
    assert runs == texts


HOSTILE_WORKER_IDS = st.one_of(
    st.sampled_from(
        [
            "../../victim",
            "../victim",
            "..",
            ".",
            "",
            "a/b",
            "/etc/passwd",
            "w\\..\\x",
            "w\x00",
            "w\n1",
            "\u202ew1",
            "\udcff",
            "x" * (MAX_WORKER_ID_BYTES + 1),
            "é" * (MAX_WORKER_ID_BYTES // 2 + 1),
            "x" * 10_000_000,
        ]
    ),
    st.builds(
        lambda before, bad, after: before + bad + after,
        st.text("w1.-", max_size=5),
        st.sampled_from(["/", "\\"]) | st.characters(categories=["Cc", "Cf", "Cs", "Zl", "Zp"]),
        st.text("w1.-", max_size=5),
    ),
    st.sampled_from([None, 5, b"w1", ("w1",)]),
)
"""Worker ids no back end may take: paths, dot-segments, hidden characters, too long, no
text at all."""


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(worker_id=HOSTILE_WORKER_IDS)
def test_a_worker_id_is_checked_by_one_rule_wherever_it_enters(
    tmp_path: Path, worker_id: Any
) -> None:
    """Property: an id that is a path, a dot-segment, holds a hidden character, is too
    long or is no text is a ConfigurationError naming the argument, from
    ``withdraw_worker``, ``publish_worker`` and ``Worker(worker_id=...)`` alike, and no
    file outside the registry changes: ``withdraw_worker("../../victim")`` deleted one,
    and ``None``, ``5`` or a 10 MB id were taken or failed untyped (helper-167)."""
    folder = tmp_path / "ids"
    folder.mkdir(exist_ok=True)
    victims = {folder / "victim.json": b"{}", folder / "victim.lock": b"held"}
    for path, data in victims.items():
        path.write_bytes(data)
    with open_store(f"sqlite:///{folder / 'threads.db'}") as store:
        store.publish_worker(_record("w1"))  # the registry exists
        with pytest.raises(ConfigurationError, match=r"^worker_id "):
            store.withdraw_worker(worker_id)
        with pytest.raises(ConfigurationError, match=r"^record\.worker_id "):
            store.publish_worker(_record(worker_id))
        if worker_id is not None:  # None: the default id
            with pytest.raises(ConfigurationError, match=r"^Worker\(worker_id\) "):
                Worker(store, _answering([]), worker_id=worker_id)
        assert [w.worker_id for w in store.live_workers()] == ["w1"]
    assert {path: path.read_bytes() for path in victims} == victims


WORKER_IDS = st.text(
    st.characters(categories=["L", "N", "P", "S"], exclude_characters="/\\"),
    min_size=1,
    max_size=30,
).filter(lambda text: text not in (".", ".."))


def _record(worker_id: Any) -> WorkerRecord:
    now = datetime.now(UTC)
    return WorkerRecord(worker_id=worker_id, host="h", pid=1, started_at=now, heartbeat_at=now)


def _died(url: str, store: Store, worker_id: str) -> None:
    """The worker that ``store`` published as ``worker_id`` dies: its process ends (on
    SQLite its record's lock goes with it), or its heartbeat stops (on PostgreSQL)."""
    store.close()
    if url.startswith("postgres"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "UPDATE covonaut_workers SET heartbeat_at = now() - interval '1 hour' "
                "WHERE worker_id = %s",
                (worker_id,),
            )


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(worker_id=WORKER_IDS, whose=st.sampled_from(["own", "another live", "a dead"]))
def test_a_store_withdraws_its_own_or_a_dead_workers_record_never_a_live_ones(
    shared_url: str, worker_id: str, whose: str
) -> None:
    """Property: of a worker id published by this store (own), by another store whose
    worker lives, or by one whose worker died, ``withdraw_worker`` removes the first
    and the last, and refuses the live one's, which stays listed and its id taken; the
    withdrawing store's own record stays listed whichever it names. Another store
    removed a live worker's record and lock file (and closed its own record's lock),
    after which a third could publish under the live worker's id (helper-167); on
    PostgreSQL a third's publish overwrote the live worker's row, and its withdraw then
    removed it as its own (helper-170)."""
    with open_store(shared_url) as other, open_store(shared_url) as third:
        # A store publishes one worker's record: its own is the-other, or the id named.
        own = worker_id if whose == "own" else "the-other"
        other.publish_worker(_record(own))
        publisher = other if whose == "own" else open_store(shared_url)
        publisher.publish_worker(_record(worker_id))
        if whose == "a dead":
            _died(shared_url, publisher, worker_id)
        if whose == "another live":
            with pytest.raises(ConfigurationError, match="is live"):
                other.withdraw_worker(worker_id)
            assert worker_id in [w.worker_id for w in third.live_workers()]
            with pytest.raises(ConfigurationError, match="taken by a live worker"):
                third.publish_worker(_record(worker_id))
            with pytest.raises(ConfigurationError, match="is live"):  # not made its own
                third.withdraw_worker(worker_id)
            assert worker_id in [w.worker_id for w in other.live_workers()]
            publisher.withdraw_worker(worker_id)  # its own store still can
            publisher.close()
        else:
            other.withdraw_worker(worker_id)
        listed = [w.worker_id for w in third.live_workers()]
        assert worker_id not in listed
        assert whose == "own" or "the-other" in listed
        third.publish_worker(_record(worker_id))  # the id is free again
        third.withdraw_worker(worker_id)
        if whose != "own":
            other.withdraw_worker("the-other")


def test_a_memory_store_withdraws_no_record_another_open_store_published() -> None:
    """Two stores on one in-memory recorder: one's live worker's record is not removed,
    nor overwritten, by the other, until the store that published it is closed."""

    class Recorder:
        pass

    recorder = Recorder()
    first = MemoryLeases("first", recorder, None)
    second = MemoryLeases("second", recorder, None)
    first.publish(_record("w1"))
    with pytest.raises(ConfigurationError, match="is live"):
        second.withdraw("w1")
    with pytest.raises(ConfigurationError, match="taken by a live worker"):
        second.publish(_record("w1"))
    assert [w.worker_id for w in second.workers()] == ["w1"]
    first.close()
    second.withdraw("w1")
    assert second.workers() == ()


@pytest.mark.parametrize("durability", ["step", "checkpoint"])
def test_a_thread_given_up_during_its_step_is_no_failed_step(
    shared_url: str, durability: str
) -> None:
    """A person abandons the thread while the worker's run of it goes on (here, from
    inside its tool): the step ends as given up, the results of what ran recorded, and
    ``--once`` reports no failure (it logged a traceback and exited 1, and the thread
    was stepped again)."""
    ran: list[str] = []
    with open_store(shared_url) as store:

        def pay(ctx: ToolContext, args: dict[str, Any]) -> str:
            ran.append(ctx.tool_call_id)
            ThreadService(store).abandon("t", "the customer withdrew")
            return "paid"

        def make_config(thread_id: str) -> AgentConfig:
            return AgentConfig(
                provider=ScriptedProvider([call(("c1", "pay", "{}")), answer("done")]),
                tools=[Tool("pay", "Pay", {"type": "object"}, pay)],
                checkpoint=CheckpointSettings(
                    store=store, thread_id=thread_id, durability=durability
                ),
            )

        store.submit("t", "Pay.")
        summary = Worker(store, make_config).run(once=True)
        assert summary.failed == ()
        assert ran == ["c1"]
        assert store.load("t").status is ThreadStatus.ABANDONED
