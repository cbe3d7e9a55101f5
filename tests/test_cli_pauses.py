"""The command line acts on every kind of pause through the service layer: a person
answers a tool's pause, settles a call in doubt, gives a thread up or has a failed run
tried again, and a worker takes the thread on; ``worker --once`` says when a step
failed, and ``workers`` shows a hung tool. Every refusal is one line that records
nothing."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import jsonschema
import msgspec
import pytest

import pauses_app
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
    ToolContext,
    Worker,
    open_store,
)
from covonaut_es.cli import main
from covonaut_es.cli._json import SCHEMAS, call_arguments_text, pending_review, review_arguments
from covonaut_es.domain import AgentThread, PauseKind
from covonaut_es.errors import ProviderError
from covonaut_es.projections import PendingReview
from covonaut_es.service import ThreadService
from support import answer, call

ROOT = Path(__file__).resolve().parent.parent
SECRET = secrets.token_hex(32)
APP = ("--app", "pauses_app:make_config")


def token(reviewer: str = "rita", secret: str = SECRET) -> str:
    """A reviewer token signed with ``secret``."""
    return HmacReviewerVerifier(secret.encode()).issue_token(reviewer, ttl_seconds=600)


@attrs.frozen
class Ran:
    """What one command printed, and its exit status."""

    status: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.status == 0, self.err
        return json.loads(self.out)


class Cli:
    """``covonaut-es ARGS --store URL``, run in this process by ``main``."""

    def __init__(self, url: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.url, self._capsys = url, capsys

    def __call__(self, *args: str) -> Ran:
        self._capsys.readouterr()
        status = main([*args, "--store", self.url])
        captured = self._capsys.readouterr()
        return Ran(status, captured.out, captured.err)

    def acting(self, *args: str, reviewer: str = "rita") -> Any:
        """A person's command, with their token; its JSON, checked against its schema."""
        printed = self(*args, "--reviewer-token", token(reviewer), "--json").json()
        jsonschema.validate(printed, SCHEMAS[args[0]])
        return printed

    def listed(self, command: str) -> dict[str, Any]:
        """``threads`` or ``reviews`` as JSON, by thread."""
        printed = self(command, "--json").json()
        jsonschema.validate(printed, SCHEMAS[command])
        return {row["thread_id"]: row for row in printed}


@pytest.fixture
def app_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The reviewer secret, and where ``pauses_app`` keeps its ledger and failures."""
    monkeypatch.setenv("COVONAUT_ES_REVIEWER_SECRET", SECRET)
    monkeypatch.setenv("PAUSES_APP_LEDGER", str(tmp_path / "ledger"))
    monkeypatch.setenv("PAUSES_APP_FAILS", str(tmp_path / "fails"))
    (tmp_path / "fails").mkdir()
    return tmp_path


@pytest.fixture
def cli(shared_url: str, app_files: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    """The command line on a SQLite file and on a PostgreSQL database."""
    return Cli(shared_url, capsys)


@pytest.fixture
def store(shared_url: str) -> Iterator[Store]:
    """The store the command line acts on; at teardown every thread replays from its
    events alone to the state loaded through snapshots (the replay law)."""
    with open_store(shared_url) as store:
        yield store
        for thread_id in store.thread_ids():
            assert store.replay_state(thread_id) == store.state_at(thread_id), thread_id


def agent(store: Store, thread_id: str, *tools: Tool) -> Agent:
    """``pauses_app``'s agent on ``thread_id``, with ``tools`` instead of its own."""
    config = pauses_app.make_config(thread_id)
    return Agent(
        attrs.evolve(
            config,
            tools=tools or config.tools,
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
        )
    )


class _Crash(BaseException):
    """Stands for the death of the runner's process inside a tool."""


def _crash(ctx: ToolContext, args: dict[str, Any]) -> Any:
    raise _Crash


def run_dies_in_charge(store: Store, thread_id: str) -> None:
    """Run a ``charge-*`` thread whose runner dies inside the charge: the call is in
    doubt, and it never reached the ledger."""
    with pytest.raises(_Crash):
        agent(store, thread_id, Tool("charge", "Charge", {"type": "object"}, _crash)).run("Go.")


