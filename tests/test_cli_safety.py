"""The command line under operator mistakes and hostile text: one-line errors, no
store created or changed by reading it, and nothing from a model reaching the
terminal raw."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from eventsourcing.persistence import StoredEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import Store, Tool, create_cipher_key, open_store
from covonaut_es._text import json_printable, printable, shows_nothing
from covonaut_es.cli import main
from covonaut_es.cli._output_file import write_output
from covonaut_es.domain import thread_aggregate_id
from covonaut_es.providers import ScriptedProvider
from covonaut_es.runtime import Agent, AgentConfig, CheckpointSettings, HmacReviewerVerifier
from covonaut_es.service import ThreadService
from support import answer, call, echo_tool, is_utf8

ROOT = Path(__file__).resolve().parent.parent
SECRET = secrets.token_hex(32)
HOSTILE = "\x1b]0;owned\x07\x1b[2J\rX\nFORGED  ROW  \x9b31m\x7f\u202e"
"""Sets the window title, clears the screen, rewrites the line, forges a table row."""
RAW_BYTES = ("\x1b", "\x07", "\r", "\x9b", "\x7f", "\u202e", "\nFORGED")


def run(
    *args: str,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    program: tuple[str, ...] = ("-m", "covonaut_es"),
    via: str = sys.executable,
) -> subprocess.CompletedProcess[str]:
    """``covonaut-es ARGS`` with this checkout's sources and the reviewer secret set
    (``via`` runs ``program``: Python, or a program that runs it)."""
    return subprocess.run(
        [via, *program, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT / "src"),
            "COVONAUT_ES_REVIEWER_SECRET": SECRET,
            **(env or {}),
        },
        check=False,
    )


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A SQLite store whose model, tools and labels said hostile things: a finished
    thread, one waiting for a reviewer's decision, and one whose id was forged."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    arguments = json.dumps({"text": HOSTILE, "amount": 7})
    pay = Tool("pay", "Pay", {"type": "object"}, lambda c, a: HOSTILE, requires_approval=True)
    with open_store(url) as store:
        for thread_id, tool, script in (
            ("finished", echo_tool(), [call(("c1", "echo", arguments)), answer(HOSTILE)]),
            ("payment", pay, [call(("p1", "pay", arguments))]),
        ):
            Agent(
                AgentConfig(
                    provider=ScriptedProvider(script),
                    tools=[tool],
                    reviewer_verifier=HmacReviewerVerifier(SECRET.encode()),
                    checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
                )
            ).run(HOSTILE)
        ThreadService(store).label("finished", HOSTILE)
        forge_thread(store, HOSTILE)
    return url


def forge_thread(store: Store, thread_id: str) -> None:
    """Start a thread behind the library's back under an id it refuses, as another
    writer to the database could: a copy of the first event of ``finished``."""
    (first,) = store._app.recorder.select_events(thread_aggregate_id("finished"), lte=1)
    mapper = store._app.mapper  # the store's compression, which is no secret
    payload = {**json.loads(mapper.plain_payload(first)), "thread_id": thread_id}  # type: ignore[attr-defined]
    stored = mapper.stored_payload(json.dumps(payload).encode())  # type: ignore[attr-defined]
    forged = StoredEvent(thread_aggregate_id(thread_id), 1, first.topic, stored)
    store._app.recorder.insert_events([forged])


def review_of(url: str) -> str:
    with open_store(url) as store:
        (review,) = store.state_at("payment").reviews
    return review.request.review_id


def token(reviewer: str) -> str:
    return HmacReviewerVerifier(SECRET.encode()).issue_token(reviewer, ttl_seconds=600)


def person_acting(credential: str, thread: str = "payment") -> list[tuple[str, ...]]:
    """answer, settle, abandon and retry on ``thread``, with ``credential``."""
    given = ("--reviewer-token", credential)
    return [
        ("answer", thread, "p1", "--answer", "yes", *given),
        ("settle", thread, "p1", "--result", "paid", *given),
        ("abandon", thread, "--reason", "gone", *given),
        ("retry", thread, *given),
    ]


def listing(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` with its bytes."""
    return {str(p): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_every_command_refuses_bad_input_in_one_line_and_writes_nothing(
    url: str, tmp_path: Path
) -> None:
    """Missing files, wrong URLs, unknown threads, bad versions, wrong tokens and
    unreadable exports: exit 2, one line on stderr, no traceback, no file changed."""
    missing = f"sqlite:///{tmp_path / 'mistyped.db'}"
    review = review_of(url)
    forged = HmacReviewerVerifier(secrets.token_bytes(32)).issue_token("eve", ttl_seconds=60)
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "binary.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    on_store: list[tuple[str, ...]] = [
        ("threads",),
        ("reviews",),
        ("show", "finished"),
        ("history", "finished"),
        ("replay", "finished", "--verify"),
        ("tree", "finished"),
        ("export", "finished"),
        ("fork", "finished"),
        ("approve", review, "--reviewer-token", forged),
        ("reject", review, "--reviewer-token", forged, "--reason", "no"),
        *person_acting(forged),
        ("migrate", "--check"),
    ]
    cases = [(*args, "--store", store) for args in on_store for store in (missing, "redis://x")]
    cases += [
        (command, "ghost", "--store", url) for command in ("show", "replay", "tree", "export")
    ]
    cases += [
        ("replay", "ghost", "--verify", "--store", url),  # a mistyped id, not a damaged one
        # empty values, refused rather than read as left out
        ("fork", "finished", "--as", "", "--store", url),
        ("export", "finished", "--output", "", "--store", url),
        ("threads", "--cipher-key-env", "EMPTY_KEY", "--store", url),
        ("threads", "--after", str(2**63), "--store", url),
        ("threads", "--after", "-1", "--store", url),
        ("history", "ghost", "--store", url),
        ("fork", "ghost", "--store", url),
        ("fork", "finished", "--at", "999", "--store", url),
        ("approve", review, "--reviewer-token", forged, "--store", url),
        ("reject", review, "--reviewer-token", "not-a-token", "--reason", "no", "--store", url),
        *((*args, "--store", url) for args in person_acting(forged)),
        # (settle and retry on an unknown thread are refused too, but only after taking
        # its run lease, which writes the lease's token: tests/test_cli_pauses.py)
        *(
            (*args, "--store", url)
            for args in person_acting(token("rita"), thread="ghost")
            if args[0] in ("answer", "abandon")
        ),
        ("export", "finished", "-o", str(tmp_path / "no" / "dir.jsonl"), "--store", url),
        *(
            ("import", str(tmp_path / name), "--store", url)
            for name in ("missing.jsonl", "empty.jsonl", "binary.jsonl", ".")
        ),
    ]
    before = listing(tmp_path)
    for args in cases:
        result = run(*args, env={"EMPTY_KEY": ""})
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert len(result.stderr.splitlines()) == 1, (args, result.stderr)
        assert "Traceback" not in result.stderr, args
        assert listing(tmp_path) == before, args


