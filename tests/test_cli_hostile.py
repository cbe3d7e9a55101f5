"""The command line under hostile input: numbers out of range and generated ids of
threads that do not exist get exit status 2 and one line naming the problem, with no
traceback, and the store's file is left as it was."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import ScriptedProvider, open_store
from covonaut_es.cli import main
from covonaut_es.runtime import Agent, AgentConfig, CheckpointSettings
from support import answer

SECRET = secrets.token_hex(32)


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A SQLite store with one finished thread, ``t``."""
    monkeypatch.setenv("COVONAUT_ES_REVIEWER_SECRET", SECRET)
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        config = AgentConfig(
            provider=ScriptedProvider([answer("hi")]),
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
        )
        Agent(config).run("Hello.")
    yield url


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Exit status and stderr of ``covonaut-es ARGS`` in this process."""
    capsys.readouterr()
    try:
        status = main(list(args))
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 2
    return status, capsys.readouterr().err


def file_of(url: str) -> bytes:
    return Path(url.removeprefix("sqlite:///")).read_bytes()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("serve", "--port", "99999"), "--port must be a TCP port"),
        (("serve", "--port", "-1"), "--port must be a TCP port"),
        (("serve", "--port", str(2**64)), "--port must be a TCP port"),
        (("serve", "--port", "http"), "invalid int value"),
        (("serve", "--max-connections", "0"), "--max-connections needs"),
        (("serve", "--max-connections-per-client", "-3"), "--max-connections-per-client needs"),
        (("serve", "--request-timeout", "nan"), "--request-timeout needs"),
        (("serve", "--request-timeout", "0"), "--request-timeout needs"),
        (("serve", "--request-timeout", "inf"), "--request-timeout needs"),
        (
            ("worker", "--app", "pauses_app:make_config", "--concurrency", "0", "--once"),
            "at least 1",
        ),
        (
            ("worker", "--app", "pauses_app:make_config", "--concurrency", "-1", "--once"),
            "at least 1",
        ),
        (("token", "issue", "--reviewer", "rita", "--ttl", "nan"), "token's lifetime"),
        (("token", "issue", "--reviewer", "rita", "--ttl", "1e400"), "token's lifetime"),
        (("token", "issue", "--reviewer", "rita", "--ttl", "-5"), "token's lifetime"),
        (("fork", "--at", "-1", "t"), "cannot be forked at version -1"),
        (("fork", "--at", "999", "t"), "cannot be forked at version 999"),
        (("fork", "--at", "1.5", "t"), "invalid int value"),
    ],
)
def test_numbers_out_of_range_are_refused_in_one_line(
    url: str, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], named: str
) -> None:
    """A port, a connection limit, a timeout, a concurrency, a lifetime or a version no
    command can use: exit 2, the
    option named, no traceback, the store unchanged."""
    store = () if args[0] == "token" else ("--store", url)
    before = file_of(url)
    status, err = run(capsys, *args[:1], *store, *args[1:])
    assert status == 2, err
    assert named in err.splitlines()[-1], err
    assert "Traceback" not in err
    assert file_of(url) == before


THREAD_IDS = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40).filter(
    lambda thread_id: thread_id != "t"
)


@pytest.mark.parametrize("command", ["show", "history", "replay", "tree", "export"])
def test_a_generated_id_of_no_thread_is_refused_in_one_line(
    url: str, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """Any text as a thread id (controls, dashes, quotes, 200+ characters): exit 2 with
    one line, its control characters escaped, and the store unchanged."""
    before = file_of(url)

    @settings(
        max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(thread_id=THREAD_IDS)
    def refused(thread_id: str) -> None:
        status, err = run(capsys, command, "--store", url, "--", thread_id)
        assert status == 2, (thread_id, err)
        assert len(err.splitlines()) == 1, (thread_id, err)
        assert "not found" in err or "thread id" in err, err
        assert err.rstrip("\n").isprintable(), err
        assert file_of(url) == before

    refused()


REVIEW_IDS = st.text(st.characters(exclude_categories=()), min_size=1, max_size=40).filter(
    lambda review_id: not review_id.startswith("-")
)
"""Any text, lone surrogates included: what argv decodes a byte that is not UTF-8 to."""


@pytest.mark.parametrize("command", ["approve", "reject", "respond"])
def test_a_generated_id_of_no_review_is_refused_in_one_line(
    url: str, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """Any text as a review id, without ``--thread``: exit 2 with one line saying no such
    review, its characters escaped, and nothing recorded."""
    capsys.readouterr()
    assert main(["token", "issue", "--reviewer", "rita", "--ttl", "3600"]) == 0
    token = capsys.readouterr().out.strip()
    with open_store(url) as store:
        before = store._records.log_position()
    extra = {"reject": ("--reason", "no"), "respond": ("--answer", "no")}.get(command, ())

    @settings(
        max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(review_id=REVIEW_IDS)
    def refused(review_id: str) -> None:
        args = (command, "--store", url, "--reviewer-token", token, *extra, "--", review_id)
        status, err = run(capsys, *args)
        assert status == 2, (review_id, err)
        assert len(err.splitlines()) == 1, (review_id, err)
        assert "no review" in err, err
        assert err.rstrip("\n").isprintable(), err

    refused()
    with open_store(url) as store:
        assert store._records.log_position() == before