def fail_once(files: Path, thread_id: str) -> None:
    """Make the model of ``thread_id`` fail its next call."""
    (files / "fails" / thread_id).touch()


def last_message(store: Store, thread_id: str) -> str:
    return store.state_at(thread_id).messages[-1].content


def test_a_worker_run_from_another_thread_resumes_and_leaves_the_signals_alone(
    cli: Cli, store: Store
) -> None:
    """``main(["worker", ...])`` called from a thread other than the main one (an
    application embedding the command, a test runner) works: only the main thread may
    set signal handlers, so the worker leaves the process's own in place."""
    agent(store, "ask-1").run("Pay me.")
    cli.acting("answer", "ask-1", "a1", "--answer", "DE89 3704 0044")
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    statuses: list[int] = []
    worker = threading.Thread(target=lambda: statuses.append(cli("worker", "--once", *APP).status))
    worker.start()
    worker.join(120)
    assert statuses == [0]
    assert store.state_at("ask-1").status is ThreadStatus.FINISHED
    assert {signum: signal.getsignal(signum) for signum in handlers} == handlers


def test_an_answer_to_a_tools_pause_is_what_the_model_reads_once_a_worker_resumes(
    cli: Cli, store: Store
) -> None:
    """answer records a person's answer to a tool's pause (``interrupt`` in reviews):
    the thread then waits for a worker, and worker --once resumes it with the answer."""
    agent(store, "ask-1").run("Pay me.")
    assert cli.listed("threads")["ask-1"]["waiting_for"] == "person"
    paused = cli.listed("reviews")["ask-1"]
    assert (paused["kind"], paused["tool_call_id"]) == ("interrupt", "a1")
    answered = cli.acting("answer", "ask-1", "a1", "--answer", "DE89 3704 0044")
    assert answered == {
        "thread_id": "ask-1",
        "tool_call_id": "a1",
        "reviewer": "rita",
        "answer": "DE89 3704 0044",
        "status": "interrupted",
        "waiting_for": "worker",
        "version": store.state_at("ask-1").version,
    }
    assert cli.listed("reviews") == {}
    assert cli.listed("threads")["ask-1"]["pending_reviews"] == 0
    assert cli("worker", "--once", *APP).status == 0
    assert store.state_at("ask-1").status is ThreadStatus.FINISHED
    assert last_message(store, "ask-1") == "Done: DE89 3704 0044"
    (recorded,) = [
        e for e in store.history("ask-1") if isinstance(e, AgentThread.InterruptAnswered)
    ]
    assert recorded.answered_by == "rita"


def test_a_call_in_doubt_is_settled_as_ran_as_not_run_or_to_run_again(
    cli: Cli, store: Store, app_files: Path
) -> None:
    """A runner died inside a charge: worker --once pauses each thread on its call in
    doubt, which reviews lists with its arguments; settle --result, --not-run and --retry
    each give the model what the person found, and only the retried call is charged,
    under the idempotency key of the call in doubt."""
    threads = ["charge-ran", "charge-not", "charge-again"]
    for thread_id in threads:
        run_dies_in_charge(store, thread_id)
    assert cli("worker", "--once", *APP).status == 0
    listed = cli.listed("reviews")
    assert {t: (listed[t]["kind"], listed[t]["arguments"]) for t in threads} == {
        t: ("in_doubt", {"amount": 5}) for t in threads
    }
    table = cli("reviews").out.splitlines()
    assert all(line.endswith('{"amount":5}') for line in table[1:]), table
    key = listed["charge-again"]["data"]["idempotency_key"]
    ran = cli.acting("settle", "charge-ran", "c1", "--result", "charged, found in the ledger")
    assert (ran["settlement"], ran["result"]) == ("ran", "charged, found in the ledger")
    not_run = cli.acting("settle", "charge-not", "c1", "--not-run", "--note", "the bank refused")
    assert (not_run["settlement"], not_run["result"]) == (
        "not_run",
        "Not executed: the bank refused",
    )
    again = cli.acting("settle", "charge-again", "c1", "--retry")
    assert (again["settlement"], again["result"], again["waiting_for"]) == ("retry", None, "worker")
    assert cli.listed("reviews") == {}
    assert cli("worker", "--once", *APP).status == 0
    assert {t: last_message(store, t) for t in threads} == {
        "charge-ran": "Done: charged, found in the ledger",
        "charge-not": "Done: Not executed: the bank refused",
        "charge-again": 'Done: {"charged":5}',
    }
    assert (app_files / "ledger").read_text() == f"charge-again {key}\n"


