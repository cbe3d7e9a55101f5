"""SQLite run leases under random takes, releases and kill -9 of the processes holding
them: a generated state machine. No two processes ever hold one thread, each lease of a
thread has a greater token than the last, and lock files never outlive their leases,
but for a holder killed (its file waits for the thread's next holder to remove it)."""

from __future__ import annotations

import contextlib
import multiprocessing
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import lease_runner
from covonaut_es.domain import thread_aggregate_id
from covonaut_es.store._backends._sqlite_leases import lease_directory
from covonaut_es.store._open import open_store

THREADS = ("t0", "t1", "t2")
RUNNERS = 2
WAIT = 30.0
FORKS = multiprocessing.get_context("forkserver")
"""Runner processes fork from a server that imported the library once: each kill is
followed by a new runner, and a Python start-up apiece made this test minutes long on a
loaded machine."""
FORKS.set_forkserver_preload(["lease_runner"])


class Runner:
    """A process running ``lease_runner.serve``."""

    def __init__(self, database: Path) -> None:
        self.connection, theirs = FORKS.Pipe()
        self.process = FORKS.Process(target=lease_runner.serve, args=(str(database), theirs))
        self.process.start()
        theirs.close()  # the runner's end lives in the runner alone: its death is EOF here
        assert self.said() == "ready"

    def said(self) -> str:
        if not self.connection.poll(WAIT):
            raise AssertionError(f"no answer from the runner within {WAIT} s")
        try:
            return str(self.connection.recv())
        except EOFError:
            self.process.join(WAIT)
            raise AssertionError(f"the runner exited with {self.process.exitcode}") from None

    def ask(self, command: str, thread_id: str) -> str:
        self.connection.send((command, thread_id))
        return self.said()

    def kill(self) -> None:
        self.process.kill()
        self.process.join(WAIT)
        assert self.process.exitcode is not None, "the killed runner did not end"
        self.connection.close()
        self.process.close()


class Leases(RuleBasedStateMachine):
    """Runners taking, giving back and dying with the leases of a few threads."""

    def __init__(self) -> None:
        super().__init__()
        self.workdir = tempfile.TemporaryDirectory()
        self.database = Path(self.workdir.name) / "leases.db"
        open_store(f"sqlite:///{self.database}").close()
        self.directory = lease_directory(str(self.database))
        self.runners = [Runner(self.database) for _ in range(RUNNERS)]
        self.holder: dict[str, int] = {}  # thread -> the runner holding its lease
        self.depth: dict[str, int] = {}  # blocks holding it in that runner (re-entrant)
        self.token = dict.fromkeys(THREADS, 0)
        self.orphaned: set[str] = set()  # lock files of killed holders, not yet taken

    @rule(runner=st.integers(0, RUNNERS - 1), thread_id=st.sampled_from(THREADS))
    def take(self, runner: int, thread_id: str) -> None:
        said = self.runners[runner].ask("take", thread_id)
        if self.holder.get(thread_id) == runner:  # taken again in the same task
            assert said == f"held {self.token[thread_id]}", (said, self.token)
            self.depth[thread_id] += 1
            return
        if thread_id in self.holder:
            assert said == "busy", (thread_id, self.holder[thread_id], runner, said)
            return
        kind, token = said.split()
        assert kind == "held" and int(token) > self.token[thread_id], (said, self.token)
        self.holder[thread_id], self.token[thread_id] = runner, int(token)
        self.depth[thread_id] = 1
        self.orphaned.discard(thread_id)

    @precondition(lambda self: self.holder)
    @rule(data=st.data())
    def give(self, data: st.DataObject) -> None:
        thread_id = data.draw(st.sampled_from(sorted(self.holder)))
        assert self.runners[self.holder[thread_id]].ask("give", thread_id) == "released"
        self.depth[thread_id] -= 1
        if not self.depth[thread_id]:
            del self.holder[thread_id]

    @rule(runner=st.integers(0, RUNNERS - 1))
    def kill(self, runner: int) -> None:
        self.runners[runner].kill()
        for thread_id, holder in list(self.holder.items()):
            if holder == runner:
                del self.holder[thread_id]
                self.orphaned.add(thread_id)
        self.runners[runner] = Runner(self.database)

    @invariant()
    def lock_files_are_those_of_leases_held_or_killed(self) -> None:
        names = {thread_aggregate_id(t).hex + ".lock": t for t in THREADS}
        files = (
            {names[p.name] for p in self.directory.glob("*.lock")}
            if self.directory.is_dir()
            else set()
        )
        assert set(self.holder) <= files <= set(self.holder) | self.orphaned

    def teardown(self) -> None:
        try:
            for thread_id in THREADS:  # every thread taken and given back once more
                if thread_id not in self.holder:
                    assert self.runners[0].ask("take", thread_id).startswith("held")
                    self.holder[thread_id], self.depth[thread_id] = 0, 1
                for _ in range(self.depth[thread_id]):
                    self.runners[self.holder[thread_id]].ask("give", thread_id)
            assert list(self.directory.glob("*.lock")) == []
        finally:
            for runner in self.runners:
                runner.kill()
            self.workdir.cleanup()


Leases.TestCase.settings = settings(max_examples=5, stateful_step_count=15, deadline=None)
TestLeases = Leases.TestCase


def test_leases_let_go_out_of_order_leave_the_others_held(tmp_path: Path) -> None:
    """Leases held through ExitStacks and let go in another order than taken: the lease
    still held stays held (taken again, it is the same), and the one let go is gone."""
    with open_store(f"sqlite:///{tmp_path / 'leases.db'}") as store:
        other = contextlib.ExitStack()
        other.enter_context(store.lease("t2"))
        with store.lease("t0") as held:
            other.close()
            assert store.held_lease("t2") is None
            assert store.held_lease("t0") is held
            with store.lease("t0") as again:
                assert again is held
        assert store.held_lease("t0") is None
