"""The shared memory SQLite keeps beside a database in WAL mode (its ``-shm`` file) is
never opened by the rule that checks what a file is (ADR 0125): closing a descriptor of
it drops the POSIX locks this process's connections hold there, and the next process to
open the database then resets it under them (a process killed by SIGBUS in the middle
of a save, helper-190). So no command makes or writes a file at a ``-shm`` name."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import ReviewQueue, open_store
from covonaut_es.cli import main
from covonaut_es.domain import AgentThread
from covonaut_es.errors import NotAStoreError

if not Path("/proc/self/fdinfo").exists():
    reason = "reads this process's locks in /proc/self/fdinfo (Linux)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI runs on Linux", pytrace=False)
    pytest.skip(reason, allow_module_level=True)

_NOW = datetime(2026, 1, 1, tzinfo=UTC)


def locks_held_on(path: Path) -> list[str]:
    """This process's POSIX locks on ``path``'s file (their kind, mode and byte range),
    as the kernel lists them beside each of the process's descriptors of that file.

    Not read from /proc/locks: the kernel hands that list out a page per read, counting
    its place by position, so while other processes (the other test workers) take and
    drop locks, a reader sees some lock twice or misses one."""
    found = path.stat()
    held: list[str] = []
    for descriptor in os.listdir("/proc/self/fd"):
        try:
            opened = os.stat(f"/proc/self/fd/{descriptor}")
            with open(f"/proc/self/fdinfo/{descriptor}") as info:
                lines = [line.split() for line in info if line.startswith("lock:")]
        except OSError:  # closed since the listing, or the listing's own descriptor
            continue
        if (opened.st_dev, opened.st_ino) == (found.st_dev, found.st_ino):
            held += [" ".join(f[2:5] + f[-2:]) for f in lines]
    return sorted(held)


def fresh_folder(tmp_path: Path) -> Path:
    """A new folder for one example (hypothesis runs several in one ``tmp_path``)."""
    folder = Path(os.path.realpath(tmp_path)) / f"run-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    return folder


@contextlib.contextmanager
def live_store(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A store at ``threads.db`` in a fresh folder, open and reading (its connections
    lock its ``-shm`` file) for the block; its folder and URL. The store still reads
    after the block."""
    folder = fresh_folder(tmp_path)
    url = f"sqlite:///{folder / 'threads.db'}"
    with open_store(url) as store:
        store.save(AgentThread.start("t", now=_NOW))
        store.load("t")
        yield folder, url
        store.load("t")


def store_locks(folder: Path) -> tuple[list[str], list[str]]:
    """This process's locks on the store's shared memory and on its database."""
    return locks_held_on(folder / "threads.db-shm"), locks_held_on(folder / "threads.db")


def _open_again(folder: Path, url: str) -> None:
    open_store(url).close()


def _open_read_only(folder: Path, url: str) -> None:
    with open_store(f"{url}?mode=ro") as store:
        store.load("t")


def _view_beside(folder: Path, url: str) -> None:
    queue = ReviewQueue(url, view_url=f"sqlite:///{folder / 'view.db'}")
    list(queue.pending())
    queue.close()


def _command(*args: str) -> Callable[[Path, str], None]:
    def run(folder: Path, url: str) -> None:
        main([*(a.format(folder=folder) for a in args), "--store", url])

    run.__name__ = args[0]
    return run


# Every way a process that has a store open asks the rule about files beside it: its
# own file again, a view, an export's output, each command's store.
OPENINGS = [
    _open_again,
    _open_read_only,
    _view_beside,
    _command("threads"),
    _command("export", "t", "--output", "{folder}/threads.db-shm"),
    _command("export", "t", "--output", "{folder}/out.jsonl"),
    _command("reviews", "--view", "sqlite:///{folder}/threads.db-shm"),
    _command("show", "t"),
]


