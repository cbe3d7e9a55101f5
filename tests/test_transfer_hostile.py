"""Hostile import files, imports that fail halfway, and output that finds no room: an
import brings in the exported history or nothing, an export file is whole or absent,
and no command leaves a traceback or raw terminal controls on its output."""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import Store, create_cipher_key, open_store
from covonaut_es.audit import export_thread, import_threads
from covonaut_es.audit._trailer import Tally
from covonaut_es.cli import main
from covonaut_es.cli._output import print_json
from covonaut_es.domain import AgentThread, thread_aggregate_id
from covonaut_es.domain._named_states import StateSaved
from covonaut_es.domain._submissions import InputSubmitted
from covonaut_es.errors import (
    InvalidThreadIdError,
    StoreSettingsError,
    ThreadConflictError,
    TransferError,
)
from covonaut_es.messages import Message
from covonaut_es.store._chain import CHAIN_FIELD, chain_hash
from support import earlier_thread_id_rule, entries_under, sqlite_key, start_bare_run
from test_transfer import NOW, ROOT, converse, covonaut, source_export

CHILD_ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
"""The environment of a ``covonaut-es`` child process: this checkout's sources."""

UNSAFE = "\u202e\u2066\u200f\u2028\u2029\x85\x9b\x7f\U000e0001"
"""Characters a terminal or ``str.splitlines`` acts on: bidirectional overrides and
marks, line and paragraph separators, C1 controls, DEL, a tag character."""
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _retrailed(event_lines: list[str]) -> str:
    """Event lines with a trailer made for them, as whoever edits an export can."""
    tally = Tally()
    for line in event_lines:
        event = json.loads(line)
        tally.add(event["thread_id"], event["payload"])
    return "".join(line if line.endswith("\n") else line + "\n" for line in event_lines) + (
        tally.trailer_line() + "\n"
    )


@st.composite
def _rewritten_exports(draw: st.DrawFn) -> tuple[bool, str]:
    """The export of ``t-b`` with its ancestor ``t``, its event lines rewritten (moved
    within a thread, repeated, interleaved with the other thread's, a thread's block
    moved first, a thread id replaced by a twin that looks the same), and a trailer
    recomputed so that it agrees with the lines."""
    keyed = draw(st.booleans())
    events = _lines(source_export(keyed))[:-1]
    index = st.integers(0, len(events) - 1)
    for _ in range(draw(st.integers(1, 2))):
        how = draw(st.sampled_from(["move", "repeat", "interleave", "fork first", "twin"]))
        if how == "move":
            line = events.pop(draw(index))
            events.insert(draw(index), line)
        elif how == "repeat":
            events.insert(draw(index), events[draw(index)])
        elif how == "interleave":
            ours = [line for line in events if '"thread_id":"t",' in line]
            theirs = [line for line in events if '"thread_id":"t",' not in line]
            picks = draw(st.permutations([True] * len(ours) + [False] * len(theirs)))
            events = [(ours if pick else theirs).pop(0) for pick in picks]
        elif how == "fork first":
            events = [line for line in events if '"t-b"' in line] + [
                line for line in events if '"t-b"' not in line
            ]
        else:
            twin = draw(st.sampled_from(["t\u200b", "\u202et", "t\u0301", "t "]))
            at = draw(index)
            event = json.loads(events[at])
            event["thread_id"] = twin
            events[at] = json.dumps(event) + "\n"
    return keyed, _retrailed(events)


@settings(max_examples=80, deadline=None)
@given(_rewritten_exports())
def test_an_export_rewritten_under_a_matching_trailer_imports_the_same_history_or_nothing(
    rewritten: tuple[bool, str],
) -> None:
    """Whatever lines are moved, repeated, interleaved or renamed, with a trailer that
    agrees: the import refuses with a typed error and writes nothing, or brings in the
    exported threads, which export again to the exported text."""
    keyed, text = rewritten
    with open_store("memory://", chain_key="k" * 32 if keyed else None) as target:
        try:
            imported = import_threads(target, _lines(text))
        except (TransferError, ThreadConflictError, InvalidThreadIdError):
            assert list(target.thread_ids()) == []
            return
        assert imported == ["t", "t-b"]
        again = "".join(line + "\n" for line in export_thread(target, "t-b", with_ancestors=True))
        assert again == source_export(keyed)


def test_an_export_of_nothing_but_a_trailer_is_refused_and_creates_no_store(
    tmp_path: Path,
) -> None:
    """A trailer that lists no thread is no export (every export holds a thread's first
    event): the import is refused, by the library and the command line, which makes no
    store file."""
    empty = Tally().trailer_line() + "\n"
    with open_store("memory://") as target, pytest.raises(TransferError, match="no events"):
        import_threads(target, [empty], allow_untrailed=True)
    result = covonaut("import", "--store", f"sqlite:///{tmp_path / 'new.db'}", stdin=empty)
    assert result.returncode == 2 and "no events" in result.stderr
    assert not (tmp_path / "new.db").exists()


