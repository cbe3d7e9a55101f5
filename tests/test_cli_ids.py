"""Ids and texts that begin with ``-`` on the command line: a thread id, a call id, a
review id or a fork's id may begin with a dash (the domain allows it, and a model or an
import can give one), and so may a reason or an answer. Every command that takes one
reaches it (an id after ``--`` at the end, an option's value as ``OPTION=VALUE``), and
a command where the dash was taken for an option says so, names the token and shows
the two forms, and records nothing."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    InterruptError,
    ScriptedProvider,
    Store,
    ThreadStatus,
    Tool,
    ToolContext,
    open_store,
)
from covonaut_es.cli import main
from covonaut_es.domain import check_thread_id
from covonaut_es.service import ThreadService
from support import answer, call

SECRET = secrets.token_hex(32)


@attrs.frozen
class Ran:
    """What one command printed, and its exit status."""

    status: int
    out: str
    err: str


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A SQLite store whose every thread and call id begins with a dash: ``-x``
    finished, ``-ask`` paused on ``-a1``, ``-charge`` in doubt on ``-c1``, ``-pay``
    waiting for a review of ``-p1`` and ``-failed`` after a failed run."""
    monkeypatch.setenv("COVONAUT_ES_REVIEWER_SECRET", SECRET)
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        _run(store, "-x", [answer("hi")])

        def ask(ctx: ToolContext, args: dict[str, Any]) -> Any:
            raise InterruptError("Which account?", {})

        _run(store, "-ask", [call(("-a1", "ask", "{}"))], Tool("ask", "Ask", {}, ask))

        def crash(ctx: ToolContext, args: dict[str, Any]) -> Any:
            raise _Crash

        with pytest.raises(_Crash):
            _run(store, "-charge", [call(("-c1", "charge", "{}"))], Tool("charge", "C", {}, crash))
        ThreadService(store).pause_calls_in_doubt("-charge", "its runner died")
        pay = Tool("pay", "Pay", {}, lambda c, a: "paid", requires_approval=True)
        _run(store, "-pay", [call(("-p1", "pay", '{"amount": 7}'))], pay)

        def down(request: Any) -> Any:
            msg = "the model is down"
            raise RuntimeError(msg)

        with pytest.raises(Exception, match="down"):
            Agent(
                AgentConfig(
                    provider=ScriptedProvider(respond=down),
                    checkpoint=CheckpointSettings(store=store, thread_id="-failed"),
                )
            ).run("Hello.")
        assert store.state_at("-failed").status is ThreadStatus.ERROR
    yield url


class _Crash(BaseException):
    """Stands for the death of the runner's process inside a tool."""


def _run(store: Store, thread_id: str, script: list[Any], *tools: Tool) -> None:
    Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=list(tools),
            reviewer_verifier=HmacReviewerVerifier(SECRET.encode()),
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
        )
    ).run("Go.")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> Ran:
    """``covonaut-es ARGS`` in this process; a usage error of argparse exits too."""
    capsys.readouterr()
    try:
        status = main(list(args))
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 2
    captured = capsys.readouterr()
    return Ran(status, captured.out, captured.err)


def versions(url: str) -> dict[str, int]:
    with open_store(url) as store:
        return {thread_id: store.state_at(thread_id).version for thread_id in store.thread_ids()}


def review_id(url: str) -> str:
    with open_store(url) as store:
        (review,) = store.state_at("-pay").reviews
    return review.request.review_id


def token() -> str:
    return HmacReviewerVerifier(SECRET.encode()).issue_token("rita", ttl_seconds=600)


Check = Callable[[Any, str], None]


def _thread_is(thread_id: str) -> Check:
    def check(printed: Any, url: str) -> None:
        assert printed["thread_id"] == thread_id

    return check


def _status_of(thread_id: str, waiting_for: str) -> Check:
    def check(printed: Any, url: str) -> None:
        assert (printed["thread_id"], printed["waiting_for"]) == (thread_id, waiting_for)

    return check


def _rows_of(thread_id: str) -> Check:
    def check(printed: Any, url: str) -> None:
        assert printed and {row["thread_id"] for row in printed} == {thread_id}

    return check


def _events(printed: Any, url: str) -> None:
    assert printed["events"][0]["thread_id"] == "-x"


def _forked(printed: Any, url: str) -> None:
    assert (printed["thread_id"], printed["parent_thread_id"]) == ("-x~f", "-x")


def _decided(decision: str) -> Check:
    def check(printed: Any, url: str) -> None:
        assert (printed["thread_id"], printed["decision"]) == ("-pay", decision)

    return check


def _exported(printed: Any, url: str) -> None:
    assert printed["thread_id"] == "-x"


def _token_of(printed: Any, url: str) -> None:
    assert HmacReviewerVerifier(SECRET.encode()).verify(printed) == "-bob"


REVIEW = "{review}"
"""Stands for the review id of ``-pay`` in the cases below."""

