"""The ``covonaut-es`` command line, run as a real process for every command."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ScriptedProvider,
    Tool,
    open_store,
)
from covonaut_es.cli import main
from covonaut_es.service import ThreadService
from covonaut_es.store._dictionary import ZstdDictionaryCompressor
from hostile_text import no_token_character
from support import answer, call, echo_tool, review_tool

SECRET = secrets.token_hex(32)


def covonaut(*args: str, store: str | None = None, stdin: str | None = None) -> Any:
    """Run the installed console script (``python -m covonaut_es`` if it is missing)."""
    script = shutil.which("covonaut-es", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "covonaut_es"]
    env = {**os.environ, "COVONAUT_ES_REVIEWER_SECRET": SECRET}
    if store:
        env["COVONAUT_ES_STORE"] = store
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, env=env, input=stdin, timeout=120
    )


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A SQLite store with a finished thread, a paused one and a review request."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        script = [call(("c1", "echo", '{"text": "hi"}')), answer("done")]
        Agent(
            AgentConfig(
                provider=ScriptedProvider(script),
                tools=[echo_tool()],
                checkpoint=CheckpointSettings(store=store, thread_id="finished"),
            )
        ).run("go")
        Agent(
            AgentConfig(
                provider=ScriptedProvider([call(("r1", "review", "{}"))]),
                tools=[review_tool()],
                checkpoint=CheckpointSettings(store=store, thread_id="paused"),
            )
        ).run("go")
        pay = Tool("pay", "Pay", {"type": "object"}, lambda c, a: "paid", requires_approval=True)
        Agent(
            AgentConfig(
                provider=ScriptedProvider([call(("p1", "pay", '{"amount": 7}'))]),
                tools=[pay],
                reviewer_verifier=HmacReviewerVerifier(SECRET.encode()),
                checkpoint=CheckpointSettings(store=store, thread_id="payment"),
            )
        ).run("pay 7")
    return url


def review_id(url: str) -> str:
    with open_store(url) as store:
        (review,) = store.state_at("payment").reviews
    return review.request.review_id


def token(reviewer: str) -> str:
    return HmacReviewerVerifier(SECRET.encode()).issue_token(reviewer, ttl_seconds=600)


def test_threads_lists_status_turns_activity_and_reviews(url: str) -> None:
    """threads: a table by default, JSON with --json; the store may come from the env;
    each thread says whom it waits for."""
    table = covonaut("threads", store=url)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == [
        "THREAD",
        "STATUS",
        "TURNS",
        "LAST_ACTIVITY",
        "PENDING_REVIEWS",
        "WAITING_FOR",
    ]
    rows = json.loads(covonaut("threads", "--json", "--store", url).stdout)
    shown = {r["thread_id"]: (r["status"], r["pending_reviews"], r["waiting_for"]) for r in rows}
    assert shown == {
        "finished": ("finished", 0, ""),
        "paused": ("interrupted", 1, "person"),
        "payment": ("interrupted", 1, "person"),
    }


def test_show_history_and_replay(url: str) -> None:
    """show, history and replay read one thread; replay --verify reports it intact."""
    shown = covonaut("show", "paused", store=url)
    assert "interrupted" in shown.stdout and "human review required" in shown.stdout
    assert json.loads(covonaut("show", "paused", "--json", store=url).stdout)["status"] == (
        "interrupted"
    )
    history = covonaut("history", "finished", store=url).stdout.splitlines()
    assert history[1].split()[0] == "1" and "Started" in history[1]
    replayed = covonaut("replay", "finished", "--verify", store=url)
    assert replayed.returncode == 0
    assert "answered: done" in replayed.stdout and "intact" in replayed.stdout
    report = json.loads(covonaut("replay", "finished", "--verify", "--json", store=url).stdout)
    assert report["verify"]["ok"] is True


def test_replay_verify_fails_on_tampering(url: str) -> None:
    """replay --verify exits 1 and names the version of an altered record."""
    import sqlite3

    db = url.removeprefix("sqlite:///")
    compressor = ZstdDictionaryCompressor()  # the store's: its dictionary is public
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT originator_version, state FROM stored_events").fetchall()
        (version, state), *_ = (row for row in rows if b"done" in compressor.decompress(row[1]))
        altered = compressor.decompress(state).replace(b"done", b"DONE")
        conn.execute(
            "UPDATE stored_events SET state = ? WHERE originator_version = ?",
            (compressor.compress(altered), version),
        )
    result = covonaut("replay", "finished", "--verify", store=url)
    assert result.returncode == 1
    assert f"version {version}: hash chain broken" in result.stdout


def test_reviews_then_approve_and_reject(url: str) -> None:
    """reviews lists the queue; approve and reject decide from the command line."""
    listed = json.loads(covonaut("reviews", "--json", store=url).stdout)
    assert {(r["thread_id"], r["tool_name"]) for r in listed} == {
        ("paused", "review"),
        ("payment", "pay"),
    }
    review = review_id(url)
    decided = covonaut("approve", review, "--reviewer-token", token("ann"), "--json", store=url)
    assert decided.returncode == 0, decided.stderr
    row = json.loads(decided.stdout)
    assert (row["decision"], row["reviewer"], row["thread_id"]) == ("approved", "ann", "payment")
    again = covonaut(
        "reject", review, "--reviewer-token", token("bob"), "--reason", "no", store=url
    )
    assert again.returncode == 2 and "already" in again.stderr
    listed = json.loads(covonaut("reviews", "--json", store=url).stdout)
    assert [r["thread_id"] for r in listed] == ["paused"]


@pytest.mark.parametrize(
    "decision",
    [("approve",), ("reject", "--reason", "no"), ("respond", "--answer", "paid already")],
    ids=["approve", "reject", "respond"],
)
def test_a_reviewer_token_from_a_variable_decides_as_the_token_given(
    url: str, monkeypatch: pytest.MonkeyPatch, decision: tuple[str, ...]
) -> None:
    """``--reviewer-token-env VAR`` reads the token from the environment, so that no
    other local user reads it in the command line (``ps``): the decision is the same as
    with ``--reviewer-token``, recorded as the token's reviewer (helper-200)."""
    monkeypatch.setenv("ANN_TOKEN", token("ann") + "\n")  # as a file read into it ends
    command, *options = decision
    review = review_id(url)
    decided = covonaut(
        command, review, "--reviewer-token-env", "ANN_TOKEN", *options, "--json", store=url
    )
    assert decided.returncode == 0, decided.stderr
    row = json.loads(decided.stdout)
    assert (row["reviewer"], row["thread_id"]) == ("ann", "payment")
    assert review not in {
        r["review_id"] for r in json.loads(covonaut("reviews", "--json", store=url).stdout)
    }


