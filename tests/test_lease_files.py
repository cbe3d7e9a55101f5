"""A SQLite store's lease lock files under faults: a take whose holder's name cannot
be written (a full disk) lets the lock go, and the name a busy thread reports is its
holder's own, even read while a shorter name is written over a longer one."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import Store, ThreadBusyError, open_store
from covonaut_es.domain import thread_aggregate_id
from covonaut_es.errors import StoreUnavailableError, UntrustedLeaseDirectoryError
from covonaut_es.store import WorkerRecord
from covonaut_es.store._backends._sqlite_leases import lease_directory
from support import entries_under

ROOT = Path(__file__).resolve().parents[1]
WAIT = 60


def _python(code: str, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        text=True,
        **kwargs,  # type: ignore[call-overload]
    )


def _talking(code: str) -> tuple[subprocess.Popen[str], IO[str], IO[str]]:
    """:func:`_python` with a pipe to its standard input and one from its output."""
    process = _python(code, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    return process, process.stdin, process.stdout


def test_a_take_whose_holder_cannot_be_written_lets_the_lock_go(tmp_path: Path) -> None:
    """A holder's name that the disk refuses (here a file size limit, as a full disk
    would) fails the take with a typed error naming the thread, not the holder, and
    holding nothing: the thread is taken at once by this process and by another, and
    no lock file stays behind."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    open_store(url).close()
    child = _python(
        f"""
        import resource, signal
        from covonaut_es import open_store
        from covonaut_es.errors import StoreUnavailableError
        store = open_store({url!r})
        store.name_lease_holder("h" * 5000)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
        try:
            with store.lease("t"):
                print("taken")
        except StoreUnavailableError as exc:
            print("refused", "thread 't'" in str(exc), "h" * 50 in str(exc))
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        store.name_lease_holder("me")
        with store.lease("t"):
            print("taken again")
        store.close()
        """,
        stdout=subprocess.PIPE,
    )
    out, _ = child.communicate(timeout=WAIT)
    assert out.split("\n")[:2] == ["refused True False", "taken again"]
    with open_store(url) as store, store.lease("t") as lease:
        assert lease.thread_id == "t"
    assert list(lease_directory(str(tmp_path / "s.db")).glob("*.lock")) == []


_NAMES = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=40)


