"""The covonaut-es command line: ``migrate --check`` in a real subprocess."""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import pty
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import AgentThread, create_cipher_key, open_store
from covonaut_es._text import printable, shown_escaped
from covonaut_es.audit import check_store, format_report
from covonaut_es.cli import main
from covonaut_es.cli._app import build_parser
from covonaut_es.errors import NotAStoreError
from covonaut_es.runtime import HmacReviewerVerifier
from support import append_raw_event, converse, raw_in

ROOT = Path(__file__).resolve().parent.parent


def covonaut_es(
    *args: str,
    env: dict[str, str] | None = None,
    stderr: int = subprocess.PIPE,
    stdout: int = subprocess.PIPE,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m covonaut_es`` with this checkout's sources."""
    return subprocess.run(
        [sys.executable, "-m", "covonaut_es", *args],
        stdout=stdout,
        stderr=stderr,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})},
        check=False,
    )


def exit_status_in(directory: Path, args: list[str]) -> object:
    """The exit status of the command line run in-process with ``args`` in ``directory``
    (argparse's refusals exit through SystemExit)."""
    cwd = Path.cwd()
    os.chdir(directory)
    try:
        with pytest.raises(SystemExit) as exit_:
            raise SystemExit(main(args))
    finally:
        os.chdir(cwd)
    return exit_.value.code


def fingerprint(url: str) -> object:
    """Everything the store holds, read behind the library's back."""
    if url.startswith("sqlite"):
        return Path(url.removeprefix("sqlite:///")).read_bytes()
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT (SELECT array_agg(md5(state) ORDER BY notification_id) FROM covonaut_events),"
            " (SELECT array_agg(md5(state)) FROM covonaut_snapshots)"
        ).fetchone()


def test_a_clean_store_exits_0_and_prints_the_counts(shared_url: str) -> None:
    """On a store where everything upgrades the check exits 0 and prints a row per
    type and stored version."""
    with open_store(shared_url) as store:
        converse(store, "a")
    result = covonaut_es("migrate", "--check", "--store", shared_url)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Checked ") and lines[0].endswith("; nothing was written.")
    assert any(
        line.split()[:4] == ["AgentThread.StartedWithInput", "v1", "v1", "1"] for line in lines
    )
    assert any(line.split()[:3] == ["StateDocument", "v2", "v2"] for line in lines)
    assert lines[-1].startswith("OK: all ")
    assert result.stderr == ""  # not a terminal: no progress bar


def test_the_check_imports_no_module_a_stored_topic_names(shared_url: str, tmp_path: Path) -> None:
    """``migrate --check`` is what an operator runs before an upgrade: a row naming an
    importable module is reported as an unknown type, and the module is never imported."""
    probe = tmp_path / "probe_module"
    probe.mkdir()
    imported = tmp_path / "imported"
    (probe / "planted_topic.py").write_text(f"open({str(imported)!r}, 'w').close()\n")
    with open_store(shared_url) as store:
        converse(store, "a")
        append_raw_event(store, "a", "planted_topic:Event", b"{}")
    result = covonaut_es(
        "migrate", "--check", "--store", shared_url, env={"PYTHONPATH": f"{ROOT / 'src'}:{probe}"}
    )
    assert result.returncode == 1
    assert "planted_topic:Event" in result.stdout and "unknown to this store" in result.stdout
    assert not imported.exists()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topic=st.text(min_size=1, max_size=20))
def test_the_checks_report_shows_stored_text_escaped(topic: str) -> None:
    """Whatever text a stored row holds reaches the report as one escaped line: no
    escape sequence, newline or bidirectional override reaches the terminal."""
    with open_store("memory://") as store:
        converse(store, "a")
        append_raw_event(store, "a", topic, "\x1b[2J\n\u202e".encode())
        lines = list(format_report(check_store(store), source="the store"))
    assert all(printable(line) == line for line in lines), lines
    assert sum("schema v" in line for line in lines) == 1  # the failure, on one line