def test_an_abandoned_thread_leaves_the_queue_and_no_worker_runs_it(cli: Cli, store: Store) -> None:
    """abandon records who gave the thread up and why; it waits for nobody, reviews no
    longer lists its pause, and worker --once leaves it as it is."""
    agent(store, "ask-1").run("Pay me.")
    given_up = cli.acting("abandon", "ask-1", "--reason", "the customer left")
    assert (given_up["status"], given_up["waiting_for"]) == ("abandoned", "")
    (event,) = [e for e in store.history("ask-1") if isinstance(e, AgentThread.Abandoned)]
    assert (event.abandoned_by, event.reason) == ("rita", "the customer left")
    assert cli.listed("reviews") == {}
    row = cli.listed("threads")["ask-1"]
    assert (row["status"], row["pending_reviews"], row["waiting_for"]) == ("abandoned", 0, "")
    version = store.state_at("ask-1").version
    assert cli("worker", "--once", *APP).status == 0
    assert store.state_at("ask-1").version == version


def test_a_failed_run_makes_worker_once_exit_1_and_retry_has_the_next_worker_run_it(
    cli: Cli, store: Store, app_files: Path
) -> None:
    """A step that fails makes worker --once exit 1 naming the thread; retry asks for
    the failed run to be tried again (the thread then waits for a worker), and the next
    worker --once runs it to its answer and exits 0."""
    fail_once(app_files, "plain-1")
    store.submit("plain-1", "Hello.")
    failed = cli("worker", "--once", *APP)
    assert failed.status == 1
    assert failed.err.splitlines()[-1] == (
        "covonaut-es worker: a step failed on thread 'plain-1'; the log above says why"
    )
    assert store.state_at("plain-1").status is ThreadStatus.ERROR
    assert cli.listed("threads")["plain-1"]["waiting_for"] == ""
    assert cli("worker", "--once", *APP).status == 0  # not retried unless asked
    retried = cli.acting("retry", "plain-1")
    assert (retried["status"], retried["waiting_for"]) == ("error", "worker")
    assert cli("worker", "--once", *APP).status == 0
    assert store.state_at("plain-1").status is ThreadStatus.FINISHED
    assert last_message(store, "plain-1") == "Done: Hello."


def versions(store: Store) -> dict[str, int]:
    """Every thread's version."""
    return {thread_id: store.load(thread_id).version for thread_id in store.thread_ids()}