@settings(max_examples=4, deadline=None)
@given(holder=_NAMES, longer_by=_NAMES)
def test_a_busy_thread_names_its_holder_while_the_name_is_written(
    tmp_path_factory: pytest.TempPathFactory, holder: str, longer_by: str
) -> None:
    """Property: a holder killed leaves its longer name; the next holder writes its own
    over it, and is held still between writing it and cutting the file to its length:
    another runner asking then is told exactly that holder's name."""
    before = holder + longer_by
    database = tmp_path_factory.mktemp("names") / "s.db"
    url = f"sqlite:///{database}"
    open_store(url).close()
    killed = _python(
        f"""
        import os, signal
        from covonaut_es import open_store
        store = open_store({url!r})
        store.name_lease_holder({before!r})
        with store.lease("t"):
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    killed.wait(timeout=WAIT)
    writing, to_writing, from_writing = _talking(
        f"""
        import os, sys
        from covonaut_es import open_store
        store = open_store({url!r})
        store.name_lease_holder({holder!r})
        cut = os.ftruncate
        def held_before_the_cut(fd, length):
            print("written", flush=True)
            sys.stdin.readline()
            cut(fd, length)
        os.ftruncate = held_before_the_cut
        with store.lease("t"):
            print("held", flush=True)
            sys.stdin.readline()
        """
    )
    try:
        assert from_writing.readline() == "written\n"
        with open_store(url) as store, pytest.raises(ThreadBusyError) as busy, store.lease("t"):
            pass
        assert busy.value.holder == holder
        to_writing.write("\n")
        to_writing.flush()
        assert from_writing.readline() == "held\n"
    finally:
        writing.kill()
        writing.communicate(timeout=WAIT)  # closes its pipes


_ANOTHER_USER = 65534  # nobody, as Debian has it
_ANOTHER_GROUP = 65534  # nogroup, nobody's primary group
_OUTSIDER = 2  # bin, who is in no group nogroup

_PLANTED = [
    "nothing",
    "this user's directory",
    "a link to this user's directory",
    "a file",
    "a directory every user may write",
    "another user's directory",
    "a directory of a member of the store's group",
    "a directory of the store's group made by a user outside it",
]
"""What may stand at a store's lease directory's name beside a store in ``/tmp``: the
last three need another user, so only root can make them."""

_UNTRUSTED = {_PLANTED[2], _PLANTED[3], _PLANTED[4], _PLANTED[5], _PLANTED[7]}


def _record(worker_id: str) -> WorkerRecord:
    now = datetime.now(UTC)
    return WorkerRecord(
        worker_id=worker_id, host="h", pid=1, started_at=now, heartbeat_at=now, threads=()
    )


def _take(store: Store) -> None:
    with store.lease("t"):
        pass


_USES: dict[str, Callable[[Store], object]] = {
    "take a lease": _take,
    "publish a worker": lambda store: store.publish_worker(_record("w-1")),
    "list live workers": lambda store: store.live_workers(),
    "withdraw a worker": lambda store: store.withdraw_worker("w-2"),
}


@settings(max_examples=30, deadline=None)
@given(
    planted=st.sampled_from(_PLANTED if os.geteuid() == 0 else _PLANTED[:-3]),
    use=st.sampled_from(sorted(_USES)),
)
def test_a_store_uses_only_a_lease_directory_its_own_users_made(
    tmp_path_factory: pytest.TempPathFactory, planted: str, use: str
) -> None:
    """Property: beside a store in a directory every user writes in (sticky, as
    ``/tmp``), whatever another local user put first at the name of its lease directory
    (whose name anyone can work out from the file), each use of the leases either
    refuses it, typed, with nothing read, written or changed there nor where a link
    leads, or works in a directory of this user's that no other user may write in.
    Before, a link planted there made a run overwrite a file of the operator's, a file
    locked there by another user made the run busy under a holder's name of its
    choosing, and worker records were written through its links (helper-200)."""
    shared = tmp_path_factory.mktemp("shared")
    shared.chmod(0o1777)
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "precious.conf").write_text("precious\n")
    url = f"sqlite:///{shared / 's.db'}"
    open_store(url).close()
    directory = lease_directory(str(shared / "s.db"))
    if planted == "a link to this user's directory":
        directory.symlink_to(elsewhere, target_is_directory=True)
    elif planted == "a file":
        directory.write_text("x")
    elif planted != "nothing":
        directory.mkdir()
        if planted == "a directory every user may write":
            directory.chmod(0o777)
        elif planted == "another user's directory":
            os.chown(directory, _ANOTHER_USER, _ANOTHER_USER)
        elif planted == "a directory of a member of the store's group":
            # The store is the group's to write, whose member (here by their primary
            # group) made the directory.
            os.chown(shared / "s.db", -1, _ANOTHER_GROUP)
            (shared / "s.db").chmod(0o660)
            os.chown(directory, _ANOTHER_USER, _ANOTHER_GROUP)
        elif planted == "a directory of the store's group made by a user outside it":
            os.chown(shared / "s.db", -1, _ANOTHER_GROUP)
            (shared / "s.db").chmod(0o660)
            os.chown(directory, _OUTSIDER, _ANOTHER_GROUP)  # as a setgid folder makes it
    before = {
        **entries_under(elsewhere),
        **(entries_under(directory) if planted != "nothing" else {}),
    }
    with open_store(url) as store:
        if planted in _UNTRUSTED:
            with pytest.raises(UntrustedLeaseDirectoryError, match="the lease directory "):
                _USES[use](store)
            after = {**entries_under(elsewhere), **entries_under(directory)}
            assert after == before
            return
        _USES[use](store)
    if directory.exists():
        info = directory.lstat()
        assert stat.S_ISDIR(info.st_mode) and not info.st_mode & stat.S_IWOTH
        assert info.st_uid == os.geteuid() or info.st_gid == _ANOTHER_GROUP
    assert entries_under(elsewhere) == {
        k: v for k, v in before.items() if k.startswith(str(elsewhere))
    }


_PLANTED_INSIDE = {
    "a link at the thread's lock file": "LOCK",
    "a link at the worker's lock file": "workers/w-1.lock",
    "a pipe at a worker's record": "workers/w-9.json",
    "a directory at a worker's record": "workers/w-1.json",
}
"""What a user who may write in a store's lease directory (a member of a group-shared
store's group) may put in it; ``LOCK`` stands for thread ``t``'s lock file."""


@settings(max_examples=20, deadline=None)
@given(
    planted=st.sampled_from(sorted(_PLANTED_INSIDE)),
    use=st.sampled_from(sorted(_USES)),
    umask=st.sampled_from([0o022, 0o002, 0o000]),
)
def test_nothing_planted_in_a_lease_directory_is_written_through_or_waited_on(
    tmp_path_factory: pytest.TempPathFactory, planted: str, use: str, umask: int
) -> None:
    """Property: a link or a pipe put in a store's own lease directory (under any umask,
    which never makes the directory every user's) is never written through nor waited
    on: each use works or is refused, typed (``UntrustedLeaseDirectoryError`` for a
    link), leaving no temporary file, and the file a link leads to is unchanged. A
    worker's record was written through a link at its temporary file's name, a pipe at a
    record hung the listing of live workers, and under umask 000 the store refused the
    directory it had just made (helper-201); a directory at a record's name left a
    temporary file at every heartbeat, refused untyped (helper-203)."""
    folder = tmp_path_factory.mktemp("store")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    precious = elsewhere / "precious.conf"
    precious.write_text("precious\n")
    url = f"sqlite:///{folder / 's.db'}"
    open_store(url).close()
    directory = lease_directory(str(folder / "s.db"))
    previous = os.umask(umask)
    try:
        with open_store(url) as store:
            store.publish_worker(_record("w-0"))  # makes the directories, under the umask
            name = _PLANTED_INSIDE[planted]
            lock = f"{thread_aggregate_id('t').hex}.lock"  # a plain store keys none
            where = directory / (lock if name == "LOCK" else name)
            if planted.startswith("a pipe"):
                os.mkfifo(where)
            elif planted.startswith("a directory"):
                where.mkdir()
            else:
                where.symlink_to(precious)
            before = entries_under(elsewhere)
            with contextlib.suppress(StoreUnavailableError):  # Untrusted... among them
                _USES[use](store)
    finally:
        os.umask(previous)
    assert entries_under(elsewhere) == before
    assert not directory.stat().st_mode & stat.S_IWOTH
    assert not list((directory / "workers").glob("*.tmp"))  # none left by a failed write


def test_the_next_worker_to_start_removes_what_dead_runners_and_workers_left(
    tmp_path: Path,
) -> None:
    """A runner killed holding the lease of a thread nobody runs again, and a worker
    killed with its record published, leave their files; the next worker to publish its
    record removes them, and keeps a live holder's lock file and a live worker's record
    (lease files do not accumulate, nor records of dead workers)."""
    database = tmp_path / "s.db"
    url = f"sqlite:///{database}"
    open_store(url).close()
    alive, _, from_alive = _talking(
        f"""
        import sys
        from datetime import UTC, datetime
        from covonaut_es import open_store
        from covonaut_es.store import WorkerRecord
        store = open_store({url!r})
        store.name_lease_holder("alive")
        now = datetime.now(UTC)
        store.publish_worker(WorkerRecord(
            worker_id="alive", host="h", pid=1, started_at=now, heartbeat_at=now, threads=()))
        with store.lease("running"):
            print("held", flush=True)
            sys.stdin.readline()
        """
    )
    directory = lease_directory(str(database))

    def holders() -> list[str]:
        return sorted(p.read_text().partition("\n")[0] for p in directory.glob("*.lock"))

    try:
        assert from_alive.readline() == "held\n"
        for died in ("the-runner", "the-worker"):
            killed = _python(
                f"""
                import os, signal
                from datetime import UTC, datetime
                from covonaut_es import open_store
                from covonaut_es.store import WorkerRecord
                store = open_store({url!r})
                store.name_lease_holder({died!r})
                now = datetime.now(UTC)
                if {died!r} == "the-worker":
                    store.publish_worker(WorkerRecord(
                        worker_id="dead", host="h", pid=1, started_at=now, heartbeat_at=now,
                        threads=()))
                with store.lease("finished"):
                    os.kill(os.getpid(), signal.SIGKILL)
                """
            )
            killed.wait(timeout=WAIT)
        assert holders() == ["alive", "the-worker"]  # the runner's file, taken again
        assert {p.name for p in (directory / "workers").iterdir()} == {
            "dead.json",
            "dead.lock",
            "alive.json",
            "alive.lock",
        }
        with open_store(url) as store:
            store.publish_worker(_record("next"))
            assert holders() == ["alive"]
            assert {p.name for p in (directory / "workers").iterdir()} == {
                "alive.json",
                "alive.lock",
                "next.json",
                "next.lock",
            }
            assert sorted(w.worker_id for w in store.live_workers()) == ["alive", "next"]
            with pytest.raises(ThreadBusyError):
                _lease_of(store, "running")
            _lease_of(store, "finished")  # taken again, on a file made anew
    finally:
        alive.kill()
        alive.communicate(timeout=WAIT)


def _lease_of(store: Store, thread_id: str) -> None:
    with store.lease(thread_id):
        pass


def test_a_sweep_never_makes_a_take_or_a_worker_start_fail(tmp_path: Path) -> None:
    """Workers starting (each sweeping the lease directory) while a runner takes and
    releases a thread's lease, and while workers restart under their own ids leaving
    their records as a crash does: the sweep holds a file it removes for a moment, and
    no take is refused as busy, nor any worker's id as taken by a live worker."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    open_store(url).close()
    seconds = 3.0
    taker = _python(
        f"""
        import time
        from covonaut_es import ThreadBusyError, open_store
        store = open_store({url!r})
        busy = taken = 0
        end = time.monotonic() + {seconds}
        while time.monotonic() < end:
            try:
                with store.lease("t"):
                    taken += 1
            except ThreadBusyError:
                busy += 1
        print(busy, taken)
        """,
        stdout=subprocess.PIPE,
    )
    starters = [
        _python(
            f"""
            import time
            from datetime import UTC, datetime
            from covonaut_es import open_store
            from covonaut_es.errors import ConfigurationError
            from covonaut_es.store import WorkerRecord
            refused = started = 0
            end = time.monotonic() + {seconds}
            while time.monotonic() < end:
                now = datetime.now(UTC)
                record = WorkerRecord(worker_id="w{n}", host="h", pid=1, started_at=now,
                                      heartbeat_at=now, threads=())
                with open_store({url!r}) as store:  # closed unwithdrawn, as a crash leaves it
                    try:
                        store.publish_worker(record)
                        started += 1
                    except ConfigurationError:
                        refused += 1
            print(refused, started)
            """,
            stdout=subprocess.PIPE,
        )
        for n in (1, 2)
    ]
    outputs = [p.communicate(timeout=WAIT)[0].split() for p in (taker, *starters)]
    assert all(int(taken) > 0 for _, taken in outputs), outputs
    assert [int(refused) for refused, _ in outputs] == [0, 0, 0], outputs