# For each command that takes an id: the line as one would first type it (the dash
# taken for an option), the token argparse took for one, the line that reaches the id,
# and what it must print.
CASES: dict[str, tuple[tuple[str, ...], str, tuple[str, ...], Check]] = {
    "show": (("show", "-x"), "-x", ("show", "--json", "--", "-x"), _thread_is("-x")),
    "history": (("history", "-x"), "-x", ("history", "--json", "--", "-x"), _rows_of("-x")),
    "replay": (("replay", "-x"), "-x", ("replay", "--json", "--", "-x"), _events),
    "tree": (("tree", "-x"), "-x", ("tree", "--json", "--", "-x"), _thread_is("-x")),
    "export": (("export", "-x"), "-x", ("export", "--", "-x"), _exported),
    "fork": (
        ("fork", "--as", "-x~f", "--", "-x"),
        "-x~f",
        ("fork", "--json", "--as=-x~f", "--", "-x"),
        _forked,
    ),
    "approve": (
        ("approve", REVIEW, "--thread", "-pay"),
        "-pay",
        ("approve", "--json", "--thread=-pay", "--comment=-ok", "--", REVIEW),
        _decided("approved"),
    ),
    "reject": (
        ("reject", REVIEW, "--reason", "-no"),
        "-no",
        ("reject", "--json", "--reason=-no", "--", REVIEW),
        _decided("rejected"),
    ),
    "respond": (
        ("respond", REVIEW, "--answer", "-yes"),
        "-yes",
        ("respond", "--json", "--answer=-yes", "--thread=-pay", "--", REVIEW),
        _decided("responded"),
    ),
    "answer": (
        ("answer", "-ask", "-a1", "--answer", "yes"),
        "-ask",
        ("answer", "--json", "--answer=-yes", "--", "-ask", "-a1"),
        _status_of("-ask", "worker"),
    ),
    "settle": (
        ("settle", "-charge", "-c1", "--result", "paid"),
        "-charge",
        ("settle", "--json", "--result=-paid", "--", "-charge", "-c1"),
        _status_of("-charge", "worker"),
    ),
    "abandon": (
        ("abandon", "-ask", "--reason", "gone"),
        "-ask",
        ("abandon", "--json", "--reason=-gone", "--", "-ask"),
        _status_of("-ask", ""),
    ),
    "retry": (
        ("retry", "-failed"),
        "-failed",
        ("retry", "--json", "--", "-failed"),
        _status_of("-failed", "worker"),
    ),
    "token issue": (
        ("token", "issue", "--reviewer", "-bob", "--ttl", "60"),
        "-bob",
        ("token", "issue", "--reviewer=-bob", "--ttl", "60"),
        _token_of,
    ),
}

_ACTING = {"approve", "reject", "respond", "answer", "settle", "abandon", "retry"}


def _filled(args: tuple[str, ...], command: str, url: str, *, after_options: bool) -> list[str]:
    """``args`` with the review id, the store and the token; the options go before a
    ``--`` (after it they would be ids), else at the end as one would type them."""
    filled = [review_id(url) if arg == REVIEW else arg for arg in args]
    extra = [] if command == "token issue" else ["--store", url]
    if command in _ACTING:
        extra += ["--reviewer-token", token()]
    if "--" in filled and after_options:
        at = filled.index("--")
        return [*filled[:at], *extra, *filled[at:]]
    words = len(command.split())
    return [*filled[:words], *extra, *filled[words:]] if "--" in filled else [*filled, *extra]


def test_every_id_the_commands_take_may_begin_with_a_dash() -> None:
    """The domain allows thread ids (and so fork ids) that begin with ``-``."""
    assert check_thread_id("-x") == "-x"
    assert check_thread_id("--y") == "--y"


@pytest.mark.parametrize("command", sorted(CASES))
def test_a_dash_taken_for_an_option_is_named_with_the_forms_that_reach_it(
    command: str, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Typed plainly, an id or text that begins with ``-`` is read as an option: the
    command exits 2 with a message that names the token and shows ``--`` and
    ``OPTION=VALUE``, and records nothing."""
    typed, token_taken, _, _ = CASES[command]
    before = versions(url)
    ran = run(capsys, *_filled(typed, command, url, after_options=False))
    assert ran.status == 2, ran
    last = ran.err.splitlines()[-1]
    assert f"{token_taken!r} was read as" in last or f"{token_taken!r} and" in last, last
    assert "after '--' at the end" in last or f"={token_taken}" in last, last
    assert versions(url) == before


@pytest.mark.parametrize("command", sorted(CASES))
def test_every_command_that_takes_an_id_reaches_one_that_begins_with_a_dash(
    command: str, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """After ``--`` (ids) and as ``OPTION=VALUE`` (ids and texts given to options), a
    leading dash is part of the value: each command acts on the thread it names."""
    _, _, reaching, check = CASES[command]
    ran = run(capsys, *_filled(reaching, command, url, after_options=True))
    assert ran.status == 0, ran
    if command == "export":
        printed: Any = json.loads(ran.out.splitlines()[0])
    elif command == "token issue":
        printed = ran.out.strip()
    else:
        printed = json.loads(ran.out)
    check(printed, url)