def _broken_trailer(text: str, edit: Callable[[dict[str, object]], object]) -> str:
    *events, last = _lines(text)
    trailer = json.loads(last)
    edit(trailer)
    return "".join(events) + json.dumps(trailer) + "\n"


BROKEN_TRAILERS = {
    "cut": lambda text: text[:-12] + "\n",
    "future format": lambda text: _broken_trailer(text, lambda t: t.update(trailer="x 2")),
    "count as text": lambda text: _broken_trailer(text, lambda t: t.update(events="7")),
    "count as float": lambda text: _broken_trailer(text, lambda t: t.update(events=7.0)),
    "huge count": lambda text: _broken_trailer(text, lambda t: t.update(events=10**30)),
    "negative count": lambda text: _broken_trailer(text, lambda t: t.update(events=-7)),
    "thread twice": lambda text: _broken_trailer(
        text,
        lambda t: t.update(threads=[*t["threads"], t["threads"][0]]),
    ),
    "unknown field": lambda text: _broken_trailer(text, lambda t: t.update(seal="x")),
}
"""Trailers that are there but broken, by name."""


@pytest.mark.parametrize("how", list(BROKEN_TRAILERS))
def test_allow_untrailed_accepts_no_broken_trailer(how: str) -> None:
    """A file that ends with a trailer that is cut, of another format, counts in text,
    floats, huge or negative numbers, names a thread twice or carries a field more: it
    is refused with ``allow_untrailed`` too, and nothing is written."""
    text = BROKEN_TRAILERS[how](source_export(False))
    with open_store("memory://") as target:
        with pytest.raises(TransferError):
            import_threads(target, _lines(text), allow_untrailed=True)
        assert list(target.thread_ids()) == []


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda text: text.replace("\n", "\r\n"), id="crlf"),
        pytest.param(lambda text: text.rstrip("\n"), id="no-final-newline"),
        pytest.param(lambda text: "\ufeff" + text, id="byte-order-mark"),
    ],
)
def test_the_command_line_imports_an_export_saved_by_another_editor(
    tmp_path: Path, edit: Callable[[str], str]
) -> None:
    """CRLF line ends, no newline after the trailer, or a byte order mark (as editors and
    Windows shells save text): the file and standard input import the same threads."""
    text = edit(source_export(False))
    (tmp_path / "export.jsonl").write_bytes(text.encode())
    for source, stdin in (([str(tmp_path / "export.jsonl")], None), ([], text)):
        target = tmp_path / f"target-{len(source)}.db"
        result = covonaut("import", *source, "--store", f"sqlite:///{target}", stdin=stdin)
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["IMPORTED", "t", "t-b"]


@pytest.mark.parametrize(
    ("source", "target", "refused"),
    [
        pytest.param({"chain_key": "k" * 32}, {}, "chain_key", id="keyed-into-unkeyed"),
        pytest.param({"chain_key": "k" * 32}, {"chain_key": "j" * 32}, "broken", id="other-key"),
        pytest.param({"cipher_key": create_cipher_key()}, {}, None, id="encrypted-into-plain"),
        pytest.param({}, {"cipher_key": create_cipher_key()}, None, id="plain-into-encrypted"),
        pytest.param({"compress": True}, {}, None, id="compressed-into-plain"),
        pytest.param({}, {"compress": True}, None, id="plain-into-compressed"),
    ],
)
def test_an_export_moves_between_stores_of_other_settings_or_is_refused(
    source: dict[str, object], target: dict[str, object], refused: str | None
) -> None:
    """An export holds plain payloads: it imports into a store of any encryption or
    compression and verifies there; a chain sealed with a key imports only into a store
    opened with that key, and a refusal writes nothing."""
    with open_store("memory://", **source) as store:  # type: ignore[arg-type]
        converse(store, "t")
        lines = list(export_thread(store, "t"))
    with open_store("memory://", **target) as store:  # type: ignore[arg-type]
        if refused is not None:
            with pytest.raises(TransferError, match=refused):
                import_threads(store, lines)
            assert list(store.thread_ids()) == []
            return
        assert import_threads(store, lines) == ["t"]
        assert store.verify("t").ok
        assert list(export_thread(store, "t")) == lines


def test_an_import_that_holds_a_thread_the_store_has_writes_none_of_its_threads(
    store: Store,
) -> None:
    """An export whose fork the store already holds: refused naming it, and its parent,
    which the store did not hold, is not written either (every back end)."""
    converse(store, "other")
    store.fork("other", at_version=2, new_thread_id="t-b", now=NOW)
    with pytest.raises(ThreadConflictError, match="'t-b'"):
        import_threads(store, _lines(source_export(False)))
    assert sorted(store.thread_ids()) == ["other", "t-b"]


def _fork_with_a_long_tail(url: str) -> None:
    """Thread ``t`` and its fork ``t-b``, which holds about a megabyte of messages."""
    with open_store(url) as store:
        converse(store, "t")
        store.fork("t", at_version=1, new_thread_id="t-b", now=NOW)
        thread = store.load("t-b")
        start_bare_run(thread, now=NOW)
        for i in range(2500):
            thread.append_message(Message(role="user", content=f"{i} " + "x" * 400), now=NOW)
        store.save(thread)