def test_every_refusal_exits_2_in_one_line_and_leaves_every_thread_as_it_was(
    cli: Cli, store: Store
) -> None:
    """Blank texts, edits that do not read strictly, a digest the review does not have,
    pauses that are not there, calls not in doubt, a thread a worker holds, a forged
    token, a thread already given up and a run that did not fail: exit 2, one line on
    stderr, and no thread's version moves."""
    agent(store, "ask-1").run("Pay me.")
    run_dies_in_charge(store, "charge-1")
    ThreadService(store).pause_calls_in_doubt("charge-1", "its runner died")
    pay = Tool("pay", "Pay", {"type": "object"}, lambda c, a: "paid", requires_approval=True)
    Agent(
        AgentConfig(
            provider=ScriptedProvider([call(("p1", "pay", '{"amount": 7}'))]),
            tools=[pay],
            checkpoint=CheckpointSettings(store=store, thread_id="pay-1"),
        )
    ).run("Pay 7.")
    (review,) = store.state_at("pay-1").reviews
    review_id = review.request.review_id
    ThreadService(store).abandon(store.fork("ask-1", new_thread_id="gone"))
    cases: list[tuple[tuple[str, ...], str]] = [
        (("approve", review_id, "--arguments", '{"amount": 1, "amount": 900}'), "twice"),
        (("approve", review_id, "--arguments", '{"amount": NaN}'), "NaN"),
        (("approve", review_id, "--arguments", '{"amount": 1e400}'), "1e400"),
        (("approve", review_id, "--arguments", '{"to": "\\ud800"}'), "lone surrogate"),
        (("approve", review_id, "--arguments", "[1]"), "one JSON object"),
        (("approve", review_id, "--digest", "0" * 64), "another operation"),
        (("reject", review_id, "--reason", " \n "), "must not be empty"),
        (("respond", review_id, "--answer", ""), "must not be empty"),
        (("answer", "ask-1", "a1", "--answer", "   "), "must not be empty"),
        (("answer", "pay-1", "p1", "--answer", "yes"), "no tool's pause on call 'p1'"),
        (("answer", "charge-1", "c1", "--answer", "yes"), "no tool's pause on call 'c1'"),
        (("answer", "ghost", "a1", "--answer", "yes"), "'ghost' not found"),
        (("settle", "ghost", "c1", "--retry"), "'ghost' not found"),
        (("retry", "ghost"), "'ghost' not found"),
        (("abandon", "ghost", "--reason", "r"), "'ghost' not found"),
        (("settle", "ask-1", "a1", "--result", "done"), "is not open"),
        (("settle", "charge-1", "c1", "--result", "  "), "must not be empty"),
        (("settle", "charge-1", "c1", "--result", "x", "--note", "y"), "--note goes with"),
        (("settle", "charge-1", "", "--retry"), "CALL must name"),
        (("settle", "ask-1", "a1", "--retry"), "is not open"),
        (("retry", "ask-1"), "not a failed run"),
        (("abandon", "gone", "--reason", "r"), "already abandoned"),
    ]
    forged = token("eve", secret=secrets.token_hex(32))
    for args in (
        ("approve", review_id),
        ("answer", "ask-1", "a1", "--answer", "yes"),
        ("settle", "charge-1", "c1", "--not-run"),
        ("abandon", "ask-1"),
        ("retry", "ask-1"),
    ):
        cases.append(((*args, "--reviewer-token", forged), "signature does not match"))
    before = versions(store)
    for args, problem in cases:
        if "--reviewer-token" not in args:
            args = (*args, "--reviewer-token", token())
        ran = cli(*args)
        assert ran.status == 2, (args, ran.out, ran.err)
        assert len(ran.err.splitlines()) == 1 and problem in ran.err, (args, ran.err)
        assert ran.out == "" and args[-1] not in ran.err, args  # the token is never echoed
        assert versions(store) == before, args
    assert store.state_at("pay-1").reviews[0].pending


def test_settling_a_thread_a_worker_holds_exits_2_naming_the_holder(
    cli: Cli, store: Store, shared_url: str, app_files: Path
) -> None:
    """settle and retry take the thread's run lease: while another runner holds it they
    exit 2 in one line naming the holder, and nothing is recorded."""
    run_dies_in_charge(store, "charge-1")
    ThreadService(store).pause_calls_in_doubt("charge-1", "its runner died")
    fail_once(app_files, "plain-1")
    with pytest.raises(ProviderError):
        agent(store, "plain-1").run("Hello.")
    before = versions(store)
    for thread_id, args in (
        ("charge-1", ("settle", "charge-1", "c1", "--retry")),
        ("charge-1", ("settle", "charge-1", "c1", "--result", "charged")),
        ("plain-1", ("retry", "plain-1")),
    ):
        with held_elsewhere(shared_url, thread_id):
            ran = cli(*args, "--reviewer-token", token())
        assert ran.status == 2 and len(ran.err.splitlines()) == 1, (args, ran.err)
        assert "another-runner" in ran.err, ran.err
        assert versions(store) == before, args


