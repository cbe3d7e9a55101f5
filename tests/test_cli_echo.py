"""Nothing the command line is given, or finds, reaches the terminal raw: a file's or a
store's name, a host, an exception's text in a log line. Each is shown with every
character :func:`~covonaut_es._text.shown_escaped` names as an escape, one message
one line (helper-196 found five ways past it)."""

from __future__ import annotations

import importlib
import io
import logging
import os
import pkgutil
import shutil
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import covonaut_es
from covonaut_es import _logs, open_store
from covonaut_es._text import shown_escaped
from covonaut_es.cli import main
from covonaut_es.cli._command import UsageError
from covonaut_es.cli._names import name_threads
from covonaut_es.cli._serve import escape_server_logs, listening_on
from covonaut_es.domain import AgentThread
from support import raw_in

_NOW = datetime(2026, 1, 1, tzinfo=UTC)

UNDECODABLE = st.sampled_from(["\udc80", "\udc9b", "\udcff"])
"""Characters a byte that is no UTF-8 decodes to in a name or an argument."""


def names() -> st.SearchStrategy[str]:
    """A file name holding a character a terminal must not get raw, and maybe a quote
    or a backslash (a ``repr`` or an escape Python does not know, ``\\N``)."""
    plain = st.text(st.characters(exclude_characters="\x00/", codec="utf-8"), max_size=5)
    shown = st.characters(exclude_characters="\x00/", codec="utf-8").filter(shown_escaped)
    quoted = st.sampled_from(["", "thread '", "'", "\\N", "\\x"])
    return st.tuples(quoted, plain, shown | UNDECODABLE, plain, quoted).map("".join)


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'threads.db'}"
    with open_store(url) as store:
        store.save(AgentThread.start("t", now=_NOW))
    return url


COMMANDS = [
    ["export", "t", "--output", "{name}"],
    ["import", "{name}"],
    ["migrate", "--check", "--states", "{name}"],
    ["migrate", "--check", "--store", "sqlite:///{name}.db"],  # a copy of the store
    ["threads", "--store", "sqlite:///{name}"],
    ["show", "t", "--store", "sqlite:///{name}.db"],
    ["reviews", "--view", "sqlite:///{name}"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:3]))
@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=names())
def test_a_command_shows_a_name_it_was_given_escaped(
    tmp_path: Path,
    store_url: str,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    name: str,
) -> None:
    """Property: a file's, a folder's or a store's name on the command line, whatever
    it holds, comes back escaped in what the command prints, success or refusal, and
    never as a traceback. ``export --output`` printed the file's name raw, a store's
    URL or a folder's name in ``migrate --check`` was printed raw, and a name reading
    like ``thread '\\N'`` made the error's report raise."""
    folder = tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    path = str(folder / name)
    if "--states" in command:
        os.mkdir(path)
    elif command[0] == "migrate":
        shutil.copy(store_url.removeprefix("sqlite:///"), f"{path}.db")
    line = [word.format(name=path) for word in command]
    if "--store" not in line:
        line += ["--store", store_url]
    try:
        status = main(line)
    except SystemExit as exit_:  # an argparse refusal
        status = exit_.code
    captured = capsys.readouterr()
    assert status in (0, 1, 2), (line, captured.err)
    assert not raw_in(captured.out + captured.err), (line, captured)


@given(
    message=st.lists(
        st.text(max_size=8) | st.sampled_from(["thread '", 'thread "', "'", "\\N", "\\x"]),
        max_size=8,
    ).map("".join)
)
def test_an_error_naming_threads_never_fails_on_what_it_quotes(message: str) -> None:
    """Property: putting thread ids in place of their stream ids never raises, whatever
    text reads like ``thread 'ID'`` in the message."""
    import argparse

    assert isinstance(name_threads(message, argparse.Namespace(thread=None)), str)


def _loggers() -> list[logging.Logger]:
    """Every logger a module of the package keeps (each module imported, but the one
    that runs the command line)."""
    found: list[logging.Logger] = []
    for module in pkgutil.walk_packages(covonaut_es.__path__, "covonaut_es."):
        if module.name.endswith("__main__"):
            continue
        loaded = importlib.import_module(module.name)
        found += [v for v in vars(loaded).values() if isinstance(v, logging.Logger)]
    return found


def test_every_logger_of_the_package_makes_its_records_one_escaped_line() -> None:
    """Each module's logger is made by ``_logs.logger``: a filter sees only its own
    logger's records, and ``store._writer`` made its own, so its warnings went out raw."""
    loggers = _loggers()
    assert loggers
    for log in loggers:
        assert _logs._ONE_LINE in log.filters, log.name


class UnformattableError(RuntimeError):
    """An exception whose attributes raise what ``traceback`` does not expect (one
    that looks its attributes up in a dict)."""

    def __getattr__(self, name: str) -> object:
        raise KeyError(name)


