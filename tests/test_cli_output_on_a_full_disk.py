"""Output that finds no room (a full disk, a quota, a file size limit) ends a command
with exit status 2 and one line on stderr, never a traceback; and the line tells the
truth about the store: a command that recorded its change before its output failed
says that the change stands, not to run the command again, which would be refused (an
approval given twice, a fork of a taken id) or repeat it (helper-242: `approve`,
`fork` and `import` with their output on a full disk said "run the command again").
Reading commands, and the parser's `--help` and `--version`:
`test_transfer_hostile.py::test_a_command_whose_output_finds_no_room_says_so_in_one_line`."""

from __future__ import annotations

import errno
import io
import sys
from pathlib import Path

import pytest

from covonaut_es import Agent, AgentConfig, CheckpointSettings, ScriptedProvider, Tool, open_store
from covonaut_es.audit import export_thread
from covonaut_es.cli import main
from support import call, converse
from test_cli_chain_key import TOKEN, _dump, _token, keyed  # noqa: F401  # the fixture


def _run_into_a_full_disk(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    with Path("/dev/full").open("w") as full, monkeypatch.context() as patched:
        patched.setattr(sys, "stdout", full)
        return main([part.replace(TOKEN, _token()) for part in argv])


def test_each_writing_command_that_recorded_says_its_change_stands(
    keyed: tuple[str, dict[str, list[str]]],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, commands = keyed
    told = {}
    for name, argv in commands.items():
        before = _dump(url)
        capsys.readouterr()
        status = _run_into_a_full_disk(
            [*argv, "--store", url, "--chain-key-env", "CHAIN"], monkeypatch
        )
        err = capsys.readouterr().err
        recorded = _dump(url) != before
        told[name] = recorded
        if name == "worker":  # it prints nothing on stdout: it logs on stderr
            assert status == 0, err
            continue
        assert status == 2, (name, err)
        [line] = err.splitlines()
        assert "cannot write the output: No space left on device" in line, (name, line)
        if recorded:
            assert "recorded the command's change before, and it stands" in line, (name, line)
            assert "run the command again" not in line, (name, line)
        else:
            assert "run the command again" in line, (name, line)
    assert all(told.values()), told  # every command recorded its change


def test_an_import_into_a_new_file_that_recorded_says_its_change_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An import into a SQLite file that did not exist opens a staged copy of the
    options: the note of its change was made on the copy (helper-246)."""
    with open_store(f"sqlite:///{tmp_path / 'a.db'}") as source:
        converse(source, "t1")
        (tmp_path / "t1.jsonl").write_text("\n".join(export_thread(source, "t1")))
    new = f"sqlite:///{tmp_path / 'new.db'}"
    capsys.readouterr()
    status = _run_into_a_full_disk(
        ["import", "--store", new, str(tmp_path / "t1.jsonl")], monkeypatch
    )
    [line] = capsys.readouterr().err.splitlines()
    assert status == 2
    with open_store(new) as store:
        assert store.exists("t1")
    assert "recorded the command's change before, and it stands" in line, line


class _FullAfterAnotherWriter(io.StringIO):
    """Standard output whose first flush goes through, after which another writer
    records a review in the store; every later flush finds the disk full."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.flushed = False

    def flush(self) -> None:
        if not self.getvalue():
            return
        if self.flushed:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.flushed = True
        self.seek(0)
        self.truncate()
        with open_store(self.url) as store:
            pay = Tool(
                "pay", "Pay", {"type": "object"}, lambda c, a: "paid", requires_approval=True
            )
            config = AgentConfig(
                provider=ScriptedProvider([call(("p1", "pay", "{}"))]),
                tools=[pay],
                checkpoint=CheckpointSettings(store=store, thread_id="pay-1"),
            )
            Agent(config).run("Pay.")


def test_following_the_store_records_no_change_of_its_own_whatever_others_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``reviews --follow`` writes only its view: the review another writer recorded
    while it followed is not its change (helper-246: it said the change stands, and
    not to run it again)."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        converse(store, "t0")
    monkeypatch.setattr(sys, "stdout", _FullAfterAnotherWriter(url))
    status = main(["reviews", "--follow", "--json", "--view", "memory://follow", "--store", url])
    [line] = capsys.readouterr().err.splitlines()
    assert status == 2 and "No space left on device" in line, line
    assert "run the command again" in line, line
