"""A SQLite store's lease lock files under faults: a take whose holder's name cannot
be written (a full disk) lets the lock go, and the name a busy thread reports is its
holder's own, even read while a shorter name is written over a longer one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import ThreadBusyError, open_store
from covonaut_es.store._backends._sqlite_leases import lease_directory

ROOT = Path(__file__).resolve().parents[1]
WAIT = 60


def _python(code: str, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        text=True,
        **kwargs,  # type: ignore[call-overload]
    )


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
    writing = _python(
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
        """,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert writing.stdout is not None and writing.stdin is not None
    try:
        assert writing.stdout.readline() == "written\n"
        with open_store(url) as store, pytest.raises(ThreadBusyError) as busy, store.lease("t"):
            pass
        assert busy.value.holder == holder
        writing.stdin.write("\n")
        writing.stdin.flush()
        assert writing.stdout.readline() == "held\n"
    finally:
        writing.kill()
        writing.communicate(timeout=WAIT)  # closes its pipes