@pytest.mark.parametrize(
    ("option", "value"),
    [
        *[("--after", "-1"), ("--after", str(2**63)), ("--after", str(-(10**30)))],
        *[("--limit", "0"), ("--limit", "-1"), ("--limit", str(10**30))],
    ],
)
def test_a_page_option_out_of_range_is_refused_naming_the_option_and_the_range(
    tmp_path: Path, option: str, value: str
) -> None:
    """``threads --after -1`` said "after must be a whole number from 0 to ..., found a
    value of type int": the option was named as the library's argument, and the reason
    given (its type) was the one thing right (helper-242)."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    open_store(url).close()
    result = run("threads", option, value, "--store", url)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert option in line or f"{option[2:]}={value}" in line, line
    assert "of type" not in line, line


def test_a_mistyped_sqlite_path_is_named_and_not_created(tmp_path: Path) -> None:
    """A reading command on a missing SQLite file names it and leaves no file there."""
    missing = tmp_path / "mistyped.db"
    result = run("threads", "--store", f"sqlite:///{missing}")
    assert result.returncode == 2
    assert f"there is no SQLite file {str(missing)!r}" in result.stderr
    assert not missing.exists()


def test_a_database_that_is_not_a_store_gets_no_store_tables(url: str, tmp_path: Path) -> None:
    """Reading, deciding and forking on another application's SQLite file refuse it in
    one line and leave its tables as they were; a reading command leaves its journal's
    mode as it was too, and an empty file empty."""
    foreign = tmp_path / "foreign.db"
    with contextlib.closing(sqlite3.connect(foreign)) as connection, connection:
        connection.execute("CREATE TABLE notes (text TEXT)")
    empty = tmp_path / "empty.db"
    empty.touch()
    deciding = ("approve", "r", "--reviewer-token", "t")
    reading = [("threads",), ("reviews",), ("show", "a"), ("history", "a"), ("export", "a")]
    reading += [("tree", "a"), ("replay", "a", "--verify"), ("migrate", "--check")]
    for args in (*reading, ("fork", "a"), deciding):
        result = run(*args, "--store", f"sqlite:///{foreign}")
        assert result.returncode == 2, (args, result.stderr)
        assert "expected a covonaut-es store" in result.stderr
        with contextlib.closing(sqlite3.connect(foreign)) as connection:
            tables = connection.execute("SELECT name FROM sqlite_master").fetchall()
            (mode,) = connection.execute("PRAGMA journal_mode").fetchone()
        assert tables == [("notes",)], args
        if args in reading:  # a reader writes nothing, not even the journal's mode
            assert mode == "delete", args
            result = run(*args, "--store", f"sqlite:///{empty}")
            assert result.returncode == 2, (args, result.stderr)
            assert "expected a covonaut-es store" in result.stderr
            assert empty.stat().st_size == 0, args


@pytest.mark.parametrize("follow", [(), ("--follow",)], ids=["once", "follow"])
def test_a_view_that_is_no_database_is_refused_in_one_line(
    url: str, tmp_path: Path, follow: tuple[str, ...]
) -> None:
    """``reviews --view`` naming a text file or a directory: exit 2, one line naming
    the view's file, no traceback; the file is left as it was."""
    text = tmp_path / "view.db"
    text.write_text("not a database\n")
    for view, said in ((text, "is not a SQLite database"), (tmp_path, "is a directory")):
        result = run("reviews", *follow, "--store", url, "--view", f"sqlite:///{view}")
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert said in result.stderr and str(view) in result.stderr
    assert text.read_text() == "not a database\n"