@contextlib.contextmanager
def held_elsewhere(url: str, thread_id: str) -> Iterator[None]:
    """The thread's run lease, held for the block by another runner (a thread of its
    own, with a store of its own, named ``another-runner``)."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with open_store(url) as runner:
            runner.name_lease_holder("another-runner")
            with runner.lease(thread_id):
                taken.set()
                done.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(30)
        yield
    finally:
        done.set()
        holder.join(30)


def test_approve_with_the_digest_the_reviewer_saw_and_without_thread(
    cli: Cli, store: Store
) -> None:
    """approve --digest DIGEST, the digest reviews --json showed, records the approval;
    without --thread the review's thread is found from the log."""
    pay = Tool("pay", "Pay", {"type": "object"}, lambda c, a: "paid", requires_approval=True)
    Agent(
        AgentConfig(
            provider=ScriptedProvider([call(("p1", "pay", '{"amount": 7}'))]),
            tools=[pay],
            checkpoint=CheckpointSettings(store=store, thread_id="pay-1"),
        )
    ).run("Pay 7.")
    shown = cli.listed("reviews")["pay-1"]
    decided = cli.acting("approve", shown["review_id"], "--digest", shown["digest"])
    assert (decided["thread_id"], decided["digest"]) == ("pay-1", shown["digest"])
    assert not store.state_at("pay-1").reviews[0].pending