def test_a_corrupt_and_a_too_new_record_exit_non_zero_naming_both(shared_url: str) -> None:
    """A damaged record and one from newer code are reported by thread and version,
    and the exit status is 1; the store is left exactly as it was."""
    with open_store(shared_url) as store:
        converse(store, "a")
        converse(store, "b")
        corrupt = append_raw_event(store, "a", AgentThread.TurnStarted.TOPIC, b"{broken")
        newer = msgspec.json.encode({"timestamp": "2026-01-01T00:00:00Z", "turn": 9, "_v": 7})
        too_new = append_raw_event(store, "b", AgentThread.TurnStarted.TOPIC, newer)
    before = fingerprint(shared_url)

    result = covonaut_es("migrate", "--dry-run", "--store", shared_url)
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert f"thread 'a', event {corrupt} (AgentThread.TurnStarted, schema v?): Serialization" in out
    assert f"thread 'b', event {too_new} (AgentThread.TurnStarted, schema v7): NewerSchema" in out
    assert out.splitlines()[-1].startswith("FAILED: 2 of ")
    assert fingerprint(shared_url) == before


def test_encrypted_and_compressed_stores_are_read_with_their_key(tmp_path: Path) -> None:
    """--cipher-key-env and --compressed open the store as the application does;
    without the key the check says the store is encrypted, in one line."""
    url = f"sqlite:///{tmp_path / 'secret.db'}"
    key = create_cipher_key()
    with open_store(url, cipher_key=key, compress=True) as store:
        converse(store, "a")
    options = ["--cipher-key-env", "APP_KEY", "--compressed"]
    keyed = covonaut_es("migrate", "--check", "--store", url, *options, env={"APP_KEY": key})
    assert keyed.returncode == 0, keyed.stdout + keyed.stderr
    keyless = covonaut_es("migrate", "--check", "--store", url)
    assert keyless.returncode == 2
    assert "is encrypted: pass its key. It was opened without a cipher key" in keyless.stderr


READING_COMMANDS = (
    ("threads",),
    ("reviews",),
    ("workers",),
    ("show", "a"),
    ("history", "a"),
    ("replay", "a"),
    ("replay", "--verify", "a"),
    ("tree", "a"),
    ("export", "a"),
    ("migrate", "--check"),
)


@pytest.mark.parametrize("given", ["no key", "another key"])
@pytest.mark.parametrize("command", READING_COMMANDS, ids=" ".join)
def test_every_reading_command_says_an_encrypted_store_needs_its_key(
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: tuple[str, ...],
    given: str,
) -> None:
    """Opened without its key, or with another, an encrypted store is refused at open
    in one line that says so, on every command that only reads, instead of every
    record seeming corrupt; nothing is read and no key is shown."""
    url = _encrypted_store(tmp_path_factory)
    options: list[str] = []
    if given == "another key":
        other = create_cipher_key()
        monkeypatch.setenv("OTHER_KEY", other)
        options = ["--cipher-key-env", "OTHER_KEY"]
    status = main([command[0], "--store", url, *options, *command[1:]])
    printed = capsys.readouterr()
    assert status == 2, printed
    expected = "pass the key it was created with"
    assert printed.err.count("\n") == 1 and expected in printed.err, printed.err
    assert printed.out == ""


WRITING_COMMANDS = (
    ("fork", "a", "--at", "2"),
    ("abandon", "a", "--reason", "gone"),
    ("approve", "0" * 32),
    ("reviews", "--follow"),
    ("import", str(Path(__file__).parent / "fixtures" / "golden" / "v4-export" / "thread.jsonl")),
    ("serve", "--port", "0"),
    ("worker", "--app", "json:loads", "--once"),
)


@pytest.mark.parametrize("command", WRITING_COMMANDS, ids=lambda c: c[0])
def test_every_writing_command_says_an_encrypted_store_needs_its_key(
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: tuple[str, ...],
) -> None:
    """Opened without its key to write, serve or run workers, an encrypted store is
    refused in one line that says to pass its key, and nothing is written."""
    url = _encrypted_store(tmp_path_factory)
    secret = "s" * 32
    monkeypatch.setenv("COVONAUT_ES_REVIEWER_SECRET", secret)
    token = HmacReviewerVerifier(secret.encode()).issue_token("alice", ttl_seconds=60)
    needs_token = command[0] in ("abandon", "approve")
    before = Path(url.removeprefix("sqlite:///")).read_bytes()
    status = main(
        [command[0], "--store", url, *command[1:], *(("--reviewer-token", token) * needs_token)]
    )
    printed = capsys.readouterr()
    assert status == 2, printed
    assert printed.err.count("\n") == 1, printed.err
    assert "is encrypted: pass its key" in printed.err
    assert printed.out == ""
    assert Path(url.removeprefix("sqlite:///")).read_bytes() == before