@settings(
    max_examples=24, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(openings=st.lists(st.sampled_from(OPENINGS), min_size=1, max_size=3))
def test_opening_a_store_again_keeps_the_locks_this_process_holds_on_its_shared_memory(
    tmp_path: Path, openings: list[Callable[[Path, str], None]]
) -> None:
    """While a store is open and reading, any command of the same process that opens
    it again, or names a file beside it, leaves every lock the store's connections hold
    on its ``-shm`` file and on its database as it was."""
    with live_store(tmp_path) as (folder, url):
        before = store_locks(folder)
        assert before[0], "a store in WAL mode holds a lock on its shared memory"
        for opening in openings:
            with contextlib.suppress(SystemExit):
                opening(folder, url)
            assert store_locks(folder) == before, opening


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    beside=st.sampled_from(["nothing", "one byte", "a database", "a store"]),
    there=st.sampled_from(["nothing", "an empty file", "a database"]),
    made=st.sampled_from(["store", "view", "export"]),
    link=st.booleans(),
)
def test_no_database_is_made_or_written_at_a_shm_name(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    beside: str,
    there: str,
    made: str,
    link: bool,
) -> None:
    """A store, a view or an export named ``X-shm`` (or through a link to that name),
    whatever is at ``X`` and at ``X-shm``, is refused in one typed error naming the
    ``-shm`` file, and no file in the folder is made or changed: a database there could
    not be told from the shared memory of one without opening it."""
    folder = fresh_folder(tmp_path)
    with open_store(f"sqlite:///{folder / 'source.db'}") as source:
        source.save(AgentThread.start("t", now=_NOW))
    database = folder / "threads.db"
    if beside == "one byte":
        database.write_bytes(b"\0")
    elif beside == "a database":
        with contextlib.closing(sqlite3.connect(database)) as connection:
            connection.execute("CREATE TABLE notes (text TEXT)")
    elif beside == "a store":
        open_store(f"sqlite:///{database}").close()
    shared = folder / "threads.db-shm"
    if there == "an empty file":
        shared.touch()
    elif there == "a database":
        with contextlib.closing(sqlite3.connect(shared)) as connection:
            connection.execute("CREATE TABLE kept (id INTEGER)")
    target = shared
    if link:
        target = folder / "link.db"
        target.symlink_to(shared)
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    source_url = f"sqlite:///{folder / 'source.db'}"
    if made == "store":
        with pytest.raises(NotAStoreError, match="-shm file"):
            open_store(f"sqlite:///{target}")
    elif made == "view":
        queue = ReviewQueue(source_url, view_url=f"sqlite:///{target}")
        with pytest.raises(NotAStoreError, match="-shm file"):
            list(queue.pending())
        queue.close()
    else:
        assert main(["export", "t", "--output", str(target), "--store", source_url]) == 2
        refusal = capsys.readouterr().err
        assert "-shm file" in refusal and len(refusal.splitlines()) == 1, refusal
    after = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    after = {name: data for name, data in after.items() if not name.startswith("source.db")}
    before = {name: data for name, data in before.items() if not name.startswith("source.db")}
    assert after == before


@settings(
    max_examples=24, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    linked=st.sampled_from(["threads.db", "threads.db-wal", "threads.db-shm"]),
    made=st.sampled_from(["store", "view", "export"]),
)
def test_a_second_name_of_a_live_stores_file_is_refused_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], linked: str, made: str
) -> None:
    """A hard link, under a plain name, to a live store's database, write-ahead log or
    shared memory: a store, a view or an export there is refused in one typed error
    naming the hard links, the file is not read (the store's locks stay as they were),
    and nothing in the folder changes. A store reached through a second name kept a
    second write-ahead log, and what it wrote was lost (helper-194)."""
    with live_store(tmp_path) as (folder, url):
        second = folder / "notes.db"
        os.link(folder / linked, second)
        locks = store_locks(folder)
        before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
        if made == "store":
            with pytest.raises(NotAStoreError, match="hard links"):
                open_store(f"sqlite:///{second}")
        elif made == "view":
            with pytest.raises(NotAStoreError, match="hard links"):  # the store's, or the view's
                queue = ReviewQueue(url, view_url=f"sqlite:///{second}")
                try:
                    list(queue.pending())
                finally:
                    queue.close()
        else:
            assert main(["export", "t", "--output", str(second), "--store", url]) == 2
            refusal = capsys.readouterr().err
            assert "hard links" in refusal and len(refusal.splitlines()) == 1, refusal
        assert store_locks(folder) == locks
        assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


def test_a_store_file_of_two_names_is_refused_by_both(tmp_path: Path) -> None:
    """A store's file given a second name (a hard link) opens by neither: SQLite keeps
    a write-ahead log per name, and two processes writing through the two names lost one
    of their writes without an error."""
    database = tmp_path / "threads.db"
    with open_store(f"sqlite:///{database}") as store:
        store.save(AgentThread.start("t", now=_NOW))
    os.link(database, tmp_path / "other.db")
    for name in ("threads.db", "other.db"):
        with pytest.raises(NotAStoreError, match="a file of 2 names"):
            open_store(f"sqlite:///{tmp_path / name}")
    (tmp_path / "other.db").unlink()
    with open_store(f"sqlite:///{database}") as store:
        assert list(store.thread_ids()) == ["t"]


@pytest.mark.parametrize("name", ["-shm", "-wal", "-journal"])
def test_a_file_named_only_as_a_journal_is_refused_in_one_typed_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """A store, a view or an export at a file named exactly ``-shm``, ``-wal`` or
    ``-journal`` gets a typed refusal or opens, never an error about a name (it was a
    ``ValueError`` the store's open took for a bad cipher key; helper-194)."""
    source = f"sqlite:///{tmp_path / 'source.db'}"
    with open_store(source) as store:
        store.save(AgentThread.start("t", now=_NOW))
    for folder in ("store", "view", "out"):
        (tmp_path / folder).mkdir()
    try:
        open_store(f"sqlite:///{tmp_path / 'store' / name}").close()
    except NotAStoreError as refused:
        assert name in str(refused)
    queue = ReviewQueue(source, view_url=f"sqlite:///{tmp_path / 'view' / name}")
    with contextlib.suppress(NotAStoreError):
        list(queue.pending())
    queue.close()
    status = main(["export", "t", "--output", str(tmp_path / "out" / name), "--store", source])
    assert status in (0, 2), capsys.readouterr().err
    assert "Traceback" not in capsys.readouterr().err