@pytest.mark.parametrize(
    "given",
    ["a variable not set", "an empty variable", "the token in the variable's place", "both"],
)
def test_a_reviewer_token_variable_that_gives_no_token_is_refused_unshown(
    url: str, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    """``--reviewer-token-env`` naming a variable that is not set or is empty, the token
    itself given in the variable's name's place, or both token options at once: exit 2
    with an error that never shows the token, in one line (after the usage, for both),
    and nothing is decided."""
    issued = token("ann")
    monkeypatch.setenv("EMPTY_TOKEN", "")
    monkeypatch.delenv("NO_TOKEN", raising=False)
    options = {
        "a variable not set": ("--reviewer-token-env", "NO_TOKEN"),
        "an empty variable": ("--reviewer-token-env", "EMPTY_TOKEN"),
        "the token in the variable's place": ("--reviewer-token-env", issued),
        "both": ("--reviewer-token-env", "EMPTY_TOKEN", "--reviewer-token", issued),
    }[given]
    refused = covonaut("approve", review_id(url), *options, store=url)
    assert refused.returncode == 2, refused.stderr
    if given == "both":  # argparse's usage error: the usage, then the error's line
        assert "not allowed with argument" in refused.stderr.splitlines()[-1]
    else:
        assert len(refused.stderr.splitlines()) == 1, refused.stderr
    assert issued not in refused.stderr and issued.split(".")[1] not in refused.stderr
    assert len(json.loads(covonaut("reviews", "--json", store=url).stdout)) == 2


def test_reviews_follow_prints_new_items(url: str) -> None:
    """reviews --follow keeps running and prints the queue when it changes."""
    env = {**os.environ, "COVONAUT_ES_STORE": url}
    follower = subprocess.Popen(
        [sys.executable, "-m", "covonaut_es", "reviews", "--follow", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert follower.stdout is not None
        first = json.loads(follower.stdout.readline())
        assert len(first) == 2
        with open_store(url) as store:
            ThreadService(store).abandon("paused")
        second = json.loads(follower.stdout.readline())
        assert [r["thread_id"] for r in second] == ["payment"]
    finally:
        follower.send_signal(signal.SIGTERM)
        follower.wait(timeout=10)
        if follower.stdout:
            follower.stdout.close()


def _following(url: str) -> subprocess.Popen[str]:
    """``reviews --follow --json`` on ``url``, its first listing (two items) read."""
    follower = subprocess.Popen(
        [sys.executable, "-m", "covonaut_es", "reviews", "--follow", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COVONAUT_ES_STORE": url},
    )
    assert follower.stdout is not None
    assert len(json.loads(follower.stdout.readline())) == 2
    return follower


def test_reviews_follow_stops_in_one_line_once_its_sqlite_file_is_damaged(url: str) -> None:
    """The store's file damaged past its first page while ``reviews --follow`` runs: it
    exits 2 with one line saying so, instead of waiting, for ever, for a database that
    answers (helper-231: it took the damage for an outage that passes)."""
    path = Path(url.removeprefix("sqlite:///"))
    follower = _following(url)
    try:
        with closing(sqlite3.connect(path, isolation_level=None)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        with path.open("r+b") as file:
            file.seek(4096)
            file.write(b"\xff" * (path.stat().st_size - 4096))
        with closing(sqlite3.connect(path, isolation_level=None)) as conn:
            conn.execute("CREATE TABLE after_the_damage (x)")  # a new event for the log
        _, stderr = follower.communicate(timeout=60)
    finally:
        follower.kill()
        follower.wait(timeout=10)
    assert follower.returncode == 2, stderr
    assert "is damaged" in stderr and len(stderr.splitlines()) == 1, stderr


def test_reviews_follow_stops_in_one_line_once_its_sqlite_file_is_replaced(
    url: str, tmp_path: Path
) -> None:
    """A backup restored over the store's file while ``reviews --follow`` runs: it exits
    nonzero with one line naming the file, instead of listing the old file's queue for
    ever."""
    path = Path(url.removeprefix("sqlite:///"))
    shutil.copyfile(path, tmp_path / "backup.db")
    follower = _following(url)
    try:
        os.replace(tmp_path / "backup.db", path)
        _, stderr = follower.communicate(timeout=60)
    finally:
        follower.kill()
        follower.wait(timeout=10)
    assert follower.returncode not in (0, None)
    assert "Traceback" not in stderr, stderr
    assert f"the SQLite file {str(path)!r} was replaced" in stderr, stderr


@pytest.mark.parametrize(
    "decision",
    [
        ("approve",),
        ("approve", "--arguments", "[1]", "--digest", "sha256:x"),
        ("reject", "--reason", " "),
        ("respond", "--answer", "\u3164"),
    ],
    ids=["approve", "approve, bad edit and digest", "reject, blank reason", "respond, blank"],
)
def test_a_bad_token_is_refused_first_and_records_nothing(url: str, decision: tuple[str]) -> None:
    """A decision with a forged token exits 2 naming the token, whatever else it holds,
    and the review stays pending: the reviewer is verified before the submission is
    read, as on every other surface (the command told an unverified caller what was
    wrong with a blank reason; helper-120)."""
    forged = HmacReviewerVerifier(secrets.token_bytes(32)).issue_token("eve", ttl_seconds=60)
    command, *options = decision
    result = covonaut(command, review_id(url), *options, "--reviewer-token", forged, store=url)
    assert result.returncode == 2
    assert "signature does not match" in result.stderr, result.stderr
    assert len(json.loads(covonaut("reviews", "--json", store=url).stdout)) == 2


@settings(
    max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@example(spoil=("approve", "signature", "\udcff"))
@example(spoil=("answer", "claims", "\udcff"))
@given(
    spoil=st.tuples(
        st.sampled_from(["approve", "answer"]),
        st.sampled_from(["claims", "signature"]),
        no_token_character(argv=True),
    )
)
def test_a_token_with_a_byte_no_token_holds_is_refused_in_one_line(
    url: str, spoil: tuple[str, str, str]
) -> None:
    """Property: ``--reviewer-token`` with a byte that is no UTF-8 (a lone surrogate in
    Python's argv), a control, a space or a non-ASCII letter in its claims or its
    signature exits 2 in one line, and decides nothing: it was a UnicodeEncodeError
    traceback, exit 1 (helper-158)."""
    command, part, char = spoil
    claims, signature = token("alice").split(".")
    spoiled = f"{claims}{char}.{signature}" if part == "claims" else f"{claims}.{signature}{char}"
    target = [review_id(url)] if command == "approve" else ["paused", "r1", "--answer", "x"]
    result = covonaut(command, *target, "--reviewer-token", spoiled, store=url)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "reviewer token" in result.stderr and "Traceback" not in result.stderr
    assert len(json.loads(covonaut("reviews", "--json", store=url).stdout)) == 2


def test_fork_and_tree(url: str) -> None:
    """fork prints the new thread; tree shows it under its parent."""
    forked = covonaut("fork", "finished", "--at", "5", "--as", "retry", store=url)
    assert forked.returncode == 0, forked.stderr
    assert "retry" in forked.stdout
    assert covonaut("tree", "finished", store=url).stdout.splitlines() == [
        "finished",
        "  retry @5",
    ]


def test_export_and_import_round_trip(url: str, tmp_path: Path) -> None:
    """export writes JSON Lines; import into another store gives the same thread, whose
    hash chain still verifies."""
    exported = covonaut("export", "finished", store=url)
    *lines, trailer = exported.stdout.splitlines()
    assert lines and all(json.loads(line)["thread_id"] == "finished" for line in lines)
    assert json.loads(trailer)["threads"][0] == {
        "thread_id": "finished",
        "events": len(lines),
        "head": json.loads(lines[-1])["payload"]["chain"],
    }
    other = f"sqlite:///{tmp_path / 'other.db'}"
    imported = covonaut("import", store=other, stdin=exported.stdout)
    assert imported.returncode == 0, imported.stderr
    with open_store(url) as source, open_store(other) as target:
        assert target.state_at("finished") == source.state_at("finished")
        assert target.verify("finished").ok
    twice = covonaut("import", store=other, stdin=exported.stdout)
    assert twice.returncode == 2 and "already has it" in twice.stderr


def test_import_refuses_an_altered_export(url: str, tmp_path: Path) -> None:
    """An export edited by hand fails its hash chain; nothing is written."""
    exported = covonaut("export", "finished", store=url).stdout.replace('"go"', '"GO"')
    other = f"sqlite:///{tmp_path / 'other.db'}"
    result = covonaut("import", store=other, stdin=exported)
    assert result.returncode == 2 and "hash chain" in result.stderr
    assert not (tmp_path / "other.db").exists()  # a failed import creates no store


def test_import_of_an_export_without_hashes_needs_allow_unchained(url: str, tmp_path: Path) -> None:
    """Lines without a chain hash are refused, naming the line; --allow-unchained
    imports such a (trusted, legacy) export, which has no trailer either."""
    lines = [
        json.loads(line)
        for line in covonaut("export", "finished", store=url).stdout.splitlines()[:-1]
    ]
    for event in lines:
        del event["payload"]["chain"]
    unchained = "".join(json.dumps(event) + "\n" for event in lines)
    other = f"sqlite:///{tmp_path / 'other.db'}"
    refused = covonaut("import", store=other, stdin=unchained)
    assert refused.returncode == 2 and "line 1 " in refused.stderr
    assert "--allow-unchained" in refused.stderr
    imported = covonaut(
        "import", "--allow-unchained", "--allow-untrailed", store=other, stdin=unchained
    )
    assert imported.returncode == 0, imported.stderr
    with open_store(other) as target:
        assert target.verify("finished").unchained == target.state_at("finished").version


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("show", "ghost"), "not found"),
        (("threads", "--store", "redis://x"), "not understood"),
        (("threads", "--store", ""), "no store"),
        (("fork", "finished", "--at", "999"), "cannot be forked"),
    ],
)
def test_bad_input_is_a_clear_error(url: str, args: tuple[str, ...], message: str) -> None:
    """Unknown threads, bad URLs, missing stores: exit 2 with a message on stderr."""
    result = covonaut(*args, store=url)
    assert result.returncode == 2
    assert message in result.stderr


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    """--help works for each command without a store: through the installed script for
    one, through the same parser in this process for every command."""
    result = covonaut("threads", "--help")
    assert result.returncode == 0 and "threads" in result.stdout
    for command in (
        *("threads", "show", "history", "replay", "reviews", "approve", "reject", "respond"),
        *("answer", "settle", "abandon", "retry", "worker", "workers"),
        *("fork", "tree", "export", "import", "migrate"),
    ):
        with pytest.raises(SystemExit) as exited:
            main([command, "--help"])
        assert exited.value.code == 0
        assert f"covonaut-es {command}" in capsys.readouterr().out.replace("\n", " ")


def test_approve_with_edited_arguments(url: str) -> None:
    """approve --arguments approves the edit; what is not a JSON object is refused."""
    review = review_id(url)
    bad = covonaut(
        "approve", review, "--reviewer-token", token("ann"), "--arguments", "[1]", store=url
    )
    assert bad.returncode == 2 and "must be one JSON object, got a JSON array" in bad.stderr
    edit = '{"amount": 1, "to": "bob"}'
    decided = covonaut(
        "approve", review, "--reviewer-token", token("ann"), "--arguments", edit, "--json",
        store=url,
    )  # fmt: skip
    assert decided.returncode == 0, decided.stderr
    row = json.loads(decided.stdout)
    assert (row["decision"], row["arguments"]) == ("approved", {"amount": 1, "to": "bob"})


def test_respond_answers_in_the_tools_place(url: str) -> None:
    """respond records the answer as the decision; the review leaves the queue."""
    answered = covonaut(
        "respond", review_id(url), "--reviewer-token", token("bob"), "--answer", "paid already",
        "--json", store=url,
    )  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    row = json.loads(answered.stdout)
    assert (row["decision"], row["reviewer"], row["comment"]) == (
        "responded",
        "bob",
        "paid already",
    )
    listed = json.loads(covonaut("reviews", "--json", store=url).stdout)
    assert [r["thread_id"] for r in listed] == ["paused"]