def test_listing_reviews_leaves_the_store_file_unchanged(url: str, tmp_path: Path) -> None:
    """reviews builds its one-shot queue in memory: the store's file keeps its bytes."""
    before = listing(tmp_path)
    result = run("reviews", "--json", "--store", url)
    assert result.returncode == 0, result.stderr
    assert [row["thread_id"] for row in json.loads(result.stdout)] == ["payment"]
    assert listing(tmp_path) == before


def test_hostile_text_never_reaches_human_output_raw(url: str, tmp_path: Path) -> None:
    """Control characters and newlines from messages, tool arguments and results, labels
    and thread ids (stored, or given on the command line) come out as visible escapes in every
    command's human output; --json carries them exactly."""
    outputs = []
    for args in (
        ("threads",),
        ("reviews",),
        ("show", "finished"),
        ("show", "payment"),
        ("history", "finished"),
        ("replay", "finished", "--verify"),
        ("replay", "payment"),
        ("tree", "finished"),
        ("fork", "finished", "--at", "3", "--as", "retry"),
        ("abandon", "retry", "--reason", HOSTILE, "--reviewer-token", token("rita")),
        ("show", HOSTILE),
        ("tree", HOSTILE),
        ("history", HOSTILE),
        ("replay", HOSTILE),
    ):
        result = run(*args, "--store", url)
        assert result.returncode in (0, 2), (args, result.stderr)
        outputs.append(result.stdout + result.stderr)
    assert printable(HOSTILE) in outputs[0]  # the forged thread id, listed escaped
    for output in outputs:
        for raw in RAW_BYTES:
            assert raw not in output, (raw, output)
    shown = json.loads(run("show", "finished", "--json", "--store", url).stdout)
    assert HOSTILE in strings(shown)  # JSON stays exact