def _limit_file_size(limit: int) -> Callable[[], None]:
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_an_import_that_finds_no_room_halfway_leaves_the_store_as_it_was(
    tmp_path: Path,
) -> None:
    """An import into a store that already holds a thread, whose file may grow by less
    than the export: the first thread would fit, the second does not. The command
    fails in one line, and the store holds what it held before, intact."""
    source, target = tmp_path / "source.db", tmp_path / "target.db"
    _fork_with_a_long_tail(f"sqlite:///{source}")
    exported = tmp_path / "export.jsonl"
    export = covonaut("export", "t-b", "--store", f"sqlite:///{source}", "-o", str(exported))
    assert export.returncode == 0, export.stderr
    with open_store(f"sqlite:///{target}") as store:
        converse(store, "before")
    limit = target.stat().st_size + 300_000
    url = f"sqlite:///{target}"
    result = subprocess.run(
        [sys.executable, "-m", "covonaut_es", "import", str(exported), "--store", str(url)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_file_size(limit),
        check=False,
        env=CHILD_ENV,
    )
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("covonaut-es import: store ") and "did not complete" in line
    assert "a full disk once it has room" in line
    with open_store(f"sqlite:///{target}") as store:
        assert list(store.thread_ids()) == ["before"]
        assert store.verify("before").ok


def test_an_import_racing_a_writer_of_one_of_its_threads_writes_none_of_them(
    tmp_path: Path,
) -> None:
    """Another connection creates the fork's stream while the import checks the export
    and waits to write: the import is refused naming the fork, and the parent it
    checked is not written either."""
    url = f"sqlite:///{tmp_path / 'target.db'}"
    lines = _lines(source_export(False))
    with open_store(url) as target:
        writer = sqlite3.connect(
            tmp_path / "target.db", isolation_level=None, check_same_thread=False
        )
        writer.execute("BEGIN IMMEDIATE")  # holds the write lock the import waits for
        writer.execute(
            "INSERT INTO stored_events (originator_id, originator_version, topic, state) "
            "VALUES (?, 6, ?, ?)",
            (sqlite_key(thread_aggregate_id("t-b")), AgentThread.Forked.TOPIC, b"{}"),
        )
        committer = threading.Timer(2.0, writer.execute, ["COMMIT"])
        committer.start()
        try:
            with pytest.raises(ThreadConflictError, match="'t-b'"):
                import_threads(target, lines)
        finally:
            committer.join()
            writer.close()
        assert not target.exists("t")


COMMANDS = [
    ["threads"],
    ["threads", "--json"],
    ["show", "t"],
    ["history", "t", "--json"],
    ["reviews"],
    ["tree", "t"],
    ["workers"],
    ["migrate", "--check"],
    ["export", "t"],
    ["--help"],  # the parser's own output: a traceback on a full disk (helper-242)
    ["--version"],
    ["threads", "--help"],
]


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite store with one finished thread ``t``."""
    url = f"sqlite:///{tmp_path_factory.mktemp('small') / 'threads.db'}"
    with open_store(url) as store:
        converse(store, "t")
    return url


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_command_whose_output_finds_no_room_says_so_in_one_line(
    small_store: str, command: list[str]
) -> None:
    """Standard output on a full device: exit 2 and one line on stderr saying the output
    is incomplete, never a traceback."""
    with Path("/dev/full").open("w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "covonaut_es", *command, "--store", small_store],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
            env=CHILD_ENV,
        )
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert "cannot write the output: No space left on device" in line


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_command_whose_reader_is_gone_before_it_prints_exits_141(
    small_store: str, command: list[str]
) -> None:
    """Standard output a pipe whose reader closed (``| true``): exit 141 and no
    traceback; only ``export``, whose output must arrive whole, says so."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "covonaut_es", *command, "--store", small_store],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
            env=CHILD_ENV,
        )
    finally:
        os.close(write_end)
    assert result.returncode == 141, result.stderr
    expected = 1 if command[0] == "export" else 0
    assert len(result.stderr.splitlines()) == expected, result.stderr