def test_a_compressed_store_is_read_and_written_without_compressed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every reading command, ``fork`` and ``import`` open a compressed (and encrypted)
    store as it records, without ``--compressed``; ``--compressed`` on a plain store is
    refused in one line."""
    key = create_cipher_key()
    monkeypatch.setenv("APP_KEY", key)
    url = f"sqlite:///{tmp_path / 'packed.db'}"
    with open_store(url, cipher_key=key, compress=True) as store:
        converse(store, "a")
    options = ["--store", url, "--cipher-key-env", "APP_KEY"]
    golden = str(Path(__file__).parent / "fixtures" / "golden" / "v4-export" / "thread.jsonl")
    for command in (
        *READING_COMMANDS,
        ("fork", "a", "--at", "2", "--as", "b"),
        ("import", golden, "--allow-untrailed"),
    ):
        status = main([command[0], *options, *command[1:]])
        printed = capsys.readouterr()
        assert status == 0, (command, printed.err)
    with open_store(url, cipher_key=key, compress=True) as store:
        assert store.state_at("b").version == 3
        assert store.verify("golden-export").ok
    plain = f"sqlite:///{tmp_path / 'plain.db'}"
    with open_store(plain, compress=False) as store:
        converse(store, "a")
    assert main(["threads", "--store", plain, "--compressed"]) == 2
    assert "pass compress='none'" in capsys.readouterr().err


@functools.cache
def _encrypted_store_in(directory: Path) -> str:
    directory.mkdir()
    url = f"sqlite:///{directory / 'secret.db'}"
    with open_store(url, cipher_key=create_cipher_key()) as store:
        converse(store, "a")
    return url


def _encrypted_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _encrypted_store_in(tmp_path_factory.getbasetemp() / "encrypted")


def test_named_state_files_are_checked_with_states(tmp_path: Path) -> None:
    """--states DIR checks a directory of named states along with the store."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        converse(store, "a")
        document = store.read_state("a")
    (tmp_path / "states").mkdir()
    (tmp_path / "states" / "old.json").write_bytes(msgspec.json.encode({**document, "_v": 0}))
    result = covonaut_es("migrate", "--check", "--store", url, "--states", str(tmp_path / "states"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert any(line.split()[:2] == ["StateDocument", "v0"] for line in result.stdout.splitlines())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["migrate", "--store", "sqlite:///x.db"], "required: --check/--dry-run"),
        (["migrate", "--check"], "no store"),
        (["migrate", "--check", "--store", "sqlite:///missing.db"], "no SQLite file"),
        (["migrate", "--check", "--store", "redis://x"], "is not understood"),
        (["migrate", "--check", "--store", "memory://", "--states", "nowhere"], "not a directory"),
        (
            ["migrate", "--check", "--store", "memory://", "--cipher-key-env", "UNSET_KEY_VAR"],
            "not set",
        ),
        ([], "required: COMMAND"),
    ],
)
def test_usage_errors_exit_2_and_create_nothing(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad arguments or an unopenable store exit 2 with a message, writing nothing."""
    os.environ.pop("UNSET_KEY_VAR", None)
    assert exit_status_in(tmp_path, args) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_postgres_database_without_tables_is_not_written(postgres_database: str) -> None:
    """Checking a database that has no covonaut tables exits 2 and creates none."""
    result = covonaut_es("migrate", "--check", "--store", postgres_database)
    assert result.returncode == 2
    assert result.stderr.startswith("covonaut-es migrate: ")
    with psycopg.connect(postgres_database) as conn:
        tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        assert tables.fetchall() == []


def _subcommands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command the program runs, by the words that reach it, and its parser."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = list(_subcommands(sub, (*words, name)))
                yield from nested or [(" ".join((*words, name)), sub)]


def _escaped_words() -> st.SearchStrategy[str]:
    """A word a command line can carry holding a character a terminal must not get raw
    (an escape sequence's ESC, DEL, a C1 control, a bidirectional override, a byte that
    is no UTF-8); no space, which argparse never reads as an option."""
    plain = st.text(st.characters(exclude_characters="\x00 "), max_size=6)
    shown = st.characters(exclude_characters="\x00 ").filter(shown_escaped)
    return st.tuples(plain, shown | st.sampled_from(["\udcff", "\udc80"]), plain).map("".join)


def _words_refused_by_argparse(
    command: str, parser: argparse.ArgumentParser, word: str, option: int
) -> list[list[str]]:
    """Command lines of ``command`` that argparse refuses while quoting ``word``: as an
    option no parser knows, and as the value of the ``option``-th (modulo their number)
    of its options that take one, given after a space (so taken for an option)."""
    words = command.split()
    taking = [a.option_strings[-1] for a in parser._actions if a.option_strings and a.nargs != 0]
    lines = [[*words, f"-{word}"], [*words, f"--{word}"]]
    if taking:
        lines.append([*words, taking[option % len(taking)], f"-{word}"])
    return lines


@pytest.mark.parametrize(("command", "parser"), list(_subcommands(build_parser())))
@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(word=_escaped_words(), option=st.integers(min_value=0, max_value=99))
def test_a_usage_error_shows_every_word_it_quotes_escaped(
    command: str,
    parser: argparse.ArgumentParser,
    word: str,
    option: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Property: whatever a refused command line holds, every command's usage error
    (argparse's, and the advice on a word read as an option) reaches the terminal with
    every control, format or undecodable character escaped, one line per message. The
    advice to write ``OPTION=VALUE`` printed the value raw (a DEL, found in CI)."""
    for line in _words_refused_by_argparse(command, parser, word, option):
        with pytest.raises(SystemExit) as refused:
            main(line)
        captured = capsys.readouterr()
        assert refused.value.code == 2 and captured.out == "", line
        assert ": error: " in captured.err.splitlines()[-1], (line, captured.err)
        assert not raw_in(captured.err), line


@pytest.mark.parametrize(("command", "parser"), list(_subcommands(build_parser())))
def test_every_command_names_itself_in_its_errors(
    command: str, parser: argparse.ArgumentParser
) -> None:
    """Every command's errors begin ``covonaut-es COMMAND:``, those it reports and those
    argparse does, an argument left over included: ``migrate`` began its own with
    ``covonaut-es:``, and a word no parser took was reported by the program's parser,
    which names no command."""
    assert parser.prog == parser.get_default("error_prefix") == f"covonaut-es {command}"
    assert parser.get_default("subcommand_parser") is parser


@pytest.mark.postgres
@pytest.mark.parametrize("command", [["threads"], ["reviews"], ["show", "t"], ["export", "t"]])
def test_a_postgresql_database_that_holds_no_store_is_said_to_hold_none(
    postgres_database: str, command: list[str]
) -> None:
    """A reading command on a PostgreSQL database without a store's tables (a new one,
    a misspelt name) says the database holds no store, in one line, exit 2: it said its
    tables were changed around the library, to be restored (helper-223); the library's
    open without creating tables raises the same."""
    result = covonaut_es(*command, "--store", postgres_database)
    assert result.returncode == 2, result.stderr
    assert "holds no store (no table 'covonaut_events' in schema 'public')" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and "restore" not in result.stderr
    with pytest.raises(NotAStoreError, match="holds no store"):
        open_store(postgres_database, create_tables=False)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["migrate", "--check", "--store", "sqlite:///missing.db"],
            "covonaut-es migrate: store sqlite:///missing.db: there is no SQLite file "
            "'missing.db' to open; check its name",
        ),
        (
            ["threads", "--store", "sqlite:///missing.db"],
            "covonaut-es threads: store sqlite:///missing.db: there is no SQLite file "
            "'missing.db' to open; check its name",
        ),
        (
            ["threads", "--store", "memory://", "surplus"],
            "covonaut-es threads: error: unrecognized arguments: surplus",
        ),
        (
            ["token", "issue", "--reviewer", "a", "--ttl", "60", "surplus"],
            "covonaut-es token issue: error: unrecognized arguments: surplus",
        ),
    ],
)
def test_an_error_names_the_command_and_the_store_once(
    args: list[str], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``migrate`` reports a store it cannot open as every command does, naming the
    store once (it printed "covonaut-es: cannot read store X: store X: ..."), and a
    word left over is reported by the command it was given to."""
    assert exit_status_in(tmp_path, args) == 2
    assert capsys.readouterr().err.splitlines()[-1] == line


@pytest.mark.parametrize(
    "args", [["--help"], ["--version"], ["threads", "--help"], ["token", "issue", "--help"]]
)
def test_help_and_the_version_into_a_closed_pipe_exit_141(args: list[str]) -> None:
    """Help and the version written into a pipe whose reader went away end as every
    command's output does, with 141 and nothing on stderr: they exited 0."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        result = covonaut_es(*args, stdout=writer)
    finally:
        os.close(writer)
    assert (result.returncode, result.stderr) == (141, "")


def test_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    """With stderr on a terminal the check draws a progress bar there; stdout keeps the
    report."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        converse(store, "a")
    terminal, child_end = pty.openpty()
    try:
        result = covonaut_es("migrate", "--check", "--store", url, stderr=child_end)
        os.close(child_end)
        drawn = read_all(terminal)
    finally:
        os.close(terminal)
    assert result.returncode == 0
    assert "\r[##############################] " in drawn and "records" in drawn
    assert "[#" not in result.stdout


def read_all(descriptor: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(descriptor, 4096)
        except OSError:  # EIO: the terminal's other end is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_the_console_script_entry_point_resolves() -> None:
    """pyproject's [project.scripts] covonaut-es names covonaut_es.cli:main."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, name = scripts["covonaut-es"].partition(":")
    target: Callable[..., int] = getattr(importlib.import_module(module), name)
    assert target is main


def test_the_module_runs_as_a_program() -> None:
    """python -m covonaut_es --help describes the command and its subcommands."""
    result = covonaut_es("--help")
    assert result.returncode == 0
    assert "migrate" in result.stdout


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"PERSISTENCE_MODULE": "bogus.module"}, "bogus.module"),
        ({"PERSISTENCE_MODULE": "eventsourcing"}, "infrastructure factory"),
        ({"PERSISTENCE_MODULE": "eventsourcing.postgres"}, "POSTGRES_DBNAME"),
    ],
)
def test_an_application_its_settings_cannot_make_is_one_line_and_exit_2(
    settings: dict[str, str], named: str
) -> None:
    """``--application`` whose persistence settings in the environment are wrong (a typo
    of the module, a missing database name) says which, in one line, exit 2, no
    traceback."""
    result = covonaut_es(
        "threads", env={"COVONAUT_ES_APPLICATION": "covonaut_es:AgentApplication", **settings}
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert "could not be made" in result.stderr and named in result.stderr


@pytest.mark.parametrize(
    "command",
    [
        *[["threads"], ["show", "t"], ["export", "t"], ["import", "t.jsonl"]],
        *[["migrate", "--check"], ["reviews"], ["replay", "t", "--verify"], ["fork", "t"]],
    ],
    ids=" ".join,
)
def test_an_application_its_environment_keeps_in_memory_is_refused(
    command: list[str], tmp_path: Path
) -> None:
    """``--application`` whose environment names no persistence is eventsourcing's
    default, an application in this process's memory: an ``import`` into it said
    IMPORTED and kept nothing, ``migrate --check`` passed having read nothing
    (helper-252). Every command refuses it in one line, exit 2, naming the setting."""
    (tmp_path / "t.jsonl").write_text("{}\n")  # read only once the store is open
    env = {k: v for k, v in os.environ.items() if "PERSISTENCE_MODULE" not in k}
    env["COVONAUT_ES_APPLICATION"] = "covonaut_es:AgentApplication"
    result = subprocess.run(
        [sys.executable, "-m", "covonaut_es", *command],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT / "src")},
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert "in this process's memory" in line and "PERSISTENCE_MODULE" in line, line


@pytest.mark.parametrize(
    ("typed", "meant"), [("--jsno", "--json"), ("--limt=3", "--limit"), ("--stor", "--store")]
)
def test_a_mistyped_option_is_named_with_the_option_it_is_close_to(
    typed: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A long option that is a typo of one the command takes gets that option as the
    hint, not the advice about ids that begin with '-'."""
    with pytest.raises(SystemExit) as exited:
        main(["threads", typed, "--store", "memory://"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"did you mean {meant}?" in err and "after '--'" not in err


def test_sigterm_stops_a_command_after_its_clean_ups_with_exit_143(tmp_path: Path) -> None:
    """``SIGTERM`` (``timeout``, ``docker stop``) stops a command as Ctrl-C does: no
    traceback, its clean-ups run, and the exit status says the signal (143)."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    open_store(url).close()
    following = subprocess.Popen(
        [sys.executable, "-m", "covonaut_es", "reviews", "--follow", "--store", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    try:
        time.sleep(3)  # it follows the log
        following.send_signal(signal.SIGTERM)
        _, err = following.communicate(timeout=60)
    finally:
        following.kill()
    assert following.returncode == 143, err
    assert "Traceback" not in err