def worker_process(
    url: str, files: Path, *options: str, log: Path | None = None
) -> subprocess.Popen[str]:
    """``covonaut-es worker`` of ``pauses_app`` in a process of its own."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
        "PAUSES_APP_LEDGER": str(files / "ledger"),
        "PAUSES_APP_FAILS": str(files / "fails"),
    }
    with (log or files / "worker.log").open("w") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "covonaut_es", "worker", "--store", url, *APP, *options],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )


def test_worker_once_exits_1_in_a_real_process_naming_the_failed_thread(
    shared_url: str, app_files: Path, store: Store
) -> None:
    """The console program exits 1 when a step of worker --once failed, its last line
    on stderr naming the thread."""
    fail_once(app_files, "plain-1")
    store.submit("plain-1", "Hello.")
    process = worker_process(shared_url, app_files, "--once")
    assert process.wait(timeout=60) == 1
    last = (app_files / "worker.log").read_text().splitlines()[-1]
    assert last == "covonaut-es worker: a step failed on thread 'plain-1'; the log above says why"


def test_a_long_running_worker_stopped_by_sigterm_exits_0_after_a_failed_step(
    shared_url: str, app_files: Path, store: Store
) -> None:
    """A failed step is logged by a long-running worker, which goes on; SIGTERM then
    stops it with exit 0, as a container platform expects."""
    fail_once(app_files, "plain-1")
    store.submit("plain-1", "Hello.")
    log = app_files / "worker.log"
    process = worker_process(shared_url, app_files, log=log)
    try:
        wait_for(lambda: "thread 'plain-1' failed" in log.read_text(), "the failed step")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    assert "a step failed" not in log.read_text()
    assert store.state_at("plain-1").status is ThreadStatus.ERROR


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for {what} after {timeout}s")
        time.sleep(0.05)


def test_workers_lists_the_calls_running_and_marks_one_past_its_timeout_hung(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tool that outruns its timeout pauses its run in doubt but keeps running: the
    worker's heartbeat lists the call, and workers shows it hung (HUNG in the table),
    with its thread, tool, start and deadline."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    release = threading.Event()

    def stuck(ctx: ToolContext, args: dict[str, Any]) -> Any:
        release.wait(30)
        return "late"

    def make_config(thread_id: str) -> AgentConfig:
        def model(request: ProviderRequest) -> ProviderResponse:
            if request.messages[-1].role is Role.TOOL:
                return answer("done")
            return call(("s1", "stuck", "{}"))

        tool = Tool("stuck", "Hangs", {"type": "object"}, stuck, timeout=0.2)
        return AgentConfig(provider=ScriptedProvider(respond=model), tools=[tool])

    cli = Cli(url, capsys)
    with open_store(url) as store:
        store.submit("hangs", "Go.")
        worker = Worker(store, make_config, poll_interval=0.05)
        running = threading.Thread(target=worker.run)
        running.start()
        try:

            def hung() -> list[dict[str, Any]]:
                return [c for w in cli("workers", "--json").json() for c in w["calls"] if c["hung"]]

            wait_for(lambda: bool(hung()), "the hung call")
            listed = cli("workers", "--json").json()
            table = cli("workers").out
        finally:
            release.set()
            worker.stop()
            running.join(timeout=30)
    jsonschema.validate(listed, SCHEMAS["workers"])
    (call_listed,) = listed[0]["calls"]
    assert {k: call_listed[k] for k in ("thread_id", "tool_call_id", "tool_name", "hung")} == {
        "thread_id": "hangs",
        "tool_call_id": "s1",
        "tool_name": "stuck",
        "hung": True,
    }
    assert call_listed["deadline"] > call_listed["started_at"]
    assert "stuck s1 HUNG (hangs)" in table


def test_a_call_in_doubt_whose_arguments_are_no_object_shows_them_as_written() -> None:
    """A call in doubt's arguments are the model's text: the queue's JSON gives them as
    an object when they read as one (and null otherwise), and the table's DETAILS show
    them as written, whatever they hold."""
    for text, as_object in (('{"amount": 5}', {"amount": 5}), ("[1, 2", None), ("[1]", None)):
        item = PendingReview(
            thread_id="t",
            item_id="c1",
            kind=PauseKind.IN_DOUBT,
            tool_name="charge",
            reason="its runner stopped",
            data={"tool_call_id": "c1", "idempotency_key": "k", "arguments": text},
            requested_at=datetime(2026, 1, 1, tzinfo=UTC),
        )
        assert review_arguments(item) == as_object
        assert call_arguments_text(item) == text
        jsonschema.validate([pending_review(item)], SCHEMAS["reviews"])
    deep = "[" * 100 + "]" * 100
    assert review_arguments(msgspec.structs.replace(item, data={"arguments": deep})) is None


@pytest.mark.parametrize(
    ("command", "first", "extra"),
    [
        ("answer", "ask-1", ("a1", "--answer", "acct 9")),
        ("settle", "charge-1", ("c1", "--result", "charged")),
        ("settle", "charge-2", ("c1", "--not-run")),
        ("settle", "charge-3", ("c1", "--retry")),
        ("abandon", "ask-2", ("--reason", "the customer left")),
    ],
)
def test_a_pause_named_by_its_token_is_acted_on_only_while_it_is_pending(
    cli: Cli, store: Store, command: str, first: str, extra: tuple[str, ...]
) -> None:
    """``reviews --json`` gives each pause its token; ``--pause`` with it acts on that
    pause, and once the pause was dealt with (a second reviewer, an old listing) the
    same command exits 2 saying it is no longer pending, and records nothing."""
    if first.startswith("ask"):
        agent(store, first).run("Pay me.")
    else:
        run_dies_in_charge(store, first)
        ThreadService(store).pause_calls_in_doubt(first, "its runner died")
    listed = cli.listed("reviews")[first]
    assert listed["pause"]
    stale = "0" * 32
    before = store.state_at(first).version
    refused = cli(command, first, *extra, "--pause", stale, "--reviewer-token", token())
    assert refused.status == 2 and "no longer pending" in refused.err, refused
    assert store.state_at(first).version == before
    cli.acting(command, first, *extra, "--pause", listed["pause"])
    after = store.state_at(first).version
    again = cli(command, first, *extra, "--pause", listed["pause"], "--reviewer-token", token())
    assert again.status == 2, again
    assert "no longer pending" in again.err or "already abandoned" in again.err, again
    assert store.state_at(first).version == after