def test_an_import_killed_at_any_moment_leaves_all_its_threads_or_none(
    tmp_path: Path,
) -> None:
    """``import`` into a store that holds another thread, killed (SIGKILL) ever later,
    until one run completes: after each kill the store holds all the file's threads or
    none, and verifies."""
    source, target = tmp_path / "source.db", tmp_path / "target.db"
    _fork_with_a_long_tail(f"sqlite:///{source}")
    exported = tmp_path / "export.jsonl"
    export = covonaut("export", "t-b", "--store", f"sqlite:///{source}", "-o", str(exported))
    assert export.returncode == 0, export.stderr
    url = f"sqlite:///{target}"
    with open_store(url) as store:
        converse(store, "before")
    kills = 0
    for step in range(1, 60):
        with subprocess.Popen(
            [sys.executable, "-m", "covonaut_es", "import", str(exported), "--store", url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=CHILD_ENV,
        ) as process:
            time.sleep(0.2 * 1.08**step)  # ever later, so that one run completes at any load
            process.kill()
            kills += process.wait() == -9
        with open_store(url) as store:
            held = set(store.thread_ids())
            assert held in ({"before"}, {"before", "t", "t-b"})
            assert all(store.verify(thread_id).ok for thread_id in held)
            if len(held) == 3:
                break
    # How many kills land before the import ends depends on the machine's load; each
    # one that did was checked above.
    assert kills >= 1 and len(held) == 3


def test_an_export_to_a_file_that_finds_no_room_keeps_the_file_there_before(
    tmp_path: Path,
) -> None:
    """``export -o FILE`` whose file may not grow to the export's size: exit 2 saying
    nothing was written, the export there before unchanged, no partial file beside it.
    A whole export then keeps the file's mode; a new file is its owner's only."""
    source = tmp_path / "source.db"
    _fork_with_a_long_tail(f"sqlite:///{source}")
    previous = tmp_path / "export.jsonl"
    previous.write_text(source_export(False))
    previous.chmod(0o640)
    ro = f"sqlite:///{source}?mode=ro"
    result = subprocess.run(
        [sys.executable, "-m", "covonaut_es", "export", "t-b", "-o", str(previous), "--store", ro],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_file_size(200_000),
        check=False,
        env=CHILD_ENV,
    )
    assert result.returncode == 2, result.stderr
    assert "nothing was written" in result.stderr
    assert [p.name for p in tmp_path.iterdir() if "export" in p.name] == ["export.jsonl"]
    assert previous.read_text() == source_export(False)
    whole = covonaut("export", "t-b", "-o", str(previous), "--store", ro)
    assert whole.returncode == 0, whole.stderr
    assert previous.stat().st_mode & 0o777 == 0o640
    fresh = covonaut("export", "t-b", "-o", str(tmp_path / "new.jsonl"), "--store", ro)
    assert fresh.returncode == 0, fresh.stderr
    assert (tmp_path / "new.jsonl").stat().st_mode & 0o777 == 0o600


_DATABASE_FILES = [
    f"{name}{journal}"
    for name in ("threads.db", "other.db")
    for journal in ("", "-wal", "-shm", "-journal")
] + ["first.db"]
"""The store's file and another SQLite database, each with the files SQLite keeps
beside it (which may not exist yet), and a name whose -wal file is a database made
first (``first.db-wal``)."""


@pytest.fixture
def beside_a_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding a store (``threads.db``) of two threads, another
    application's SQLite database (``other.db``), one made at ``first.db-wal``, a link to
    each file of
    :data:`_DATABASE_FILES` (``link-NAME``), a folder, and a link to the directory."""
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        converse(store, "t")
        converse(store, "u", review=True)
    with contextlib.closing(sqlite3.connect(tmp_path / "other.db")) as other:
        other.execute("CREATE TABLE parcels (id INTEGER PRIMARY KEY)")
        other.commit()
    with contextlib.closing(sqlite3.connect(tmp_path / "first.db-wal")) as first:
        first.execute("CREATE TABLE parcels (id INTEGER PRIMARY KEY)")
        first.commit()
    for name in _DATABASE_FILES:
        (tmp_path / f"link-{name}").symlink_to(name)
    (tmp_path / "sub").mkdir()
    (tmp_path / "here").symlink_to(tmp_path, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _as_found(folder: Path) -> dict[str, bytes | str]:
    """Each entry of ``folder``: a link's target, a file's bytes."""
    return {
        p.name: os.readlink(p) if p.is_symlink() else p.read_bytes()
        for p in folder.iterdir()
        if p.is_symlink() or p.is_file()
    }


_SPELLINGS = st.sampled_from(
    [
        lambda folder, name: name,
        lambda folder, name: f"./{name}",
        lambda folder, name: f"././{name}",
        lambda folder, name: str(folder / name),
        lambda folder, name: f"sub/../{name}",
        lambda folder, name: f"{folder}/sub/../{name}",
        lambda folder, name: f"here/{name}",
        lambda folder, name: f"here/sub/../here/{name}",
        lambda folder, name: f"link-{name}",
        lambda folder, name: f"./here/link-{name}",
        lambda folder, name: str(folder / f"link-{name}"),
    ]
)
"""Ways of writing the same path: relative, absolute, through ``..``, through a link to
its directory or to the file itself."""


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=st.sampled_from(_DATABASE_FILES), spelling=_SPELLINGS)
def test_an_export_never_replaces_a_sqlite_database_however_the_output_is_spelled(
    beside_a_store: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    spelling: Callable[[Path, str], str],
) -> None:
    """``export --output`` naming the store's own file, another SQLite database, or a
    journal SQLite keeps beside either (there or not), or a name whose journal is a
    database already, however the path is written: exit 2 in one line naming the path,
    and no file changes; so does ``reviews --view`` naming such a journal or name; the
    store still lists both threads, one of them waiting for a person. A view made at
    ``first.db`` took ``first.db-wal`` as its journal and deleted it (helper-170)."""
    output = spelling(beside_a_store, name)
    before = _as_found(beside_a_store)
    status = main(["export", "t", "--store", "sqlite:///threads.db", "--output", output])
    stderr = capsys.readouterr().err
    assert status == 2, stderr
    assert f"--output {output!r} is " in stderr and "nothing was written" in stderr
    assert len(stderr.splitlines()) == 1, stderr
    assert _as_found(beside_a_store) == before
    if name.endswith(("-wal", "-shm", "-journal")) or name == "first.db":
        # The view's file is checked by the same rule: a journal made a database lost
        # the store (helper-167), and so did a database whose journal was one.
        status = main(
            ["reviews", "--store", "sqlite:///threads.db", "--view", f"sqlite:///{output}"]
        )
        stderr = capsys.readouterr().err
        assert status == 2, stderr
        assert " file is SQLite database " in stderr or "file of SQLite database" in stderr
        assert "nothing was written" in stderr
        assert len(stderr.splitlines()) == 1, stderr
        assert _as_found(beside_a_store) == before
    with open_store("sqlite:///threads.db", create_tables=False) as store:
        assert sorted(store.thread_ids()) == ["t", "u"]
        assert store.state_at("u").status.value == "interrupted"


def test_an_export_still_writes_a_file_beside_the_store(
    beside_a_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file that is no database, beside the store or named like its journals without
    being one (``threads.db.jsonl``, ``notes-wal``), is written as before."""
    (beside_a_store / "notes-wal").write_text("an old export\n")
    for output in ("threads.db.jsonl", "notes-wal", "sub/threads.db"):
        status = main(["export", "t", "--store", "sqlite:///threads.db", "--output", output])
        assert status == 0, capsys.readouterr().err
        assert (beside_a_store / output).read_text().startswith('{"thread_id":"t"')


_ANOTHER_USER = 65534  # nobody, as Debian has it

_PLANTED = [
    "nothing",
    "own file",
    "own link",
    "own pipe",
    "another user's file",
    "another user's link",
    "another user's pipe",
    "the directory owner's link",
]
"""What may stand at an export's ``--output`` in a directory others write in: those of
another user need one, so only root can make them."""


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    planted=st.sampled_from(_PLANTED if os.geteuid() == 0 else _PLANTED[:4]),
    mode=st.integers(0, 0o777),
    shared=st.booleans(),
)
def test_an_export_is_written_only_where_its_own_user_decides(
    beside_a_store: Path,
    capsys: pytest.CaptureFixture[str],
    planted: str,
    mode: int,
    shared: bool,
) -> None:
    """``export --output`` into a directory others write in (``shared``: sticky and
    world-writable, as ``/tmp``), where another user may have put a file or a link:
    it writes through its own user's links and the directory owner's only, and over its
    own user's files and pipes only, keeping a file's mode; a new file is its owner's
    only, and so is the file being written until it is whole. Anything else is refused
    in one line and nothing changes, here or where a link leads. Before, a link another
    user planted made an export of an encrypted store overwrite any file, a file of
    another user's, mode 0666, gave the decrypted export that mode (helper-200), and
    another user's pipe read it (helper-201)."""
    folder = Path(tempfile.mkdtemp(dir=beside_a_store))
    elsewhere = Path(tempfile.mkdtemp(dir=beside_a_store))
    precious = elsewhere / "precious.conf"
    precious.write_text("precious\n")
    precious.chmod(0o600)
    if shared:
        folder.chmod(0o1777)
    if planted == "the directory owner's link":
        os.chown(folder, _ANOTHER_USER, _ANOTHER_USER)
    output = folder / "export.jsonl"
    if planted.endswith("file"):
        output.write_text("planted\n")
        output.chmod(mode)
    elif planted.endswith("link"):
        output.symlink_to(precious)
    elif planted.endswith("pipe"):
        os.mkfifo(output, 0o600)
    if planted.startswith(("another", "the directory")):
        os.lchown(output, _ANOTHER_USER, _ANOTHER_USER)
    before = entries_under(folder, elsewhere)
    received: list[bytes] = []
    if planted == "own pipe":
        reader = threading.Thread(target=lambda: received.append(output.read_bytes()))
        reader.start()
    real_fsync = os.fsync

    def whole_only_when_synced(fd: int) -> None:
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o600  # nobody else reads a part
        real_fsync(fd)

    with (
        mock.patch("os.fsync", whole_only_when_synced),
        # A mode given by name would follow a link put where the file was (helper-201).
        mock.patch("os.chmod", side_effect=AssertionError("a mode set by the file's name")),
    ):
        status = main(["export", "t", "--store", "sqlite:///threads.db", "--output", str(output)])
    stderr = capsys.readouterr().err
    if planted == "own pipe":
        reader.join(timeout=30)
        assert status == 0, stderr
        assert received and received[0].startswith(b'{"thread_id":"t"')
        assert entries_under(folder, elsewhere) == before
        return
    if planted.startswith("another"):
        assert status == 2, stderr
        assert "another user" in stderr and "nothing was written" in stderr, stderr
        assert len(stderr.splitlines()) == 1, stderr
        assert entries_under(folder, elsewhere) == before
        return
    assert status == 0, stderr
    written = precious if planted.endswith("link") else output
    info = written.stat()
    assert info.st_uid == os.geteuid()
    assert stat.S_IMODE(info.st_mode) == (mode if planted == "own file" else 0o600)
    assert written.read_text().startswith('{"thread_id":"t"')
    after = entries_under(folder, elsewhere)
    changed = {path for path in {*before, *after} if before.get(path) != after.get(path)}
    assert changed == {str(written)}


