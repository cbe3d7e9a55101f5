"""The command line takes the chain key (``--chain-key-env``) wherever it opens a store:
a store that adopted a key refuses every writing command without it, in one line that
writes nothing, and with it every command works and the chains stay intact."""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ScriptedProvider,
    Store,
    Tool,
    open_store,
)
from covonaut_es.audit import export_thread
from covonaut_es.cli import main
from covonaut_es.errors import ProviderError
from support import answer, call

KEY = "the chain key of this store, 32+"
SECRET = secrets.token_hex(32)
TOKEN = "TOKEN"  # replaced by a reviewer token


def _token() -> str:
    return HmacReviewerVerifier(SECRET.encode()).issue_token("rita", ttl_seconds=600)


def _review_of(store: Store, thread_id: str) -> str:
    (review,) = store.state_at(thread_id).reviews
    return review.request.review_id


class _Crash(BaseException):
    """Stands for the death of the runner's process inside a tool."""


def _crash(ctx: Any, args: dict[str, Any]) -> Any:
    raise _Crash


def _agent(store: Store, thread_id: str, tool: Tool, tool_call: tuple[str, str, str]) -> Agent:
    return Agent(
        AgentConfig(
            provider=ScriptedProvider([call(tool_call)]),
            tools=[tool],
            reviewer_verifier=HmacReviewerVerifier(SECRET.encode()),
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
        )
    )


@pytest.fixture
def keyed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, list[str]]]:
    """A keyed SQLite store with a thread for every writing command, and each command's
    arguments (``TOKEN`` for a reviewer's token)."""
    monkeypatch.setenv("COVONAUT_ES_REVIEWER_SECRET", SECRET)
    monkeypatch.setenv("PAUSES_APP_LEDGER", str(tmp_path / "ledger"))
    monkeypatch.setenv("PAUSES_APP_FAILS", str(tmp_path / "fails"))
    (tmp_path / "fails").mkdir()
    (tmp_path / "fails" / "failed-1").touch()  # its model is down once: its run fails
    monkeypatch.setenv("CHAIN", KEY)
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    pay = Tool("pay", "Pay", {"type": "object"}, lambda c, a: "paid", requires_approval=True)
    charge = Tool("charge", "Charge", {"type": "object"}, _crash)
    with open_store(url, chain_key=KEY) as store:
        for thread_id in ("pay-1", "pay-2", "pay-3"):
            _agent(store, thread_id, pay, ("p1", "pay", "{}")).run("Pay.")
        for thread_id in ("charge-1", "charge-2"):
            with pytest.raises(_Crash):
                _agent(store, thread_id, charge, ("c1", "charge", "{}")).run("Charge.")
        import pauses_app

        for thread_id in ("ask-1", "failed-1"):
            config = pauses_app.make_config(thread_id)
            agent = Agent(
                AgentConfig(
                    provider=config.provider,
                    tools=config.tools,
                    checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
                )
            )
            with contextlib.suppress(ProviderError):  # the failed run
                agent.run("Pay me.")
        reviews = [_review_of(store, f"pay-{n}") for n in (1, 2, 3)]
    with open_store("memory://", chain_key=KEY) as source:  # the same key seals the export
        Agent(
            AgentConfig(
                provider=ScriptedProvider([answer("hello")]),
                checkpoint=CheckpointSettings(store=source, thread_id="imported"),
            )
        ).run("Hi.")
        (tmp_path / "export.jsonl").write_text("\n".join(export_thread(source, "imported")))
    commands = {  # in this order: the worker resumes the answered thread alone
        "answer": ["answer", "ask-1", "a1", "--answer", "DE89", "--reviewer-token", TOKEN],
        "worker": ["worker", "--once", "--app", "pauses_app:make_config"],
        "approve": ["approve", reviews[0], "--reviewer-token", TOKEN],
        "reject": ["reject", reviews[1], "--reason", "no", "--reviewer-token", TOKEN],
        "respond": ["respond", reviews[2], "--answer", "done", "--reviewer-token", TOKEN],
        "settle": ["settle", "charge-1", "c1", "--result", "ran", "--reviewer-token", TOKEN],
        "settle --retry": ["settle", "charge-2", "c1", "--retry", "--reviewer-token", TOKEN],
        "abandon": ["abandon", "pay-3", "--reason", "gone", "--reviewer-token", TOKEN],
        "fork": ["fork", "pay-1", "--at", "2", "--as", "forked"],
        "import": ["import", str(tmp_path / "export.jsonl")],
        "retry": ["retry", "failed-1", "--reviewer-token", TOKEN],
    }
    return url, commands


def _dump(url: str) -> list[str]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return list(conn.iterdump())


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main([part.replace(TOKEN, _token()) for part in argv])
    printed = capsys.readouterr()
    return status, printed.out, printed.err


WRITING = ["approve", "reject", "respond", "answer", "settle", "settle --retry", "abandon"]
WRITING += ["fork", "import", "worker", "retry", "serve", "reviews --follow"]


@pytest.mark.parametrize("command", WRITING)
def test_every_writing_command_refuses_a_keyed_store_without_its_key_and_writes_nothing(
    keyed: tuple[str, dict[str, list[str]]], command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ``--chain-key-env``, a writing command on a keyed store exits 2 with one
    line that says to pass the key, shows no key, and changes nothing in the store."""
    url, commands = keyed
    argv = {"serve": ["serve"], "reviews --follow": ["reviews", "--follow"]}
    argv |= commands
    before = _dump(url)
    status, out, err = _run([*argv[command], "--store", url], capsys)
    assert status == 2, (out, err)
    assert err.count("\n") == 1, err
    assert "seals its chain with a key: pass it with" in err and "--chain-key-env" in err
    assert KEY not in out + err
    assert _dump(url) == before


def test_with_the_key_every_writing_command_works_and_the_chains_verify(
    keyed: tuple[str, dict[str, list[str]]], capsys: pytest.CaptureFixture[str]
) -> None:
    """With ``--chain-key-env``, each writing command does its work on the keyed store,
    and afterwards every thread's chain verifies with the key, from the library and
    from ``replay --verify``."""
    url, commands = keyed
    for name, argv in commands.items():
        status, out, err = _run([*argv, "--store", url, "--chain-key-env", "CHAIN"], capsys)
        assert status == 0, (name, out, err)
        assert KEY not in out + err
    with open_store(url, chain_key=KEY) as store:
        thread_ids = list(store.thread_ids())
        assert {"forked", "imported"} <= set(thread_ids)
        assert store.state_at("ask-1").messages[-1].content == "Done: DE89"  # the worker ran
        for thread_id in thread_ids:
            report = store.verify(thread_id)
            assert report.ok and report.chained == report.events, (thread_id, report)
    status, out, err = _run(
        ["replay", "ask-1", "--verify", "--store", url, "--chain-key-env", "CHAIN"], capsys
    )
    assert status == 0, (out, err)


def test_reading_commands_open_a_keyed_store_without_its_key_and_verify_says_why(
    keyed: tuple[str, dict[str, list[str]]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Reading commands work on a keyed store without its key; ``replay --verify``
    then reports that keyed seals need the key, notes how to pass it, and exits 1."""
    url, _ = keyed
    for argv in (["threads"], ["show", "pay-1"], ["export", "pay-1"], ["reviews"]):
        status, out, err = _run([*argv, "--store", url], capsys)
        assert status == 0, (argv, err)
    status, out, err = _run(["replay", "pay-1", "--verify", "--store", url], capsys)
    assert status == 1
    assert "open it with chain_key to verify" in out
    assert "note: this store seals its chain with a key" in out and "--chain-key-env" in out