def strings(value: object) -> set[str]:
    """Every string in a decoded JSON value."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        value = list(value.values())
    found: set[str] = set()
    if isinstance(value, list):
        found.update(*map(strings, value))
    return found


def test_printable_escapes_every_control_and_keeps_plain_text() -> None:
    """C0, C1, DEL, bidirectional overrides and line separators become escapes; letters,
    accents, emoji and spaces stay as they are."""
    assert printable("\x1b[2J\x07\r\n\t\x85\x9b\x7f\u202e\u2028") == (
        "\\x1b[2J\\x07\\r\\n\\t\\x85\\x9b\\x7f\\u202e\\u2028"
    )
    assert printable("Grüße, 世界 😀 a b") == "Grüße, 世界 😀 a b"


BLANKS = "\u115f\u1160\u3164\uffa0\u2800\u034f\u17b4\u180b\ufe0f\U000e0100\u2065\ufff0"
"""Characters Python calls printable that show nothing: Hangul fillers, the Braille
blank, default-ignorable marks, reserved default-ignorable code points."""


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.sampled_from(BLANKS)
        | st.characters(categories=("Cc", "Cf", "Zs", "Zl", "Zp", "Co", "Cn"))
        | st.characters(codec="utf-8"),
        max_size=12,
    ).map("".join)
)
def test_what_shows_nothing_is_escaped_in_text_and_json(text: str) -> None:
    """Text and JSON shown to a person hold no character that shows nothing (ASCII's
    space aside), nor a private-use or unassigned one, and the JSON holds the same
    value."""
    for shown in (printable(text), json_printable(json.dumps(text, ensure_ascii=False))):
        assert all(char == " " or (char.isprintable() and not shows_nothing(char))
                   for char in shown), shown  # fmt: skip
    assert json.loads(json_printable(json.dumps(text, ensure_ascii=False))) == text
    assert printable("bob\u3164\u2800\u00a0") == "bob\\u3164\\u2800\\xa0"


def test_a_cipher_key_without_the_encryption_extra_names_the_extra(url: str) -> None:
    """Without the cryptography package an encrypted store's command prints one line
    naming the extra to install."""
    without_cryptography = (
        "import sys; sys.modules['cryptography'] = None; "  # as if it were not installed
        "from covonaut_es.cli import main; raise SystemExit(main())"
    )
    result = run(
        *("threads", "--store", url, "--cipher-key-env", "KEY"),
        env={"KEY": create_cipher_key()},
        program=("-c", without_cryptography),
    )
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert "pip install 'covonaut-es[encryption]'" in line


def test_importing_an_empty_file_says_nothing_to_import(url: str, tmp_path: Path) -> None:
    """An empty export is an error naming the problem, not an empty table."""
    result = run("import", "--store", url, stdin="\n")
    assert (result.returncode, result.stdout) == (2, "")
    assert "nothing to import" in result.stderr


def test_exporting_one_event_says_event_not_events(url: str, tmp_path: Path) -> None:
    """The export's summary agrees in number with its count."""
    with open_store(url) as store:
        store.fork("finished", at_version=1, new_thread_id="one")
    target = tmp_path / "one.jsonl"
    result = run("export", "one", "--without-ancestors", "-o", str(target), "--store", url)
    assert result.returncode == 0, result.stderr
    assert [json.loads(line).get("trailer") for line in target.read_text().splitlines()] == [
        None,
        "covonaut-es export 1",
    ]
    assert result.stderr == f"exported 1 event of 'one' to {target}\n"


def test_a_fork_taken_mid_run_shows_idle_not_running(url: str) -> None:
    """No process runs a fresh fork, so one branched mid-run is idle until it runs."""
    with open_store(url) as store:
        assert store.state_at("finished", 3).status.value == "running"
        store.fork("finished", at_version=3, new_thread_id="branch")
    rows = json.loads(run("threads", "--json", "--store", url).stdout)
    assert {row["thread_id"]: row["status"] for row in rows}["branch"] == "idle"
    assert "status           idle" in run("show", "branch", "--store", url).stdout.splitlines()