@pytest.mark.parametrize(
    "output", [".", "..", "/", "sub/", "sub/..", "absent/", "threads.db/", "notes-wal/.", "x/."]
)
def test_an_export_to_a_directorys_name_is_refused(
    beside_a_store: Path, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    """``--output`` naming a directory, however spelled (a trailing ``/`` included, which
    a file of the name without it took), exits 2 in one line and writes nothing; ``.``
    and ``/`` were a traceback (helper-201)."""
    before = _as_found(beside_a_store)
    status = main(["export", "t", "--store", "sqlite:///threads.db", "--output", output])
    stderr = capsys.readouterr().err
    assert status == 2, stderr
    assert "names a directory" in stderr and len(stderr.splitlines()) == 1, stderr
    assert _as_found(beside_a_store) == before
    assert not (beside_a_store / "absent").exists()


@pytest.mark.parametrize("output", ["/dev/stdout", "/proc/self/fd/1", "/dev/fd/1"])
@pytest.mark.parametrize("stdout", ["a file appended to", "a pipe"])
def test_an_export_to_its_own_standard_output_is_written_as_the_shell_opened_it(
    beside_a_store: Path, output: str, stdout: str
) -> None:
    """``--output /dev/stdout`` (or the descriptor's other names) writes to the
    command's standard output as the shell opened it: appended to a file opened with
    ``>>``, keeping what it held, and into a pipe. It replaced the file, losing its
    lines, and failed on a pipe (helper-201)."""
    command = [sys.executable, "-m", "covonaut_es", "export", "t", "--output", output]
    command += ["--store", "sqlite:///threads.db"]
    if stdout == "a pipe":
        result = subprocess.run(
            command, cwd=beside_a_store, env=CHILD_ENV, capture_output=True, timeout=120
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(b'{"thread_id":"t"')
        return
    audit = beside_a_store / "audit.jsonl"
    audit.write_text("first\nsecond\n")
    with open(audit, "a") as appended:
        result = subprocess.run(
            command, cwd=beside_a_store, env=CHILD_ENV, stdout=appended,
            stderr=subprocess.PIPE, timeout=120,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = audit.read_text().splitlines()
    assert lines[:2] == ["first", "second"] and lines[2].startswith('{"thread_id":"t"')


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from(UNSAFE) | st.characters(), max_size=30))
def test_json_output_is_one_printable_line_holding_the_same_value(text: str) -> None:
    """``--json`` output of any text: one line that holds no character a terminal or a
    line splitter acts on, and decodes to the same value."""
    if any("\ud800" <= char <= "\udfff" for char in text):
        return  # a lone surrogate is no text that JSON can carry
    out = _printed({"text": text, "list": [text]})
    assert out.endswith("\n") and not _unsafe(out[:-1])
    assert msgspec.json.decode(out) == {"text": text, "list": [text]}


def _unsafe(text: str) -> set[str]:
    """The characters of ``text`` that a terminal or a line splitter acts on."""
    return {char for char in text if unicodedata.category(char) in UNSAFE_CATEGORIES}


def _printed(value: object) -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        print_json(value)
    return buffer.getvalue()


def test_an_export_holding_separators_and_overrides_is_one_line_per_event(
    tmp_path: Path,
) -> None:
    """A thread an earlier version stored under an id holding line and paragraph
    separators, whose messages hold bidirectional overrides, separators and C1
    controls: its export is printable and splits into exactly its lines however it is
    split; imported, it would be a new thread under an id no new thread may take, so it
    is refused (ADR 0126); ``threads --json`` shows the id escaped."""
    thread_id = "t\u2029evil\u2028"
    url = f"sqlite:///{tmp_path / 'source.db'}"
    with open_store(url) as store:
        with earlier_thread_id_rule():
            thread = AgentThread.start(thread_id, now=NOW)
        start_bare_run(thread, now=NOW)
        thread.append_message(Message(role="user", content=UNSAFE), now=NOW)
        store.save(thread)
        lines = list(export_thread(store, thread_id))
    text = "".join(line + "\n" for line in lines)
    assert not any(_unsafe(line) for line in lines)
    assert text.splitlines() == lines
    with (
        open_store("memory://") as target,
        pytest.raises(InvalidThreadIdError, match="a new thread's id"),
    ):
        import_threads(target, text.splitlines())
    listed = covonaut("threads", "--json", "--store", url)
    assert listed.returncode == 0, listed.stderr
    assert not _unsafe(listed.stdout[:-1]) and "t\\u2029evil\\u2028" in listed.stdout


@pytest.mark.parametrize("recorded", ["brotli", "ZLIB", ""])
def test_a_store_recording_an_unknown_compression_is_refused_at_every_open(
    tmp_path: Path, recorded: str
) -> None:
    """A settings row altered to a compression this code does not know: every open,
    reading or writing, library or command line, is refused naming the value, and
    nothing is written."""
    path = tmp_path / "threads.db"
    url = f"sqlite:///{path}"
    with open_store(url, compress=True) as store:
        converse(store, "t")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE covonaut_settings SET value = ? WHERE name = 'compression'", [recorded])
    db.close()
    before = path.read_bytes()
    for create_tables in (True, False):
        with pytest.raises(StoreSettingsError, match=f"records compression {recorded!r}"):
            open_store(url, create_tables=create_tables)
    for command in (["threads"], ["import"]):
        result = covonaut(*command, "--store", url, stdin=source_export(False))
        assert result.returncode == 2 and "records compression" in result.stderr
    assert path.read_bytes() == before


def test_an_export_read_while_its_thread_grows_imports_as_one_state_of_it(
    tmp_path: Path,
) -> None:
    """Events appended by another connection while an export reads its pages: the
    export holds the thread at one of its versions, whole, and imports and verifies."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        thread = AgentThread.start("grows", now=NOW)
        start_bare_run(thread, now=NOW)
        for i in range(700):
            thread.append_message(Message(role="user", content=f"{i}"), now=NOW)
        store.save(thread)
    with open_store(url) as reader, open_store(url) as writer:
        lines = export_thread(reader, "grows")
        read = [next(lines) for _ in range(600)]  # into the second page
        thread = writer.load("grows")
        for i in range(300):
            thread.append_message(Message(role="user", content=f"late {i}"), now=NOW)
        writer.save(thread)
        read.extend(lines)
    with open_store("memory://") as target:
        assert import_threads(target, read) == ["grows"]
        assert target.verify("grows").ok
        assert target.load("grows").version == json.loads(read[-1])["events"]


@pytest.mark.parametrize("compressed", [False, True])
def test_a_store_from_before_recorded_settings_opens_by_default_or_names_the_option(
    tmp_path: Path, compressed: bool
) -> None:
    """A store whose settings table is gone (as before settings were recorded), opened
    without ``compress``: an uncompressed one opens; a compressed one is refused naming
    the option, opens with it, and nothing is added to it either way."""
    path = tmp_path / "threads.db"
    url = f"sqlite:///{path}"
    with open_store(url, compress=compressed) as store:
        converse(store, "t")
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE covonaut_settings")
    db.close()
    if compressed:
        with pytest.raises(StoreSettingsError, match=r"predates recorded settings.*compress"):
            open_store(url)
    with open_store(url, compress=compressed or None) as store:
        assert store.verify("t").ok
    with sqlite3.connect(path) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    db.close()
    assert "covonaut_settings" not in tables


def _relinked(events: list[dict[str, object]]) -> list[str]:
    """The event lines of a thread and its forks, each thread's chain recomputed as the
    author of an edited export can (without a chain key): a fork's links on from its
    parent's hash at the version its first event names."""
    heads: dict[str, dict[object, str]] = {}
    for event in events:
        payload = event["payload"]
        assert isinstance(payload, dict)
        version, topic, thread = event["version"], event["topic"], event["thread_id"]
        assert isinstance(version, int) and isinstance(topic, str) and isinstance(thread, str)
        chain = heads.setdefault(thread, {})
        previous = chain.get(version - 1, "")
        if topic == AgentThread.Forked.TOPIC:
            parent = heads.get(str(payload["parent_thread_id"]), {})
            previous = parent.get(payload["parent_version"], "")
        payload[CHAIN_FIELD] = chain[version] = chain_hash(previous, topic, version, payload)
    return [json.dumps(event, separators=(",", ":")) + "\n" for event in events]


def _root_events() -> list[dict[str, object]]:
    """The event lines of thread ``t`` of the unkeyed export, decoded."""
    return [e for e in _exported_events() if e["thread_id"] == "t"]


def _exported_events() -> list[dict[str, object]]:
    """The event lines of the unkeyed export (thread ``t``, then its fork ``t-b``),
    decoded."""
    return [json.loads(line) for line in _lines(source_export(keyed=False))[:-1]]


def _int_paths(value: object, path: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """The paths of the integers in ``value`` (a payload), booleans left out."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [path]
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    return [p for key, item in items for p in _int_paths(item, (*path, key))]


@settings(max_examples=50, deadline=None)
@given(
    data=st.data(),
    beyond=st.sampled_from([2**64, 2**64 + 7, -(2**63) - 1, 10**30, True, False]),
)
def test_an_export_rewritten_with_a_number_no_store_carries_is_refused(
    data: st.DataObject, beyond: int
) -> None:
    """Any integer of any line (but its version), a fork's parent version among them,
    made one beyond 64 bits or a boolean, the chain and the trailer made again to agree:
    refused naming the line, nothing written; no listing of the store is left to fail
    on it."""
    events = _exported_events()
    fields = [
        (at, path)
        for at, event in enumerate(events)
        for path in _int_paths(event["payload"])
        if path != ("_v",)
    ]
    at, path = data.draw(st.sampled_from(fields))
    target: object = events[at]["payload"]
    for key in path[:-1]:
        target = target[key]  # type: ignore[index]
    target[path[-1]] = beyond  # type: ignore[index]
    with open_store("memory://") as store:
        with pytest.raises(TransferError, match=f"line {at + 1} "):
            import_threads(store, _lines(_retrailed(_relinked(events))))
        assert list(store.thread_ids()) == []
        assert store.list_threads().threads == ()


@pytest.mark.parametrize(
    "topic", ["covonaut.thread.Snapshot", StateSaved.TOPIC, InputSubmitted.TOPIC]
)
def test_an_export_whose_first_line_is_no_threads_event_is_refused(topic: str) -> None:
    """A first line retitled as a store's own record (a snapshot, a named state, an
    input), the chain and trailer made again: refused; a thread made of a snapshot alone
    would take any state without one event of its own."""
    events = _root_events()
    events[0]["topic"] = topic
    with open_store("memory://") as store:
        with pytest.raises(TransferError, match="is not an event of a thread"):
            import_threads(store, _lines(_retrailed(_relinked(events))))
        assert list(store.thread_ids()) == []


@settings(max_examples=25, deadline=None)
@given(data=st.data(), byte=st.integers(0x80, 0xFF))
def test_an_export_holding_bytes_that_are_no_utf8_is_refused_naming_the_line(
    data: st.DataObject, byte: int
) -> None:
    """A byte that is no UTF-8 anywhere in an export read as Python reads standard input
    (surrogateescape): refused naming the line, nothing written."""
    raw = source_export(keyed=False).encode()
    at = data.draw(st.integers(0, len(raw) - 1))
    # A byte from 0x80 inserted into UTF-8 text always leaves one that is no UTF-8.
    damaged = (raw[:at] + bytes([byte]) + raw[at:]).decode("utf-8", "surrogateescape")
    line = raw[:at].count(b"\n") + 1
    with open_store("memory://") as store:
        with pytest.raises(TransferError, match=f"line {line} "):
            import_threads(store, _lines(damaged))
        assert list(store.thread_ids()) == []


def test_the_command_line_refuses_an_export_on_standard_input_that_is_no_utf8(
    tmp_path: Path,
) -> None:
    """Standard input holding bytes that are no UTF-8: one line, exit 2, no store made."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    sent = source_export(keyed=False).encode().replace(b'"payload":{', b'"payload":{"\xff":1,', 1)
    done = subprocess.run(
        [sys.executable, "-m", "covonaut_es", "import", "--store", url], input=sent,
        capture_output=True, env=CHILD_ENV, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert b"is not UTF-8 text" in done.stderr and len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "threads.db").exists()


@pytest.mark.parametrize("import_fails", [True, False], ids=["fails", "succeeds"])
def test_an_import_into_a_new_file_never_takes_or_removes_a_store_made_meanwhile(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    import_fails: bool,
) -> None:
    """An import into a SQLite file that does not exist fills a hidden file beside it,
    put at the path only once it succeeded and only if no other process made a store
    there meanwhile: another writer's store, made and filled while the import ran, is
    kept as that writer left it whether the import fails (it used to be removed with
    the failed import's file) or succeeds (refused, exit 2, nothing imported into it),
    and nothing of the import is left beside it."""
    path = tmp_path / "new.db"
    export = tmp_path / "t.jsonl"
    export.write_text(source_export(keyed=False))
    real_import = import_threads

    def another_writer_meanwhile(store: Store, *args: object, **kwargs: object) -> object:
        with open_store(f"sqlite:///{path}") as other:
            converse(other, "theirs")
        if import_fails:
            raise TransferError("the import fails after the other writer stored its thread")
        return real_import(store, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("covonaut_es.cli._transfer.import_threads", another_writer_meanwhile)
    status = main(["import", str(export), "--store", f"sqlite:///{path}"])
    assert status == 2
    err = capsys.readouterr().err
    assert ("the import fails" if import_fails else "made by another process") in err
    with open_store(f"sqlite:///{path}") as kept:
        assert list(kept.thread_ids()) == ["theirs"]
        assert kept.verify("theirs").ok
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".covonaut")) == [
        "new.db",
        "t.jsonl",
    ]


@pytest.mark.parametrize("name", ["new.db", "n" * 244 + ".db"], ids=["short", "long"])
def test_an_import_into_a_new_file_puts_a_whole_store_there(tmp_path: Path, name: str) -> None:
    """Succeeding, the import's store is at the path, whole (every thread verifies), with
    nothing left beside it but the store's own lease directory, whatever the length of
    the file's name (247 bytes: SQLite's "-journal" beside it makes 255, the most a
    name may have; the hidden file's name does not grow with it)."""
    path = tmp_path / name
    export = tmp_path / "t.jsonl"
    export.write_text(source_export(keyed=False))
    assert main(["import", str(export), "--store", f"sqlite:///{path}"]) == 0
    with open_store(f"sqlite:///{path}") as store:
        assert sorted(store.thread_ids()) == ["t", "t-b"]
        assert all(store.verify(t).ok for t in ("t", "t-b"))
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".covonaut")) == [
        name,
        "t.jsonl",
    ]
