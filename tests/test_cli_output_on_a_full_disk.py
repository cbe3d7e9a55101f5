"""Output that finds no room (a full disk, a quota, a file size limit) ends a command
with exit status 2 and one line on stderr, never a traceback; and the line tells the
truth about the store: a command that recorded its change before its output failed
says that the change stands, not to run the command again, which would be refused (an
approval given twice, a fork of a taken id) or repeat it (helper-242: `approve`,
`fork` and `import` with their output on a full disk said "run the command again").
Reading commands, and the parser's `--help` and `--version`:
`test_transfer_hostile.py::test_a_command_whose_output_finds_no_room_says_so_in_one_line`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from covonaut_es.cli import main
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