def follower(url: str, *extra: str) -> subprocess.Popen[str]:
    """``reviews --follow`` running on ``url``, its first listing already read.

    It starts with Ctrl-C's default disposition, as a terminal's foreground job does:
    a suite run as a background job (``make test &``) has SIGINT ignored, the child
    would inherit that, and Python, rightly, keeps ignoring it."""
    process = subprocess.Popen(
        [sys.executable, "-m", "covonaut_es", "reviews", "--follow", "--store", url, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert process.stdout is not None
    assert process.stdout.readline()
    return process


def test_ctrl_c_ends_reviews_follow_quietly_with_130(url: str) -> None:
    """Ctrl-C on reviews --follow exits 130 without a traceback."""
    process = follower(url)
    try:
        process.send_signal(signal.SIGINT)
        # Generous: closing waits a few seconds for each pool's connections in use, and
        # a loaded machine stretches that; a hung follower must not outlive the test.
        _, stderr = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert (process.returncode, stderr) == (130, "")


def test_a_closed_pipe_ends_reviews_follow_quietly(url: str) -> None:
    """reviews --follow --json | head: when the reader goes, the command ends without
    a traceback."""
    process = follower(url, "--json")
    assert process.stdout is not None
    process.stdout.close()
    with open_store(url) as store:
        ThreadService(store).abandon("payment")  # the queue changes: the follower prints again
    assert process.stderr is not None
    with process.stderr:
        stderr = process.stderr.read()
    assert process.wait(timeout=30) == 141
    assert stderr == ""


def _commands_taking_a_cipher_key() -> list[str]:
    from covonaut_es.cli._app import build_parser

    subcommands = next(
        action
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    return sorted(
        name
        for name, parser in subcommands.choices.items()
        if any("--cipher-key-env" in action.option_strings for action in parser._actions)
    )


@pytest.mark.parametrize(
    "key",
    [
        create_cipher_key(),
        # Keys that could be a variable's name: base64 of 24 bytes without '+' or '/'
        # (29% of them), and hex beginning with a letter.
        "Et3qU1W97H7OdGKX0pJ19d0Bv8alBhsp",
        "d" + "0123456789abcdef" * 3 + "0123456789abcde",
    ],
    ids=["base64", "base64-like-a-name", "hex-like-a-name"],
)
@pytest.mark.parametrize("option", ["--cipher-key-env", "--chain-key-env"])
@pytest.mark.parametrize("command", _commands_taking_a_cipher_key())
def test_a_key_given_in_place_of_its_variables_name_is_never_shown(
    command: str,
    option: str,
    key: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An operator who passes the cipher or chain key itself to ``--cipher-key-env`` or
    ``--chain-key-env`` is told the option takes a variable's name, or that the variable
    it names is not set, and the key is printed nowhere, whatever it looks like."""
    monkeypatch.setenv("COVONAUT_ES_REVIEWER_SECRET", SECRET)
    store = f"sqlite:///{tmp_path / 'store.db'}"
    argv = [command, "--store", store, option, key]
    arguments = [
        part.replace("TOKEN", token("rita")) for part in REQUIRED_ARGUMENTS.get(command, ())
    ]
    status = main([*argv, *arguments])
    printed = capsys.readouterr()
    assert status == 2, printed
    assert (
        f"{option} takes the name of an environment variable" in printed.err
        or f"the environment variable {option} names is not set" in printed.err
    )
    assert key not in printed.out + printed.err
    assert key[:12] not in printed.out + printed.err


# What each command needs besides the store options, so that it reaches the key.
REQUIRED_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "show": ("t",), "history": ("t",), "replay": ("t",), "tree": ("t",), "export": ("t",),
    "fork": ("t", "--at", "1"), "import": (str(ROOT / "README.md"),),
    "approve": ("r", "--reviewer-token", "TOKEN"),
    "reject": ("r", "--reason", "no", "--reviewer-token", "TOKEN"),
    "respond": ("r", "--answer", "done", "--reviewer-token", "TOKEN"),
    "answer": ("t", "c", "--answer", "yes", "--reviewer-token", "TOKEN"),
    "settle": ("t", "c", "--result", "ran", "--reviewer-token", "TOKEN"),
    "abandon": ("t", "--reviewer-token", "TOKEN"), "retry": ("t", "--reviewer-token", "TOKEN"),
    "migrate": ("--check",), "worker": ("--app", "os:getcwd"),
}  # fmt: skip


@pytest.mark.parametrize(
    "problem",
    ["not json", "unknown topic", "renamed thread"],
)
def test_a_failed_import_leaves_no_store_where_there_was_none(
    url: str, tmp_path: Path, problem: str
) -> None:
    """An import into a SQLite file that does not exist yet, refused for any reason,
    creates no file (nor its journal): a failed import creates nothing."""
    good = run("export", "finished", "--store", url).stdout.splitlines()
    first = json.loads(good[0])
    if problem == "not json":
        lines = [*good[:2], "{not json"]
    elif problem == "unknown topic":
        lines = [*good[:1], json.dumps({**json.loads(good[1]), "topic": "os:system"})]
    else:
        lines = [json.dumps({**json.loads(line), "thread_id": "Q"}) for line in good]
    assert first["version"] == 1
    target = tmp_path / "new.db"
    result = run("import", "--store", f"sqlite:///{target}", stdin="\n".join(lines) + "\n")
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("new.db")) == []


NO_TEXT_IDS = st.builds(
    lambda head, junk: head + junk.decode("utf-8", "surrogateescape"),
    st.text(st.characters(codec="ascii", categories=("L", "N")), max_size=3),
    # No NUL: no process can be given one in an argument.
    st.binary(min_size=1, max_size=3).filter(lambda b: not is_utf8(b) and b"\0" not in b),
)


@settings(
    max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(thread=NO_TEXT_IDS)
def test_a_thread_id_of_bytes_that_are_no_utf8_is_refused_in_one_line(
    url: str, tmp_path: Path, thread: str
) -> None:
    """Every command that takes a thread id, given one whose bytes are no UTF-8 (as a
    shell passes them): exit 2, one line naming it, no traceback, no file changed."""
    review = review_of(url)
    acting = ("--reviewer-token", token("rita"))
    commands: list[tuple[str, ...]] = [
        *((command, thread) for command in ("show", "history", "tree", "export")),
        ("replay", thread), ("replay", thread, "--verify"),
        ("fork", thread), ("fork", "finished", "--as", thread),
        ("answer", thread, "c1", "--answer", "yes", *acting),
        ("settle", thread, "c1", "--result", "paid", *acting),
        ("abandon", thread, "--reason", "gone", *acting),
        ("retry", thread, *acting),
        ("approve", review, "--thread", thread, *acting),
    ]  # fmt: skip
    before = listing(tmp_path)
    for args in commands:
        result = run(*args, "--store", url)  # passed to the process as the bytes
        assert result.returncode == 2, (args, result.stderr)
        assert len(result.stderr.splitlines()) == 1, (args, result.stderr)
        assert "Traceback" not in result.stderr, args
    assert listing(tmp_path) == before


def as_a_user(*args: str) -> subprocess.CompletedProcess[str]:
    """``run``, as a user the file permissions apply to: root without the capabilities
    that override them (util-linux's setpriv, as Debian has it), anyone else as is."""
    if os.geteuid() != 0:
        return run(*args)
    drop = ("--bounding-set", "-dac_override,-dac_read_search")
    return run(*args, program=(*drop, "--", sys.executable, "-m", "covonaut_es"), via="setpriv")


READERS_OF_A_READ_ONLY_FILE = [
    ("show", "finished"),
    ("history", "finished"),
    ("export", "finished"),
    ("migrate", "--check"),
    ("reviews",),
    ("reviews", "--json"),
    ("reviews", "--view", "memory://one-shot"),
]
"""Commands that only read the store, each of which reads a file this user may not
write, opened without ``?mode=ro``."""


def test_a_read_only_store_file_is_read_and_each_refusal_advises_by_its_url(
    url: str, tmp_path: Path
) -> None:
    """A store file this user may only read: every reading command reads it (the
    one-shot ``reviews`` too, which keeps its queue in memory). ``threads``, which would
    make its table of summaries, is refused advising ``?mode=ro``, which the URL lacked;
    ``reviews --follow`` with ``?mode=ro`` is refused naming ``--view``, not the
    library's ``view_url=``. The file keeps its bytes."""
    path = Path(url.removeprefix("sqlite:///"))
    path.chmod(0o444)
    before = path.read_bytes()
    try:
        for args in READERS_OF_A_READ_ONLY_FILE:
            result = as_a_user(*args, "--store", url)
            assert result.returncode == 0, (args, result.stderr)
        threads = as_a_user("threads", "--store", url)
        listed = as_a_user("threads", "--store", f"{url}?mode=ro")
        follow = as_a_user("reviews", "--follow", "--store", f"{url}?mode=ro")
    finally:
        path.chmod(0o644)
    assert threads.returncode == 2, threads.stderr
    assert "add ?mode=ro to the URL" in threads.stderr, threads.stderr
    assert "without ?mode=ro" not in threads.stderr
    assert listed.returncode == 0, listed.stderr
    assert follow.returncode == 2, follow.stderr
    assert "--view URL" in follow.stderr and "view_url" not in follow.stderr, follow.stderr
    assert len(follow.stderr.splitlines()) == 1, follow.stderr
    assert path.read_bytes() == before


def test_a_store_on_read_only_media_is_read_and_an_unreadable_one_named(
    url: str, tmp_path: Path
) -> None:
    """A store copied into a directory no one may write to reads with ``?mode=ro``; a
    file this user may not read is named as such (exit 2), not as no SQLite database."""
    media = tmp_path / "media"
    media.mkdir()
    shutil.copyfile(url.removeprefix("sqlite:///"), media / "threads.db")
    unreadable = tmp_path / "unreadable.db"
    shutil.copyfile(url.removeprefix("sqlite:///"), unreadable)
    (media / "threads.db").chmod(0o444)
    media.chmod(0o555)
    unreadable.chmod(0)
    try:
        listed = as_a_user("threads", "--store", f"sqlite:///{media / 'threads.db'}?mode=ro")
        assert listed.returncode == 0, listed.stderr
        assert "finished" in listed.stdout
        refused = as_a_user("threads", "--store", f"sqlite:///{unreadable}")
        assert refused.returncode == 2, refused.stderr
        assert "cannot be opened" in refused.stderr and "not a SQLite" not in refused.stderr
    finally:
        media.chmod(0o755)
        unreadable.chmod(0o644)
    assert sorted(p.name for p in media.iterdir()) == ["threads.db"]  # nothing written


def test_an_output_file_stopped_while_written_leaves_no_copy_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command stopped while it writes its ``--output`` (Ctrl-C, SIGTERM, which the
    command line raises as an exception) removes the hidden file it was writing: an
    export's is the thread's whole history, decrypted."""
    target = tmp_path / "out.jsonl"

    def stopped(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", stopped)
    with pytest.raises(KeyboardInterrupt):
        write_output(str(target), "the history\n")
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_while_the_arguments_are_read_exits_130_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Ctrl-C that comes while ``main`` builds its parser or reads the line (a cold
    start imports every command's module) is exit status 130, as one that comes while
    the command runs: it escaped ``main`` as a traceback (helper-233)."""
    from covonaut_es.cli import _app

    real = _app.build_parser

    def interrupted_parser() -> argparse.ArgumentParser:
        parser = real()

        def parse_args(*args: object, **kwargs: object) -> argparse.Namespace:
            raise KeyboardInterrupt  # Ctrl-C here, as it may come at any bytecode

        parser.parse_args = parse_args  # type: ignore[method-assign]
        return parser

    monkeypatch.setattr(_app, "build_parser", interrupted_parser)
    assert main(["threads", "--store", "memory://"]) == 130