@settings(max_examples=30, deadline=None)
@given(
    text=st.text(max_size=12) | st.just("\x1b]0;PWNED\x07\x1b[2J\n2026-01-01 INFO forged"),
    argument=st.text(max_size=12),
    with_stack=st.booleans(),
    formats=st.booleans(),
    foreign=st.booleans(),
    failing=st.sampled_from([RuntimeError, UnformattableError]),
)
def test_a_logged_record_shows_only_escaped_text_and_keeps_its_exception(
    text: str,
    argument: str,
    with_stack: bool,
    formats: bool,
    foreign: bool,
    failing: type[RuntimeError],
) -> None:
    """Property: a record of a package logger, or of another library's logger through a
    handler the command line escapes, is written as its message, its traceback and its
    stack, one escaped line each, and keeps its exception for handlers that read it; a
    message whose arguments do not format is written, not raised at the call. The
    traceback was written as it came (a provider's error body holding an escape sequence
    and a newline forged a log line), and only the package's loggers were escaped (an
    MCP SDK's record under ``covonaut-es worker`` quoted a server raw); nor is a
    traceback that does not format (an exception whose attributes raise, helper-198)."""
    written = io.StringIO()
    handler = logging.StreamHandler(written)
    if foreign:
        log = logging.getLogger("some.sdk")
        _logs.escape_handlers(handler)
    else:
        log = _logs.logger("covonaut_es.test_echo")
    kept: list[logging.LogRecord] = []
    log.addHandler(handler)
    log.addHandler(KeptRecords(kept))
    try:
        try:
            raise failing(text)
        except RuntimeError:
            template = "failed %s: %r" if formats else "failed %s: %r %d"
            log.warning(template, argument, text, exc_info=True, stack_info=with_stack)
    finally:
        log.removeHandler(handler)
        log.handlers.clear()
    lines = written.getvalue().splitlines()
    assert len(lines) == 2 + with_stack, lines
    assert not raw_in(written.getvalue()) and failing.__name__ in lines[1], lines
    assert kept[0].exc_info is not None and isinstance(kept[0].exc_info[1], failing)


def test_a_worker_escapes_what_its_application_logs_while_it_is_imported(
    tmp_path: Path,
) -> None:
    """``covonaut-es worker`` sets its escaping handler up before it imports the
    application: a module-level ``logging.warning`` in it (an SDK's) made a root handler
    of logging's own, which nothing escaped (helper-198)."""
    (tmp_path / "noisy_app.py").write_text(
        "import logging\n"
        "logging.warning('imported \\x1b]0;owned\\x07 \\u2028forged')\n"
        "from pauses_app import make_config\n"
    )
    store = f"sqlite:///{tmp_path / 'threads.db'}"
    open_store(store).close()
    tests = Path(__file__).resolve().parent
    command = [sys.executable, "-m", "covonaut_es", "worker", "--app", "noisy_app:make_config"]
    ran = subprocess.run(
        [*command, "--once", "--store", store],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(tmp_path), str(tests), str(tests.parent / "src")]),
        },
    )
    assert ran.returncode == 0, ran.stderr
    assert "imported \\x1b]0;owned" in ran.stderr and not raw_in(ran.stderr), ran.stderr


class KeptRecords(logging.Handler):
    def __init__(self, kept: list[logging.LogRecord]) -> None:
        super().__init__()
        self.kept = kept

    def emit(self, record: logging.LogRecord) -> None:
        self.kept.append(record)


def test_uvicorns_coloured_lines_keep_their_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    """uvicorn's coloured server log fills a record's ``color_message`` from its
    arguments: once escaped, the record has its message whole and no such template
    (``Started server process [%d]`` printed its ``%d``, helper-197)."""
    import uvicorn

    uvicorn.Config(app=None, use_colors=True)  # sets uvicorn's logging up
    escape_server_logs()
    logging.getLogger("uvicorn.error").info(
        "Started server process [%d]", 4321, extra={"color_message": "Started [%d] \x1b[36m"}
    )
    said = capsys.readouterr().err
    assert "Started server process [4321]" in said and "%d" not in said, said


@settings(max_examples=20, deadline=None)
@given(
    host=st.tuples(
        st.text(st.characters(codec="ascii", exclude_characters="\x00"), max_size=4),
        st.sampled_from(["\x85", "\x9b", "\u202e"]) | UNDECODABLE,
    ).map("".join)
)
def test_serve_refuses_a_host_no_name_can_be_in_one_typed_error(host: str) -> None:
    """Property: a host holding a character no host name can (a C1 control, a byte that
    is no UTF-8) is refused as the command's usage error naming it, not a traceback
    (``socket.bind`` raises TypeError for a name it cannot encode)."""
    with pytest.raises(UsageError, match="cannot listen on"):
        listening: socket.socket = listening_on(host, 0)
        listening.close()
