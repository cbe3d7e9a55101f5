"""Transfers that cannot be cut short silently: an export ends with a trailer that the
import requires and checks, old exports without one import only when asked, and the
commands that write to a pipe stop with a nonzero status once its reader is gone."""

from __future__ import annotations

import functools
import json
import os
import select
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ScriptedProvider,
    Store,
    open_store,
)
from covonaut_es.audit import export_thread, import_threads
from covonaut_es.domain import AgentThread
from covonaut_es.errors import (
    ConfigurationError,
    IncompleteExportError,
    ThreadConflictError,
    TransferError,
)
from covonaut_es.messages import Message
from covonaut_es.service import ThreadService
from support import answer, call, echo_tool, review_tool, start_bare_run, ticking_clock

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "fixtures" / "golden" / "v4-export"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def covonaut(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``covonaut-es ARGS`` with this checkout's sources."""
    return subprocess.run(
        [sys.executable, "-m", "covonaut_es", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        check=False,
    )


def converse(store: Store, thread_id: str, *, review: bool = False) -> None:
    """A run of three echo calls and an answer, or one that pauses for a review."""
    script = [call((f"c{i}", "echo", '{"text": "hello"}')) for i in range(3)]
    if review:
        script.append(call(("r1", "review", "{}")))
    Agent(
        AgentConfig(
            provider=ScriptedProvider([*script, answer("all done")]),
            tools=[echo_tool(), review_tool()],
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            clock=ticking_clock(),
        )
    ).run("say hello")


@functools.cache
def source_export(keyed: bool) -> str:
    """The export, with its ancestors, of fork ``t-b`` of thread ``t`` (at version 5,
    with a label after it), in a store with a chain key or without."""
    with open_store("memory://", chain_key="k" * 32 if keyed else None) as store:
        converse(store, "t")
        store.fork("t", at_version=5, new_thread_id="t-b", now=NOW)
        ThreadService(store, clock=lambda: NOW).label("t-b", "the other way")
        text = "".join(line + "\n" for line in export_thread(store, "t-b", with_ancestors=True))
    return text


def test_an_export_ends_with_a_trailer_counting_each_threads_events_and_head() -> None:
    """The last line names each thread of the export, its events and the chain hash its
    last line carries, then the events in all."""
    text = source_export(keyed=False)
    *lines, trailer = (json.loads(line) for line in text.splitlines())
    threads: dict[str, dict[str, object]] = {}
    for line in lines:
        threads.setdefault(line["thread_id"], {"events": 0})
        threads[line["thread_id"]] = {
            "events": int(str(threads[line["thread_id"]]["events"])) + 1,
            "head": line["payload"]["chain"],
        }
    assert trailer == {
        "trailer": "covonaut-es export 1",
        "threads": [{"thread_id": t, **totals} for t, totals in threads.items()],
        "events": len(lines),
    }
    assert list(threads) == ["t", "t-b"] and threads["t"]["events"] == 5


HEADS = ("", "x" * 22)
"""Chain heads a trailer edit may put in: none, and one no event carries."""


def _mutations(text: str) -> st.SearchStrategy[str]:
    """The export cut at any character, a line deleted, two lines swapped, or a field
    of its trailer edited (when its last line is one)."""
    lines = text.splitlines(keepends=True)
    if not lines:
        return st.just(text)
    index = st.integers(0, len(lines) - 1)

    def deleted(i: int) -> str:
        return "".join(lines[:i] + lines[i + 1 :])

    def swapped(pair: tuple[int, int]) -> str:
        moved = list(lines)
        moved[pair[0]], moved[pair[1]] = moved[pair[1]], moved[pair[0]]
        return "".join(moved)

    def edited(edit: tuple[int, str, int, str]) -> str:
        which, field, delta, head = edit
        try:
            changed = json.loads(lines[-1])
            entry = changed["threads"][which % len(changed["threads"])]
        except (ValueError, KeyError, TypeError, ZeroDivisionError):
            return text  # the last line is no trailer (any more)
        if field == "events":
            entry["events"] += delta
        elif field == "head":
            entry["head"] = head
        elif field == "total":
            changed["events"] += delta
        elif field == "drop":
            changed["threads"].remove(entry)
        else:
            entry["thread_id"] += "x"
        return "".join(lines[:-1]) + json.dumps(changed) + "\n"

    return st.one_of(
        st.integers(0, len(text)).map(lambda n: text[:n]),
        index.map(deleted),
        st.tuples(index, index).map(swapped),
        st.tuples(
            st.integers(0, 3),
            st.sampled_from(["events", "head", "total", "drop", "thread_id"]),
            st.integers(-3, 3),
            st.sampled_from(HEADS),
        ).map(edited),
    )


@st.composite
def _altered_exports(draw: st.DrawFn) -> tuple[bool, str]:
    keyed = draw(st.booleans())
    altered = draw(_mutations(source_export(keyed)))
    return keyed, draw(st.one_of(st.just(altered), _mutations(altered)))


@settings(max_examples=150, deadline=None)
@given(_altered_exports())
def test_an_export_cut_short_or_altered_imports_whole_or_not_at_all(
    altered: tuple[bool, str],
) -> None:
    """Whatever cut, deleted line, swapped lines or trailer edit (one or two of them): the
    import brings in exactly the exported threads, which verify and export again to the
    same text, or refuses with a typed error and writes nothing."""
    keyed, text = altered
    original = source_export(keyed)
    chain_key = "k" * 32 if keyed else None
    with open_store("memory://", chain_key=chain_key) as target:
        try:
            imported = import_threads(target, text.splitlines(keepends=True))
        except (TransferError, ThreadConflictError):
            assert list(target.thread_ids()) == []
            return
        assert imported == ["t", "t-b"]
        assert all(target.verify(thread_id).ok for thread_id in imported)
        again = "".join(line + "\n" for line in export_thread(target, "t-b", with_ancestors=True))
        assert again == original


@pytest.mark.parametrize("name", ["thread.jsonl", "fork.jsonl"])
def test_an_export_written_before_trailers_imports_only_when_asked(
    store_url: str, name: str
) -> None:
    """An export of 0.1 (no trailer) is refused, naming the way to accept it; with
    ``allow_untrailed`` it imports, verifies, and its threads hold what the source's
    manifest counted."""
    lines = (GOLDEN / name).read_text().splitlines()
    expected = json.loads((GOLDEN / "manifest.json").read_text())["files"][name]
    with open_store(store_url) as target:
        with pytest.raises(IncompleteExportError, match=r"without a trailer.*allow_untrailed"):
            import_threads(target, lines)
        assert list(target.thread_ids()) == []
        assert import_threads(target, lines, allow_untrailed=True) == list(expected)
        *again, trailer = export_thread(target, list(expected)[-1], with_ancestors=True)
        assert again == lines
        assert {t["thread_id"]: t for t in json.loads(trailer)["threads"]} == {
            thread_id: {"thread_id": thread_id, **totals} for thread_id, totals in expected.items()
        }
        assert all(target.verify(thread_id).ok for thread_id in expected)


def _recounted(text: str) -> str:
    """The export with its trailer counting one event fewer of its first thread."""
    *lines, last = text.splitlines(keepends=True)
    trailer = json.loads(last)
    trailer["threads"][0]["events"] -= 1
    return "".join(lines) + json.dumps(trailer) + "\n"


TRUNCATIONS = {
    "head -n 5": lambda text: "".join(text.splitlines(keepends=True)[:5]),
    "cut mid-line": lambda text: text[: text.rindex('"payload"', 0, text.rindex("\n", 0, -1))],
    "cut inside the trailer": lambda text: text[:-20],
    "without the last thread's lines": lambda text: "".join(
        line for line in text.splitlines(keepends=True) if '"thread_id":"t-b","version"' not in line
    ),
    "a trailer that counts fewer": _recounted,
}
"""The ways an export ends up short or disagrees with its trailer, by name."""


@pytest.fixture(scope="module")
def exported_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``covonaut-es export`` of fork ``t-b`` of thread ``t`` in a SQLite store."""
    source = f"sqlite:///{tmp_path_factory.mktemp('source') / 'source.db'}"
    with open_store(source) as store:
        converse(store, "t")
        store.fork("t", at_version=5, new_thread_id="t-b", now=NOW)
    return covonaut("export", "t-b", "--store", source).stdout


@pytest.mark.parametrize("how", list(TRUNCATIONS))
def test_import_refuses_a_truncated_export_in_one_line_and_creates_no_store(
    tmp_path: Path, exported_text: str, how: str
) -> None:
    """``head -n 5``, a cut inside a line or the trailer, a missing last thread and a
    trailer that disagrees: exit 2, one typed line on stderr, no store file made."""
    cut = TRUNCATIONS[how](exported_text)
    assert cut != exported_text
    target = tmp_path / "target.db"
    result = covonaut("import", "--store", f"sqlite:///{target}", stdin=cut)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("covonaut-es import: ") and "cut short" in line
    assert not target.exists()


@pytest.mark.parametrize("as_one", [str, str.encode, lambda text: bytearray(text.encode())])
def test_import_refuses_the_export_as_one_text_naming_the_argument(as_one: Any) -> None:
    """The whole export given as one str or bytes, which iterates by character: a
    ConfigurationError naming ``lines`` and saying to pass lines, not the file blamed;
    its lines import."""
    text = source_export(keyed=False)
    with open_store("memory://") as store:
        with pytest.raises(ConfigurationError, match=r"^lines must be .*splitlines\(\)"):
            import_threads(store, as_one(text))
        assert list(store.thread_ids()) == []
        assert import_threads(store, text.splitlines()) == ["t", "t-b"]


def test_the_command_line_imports_a_whole_export(tmp_path: Path, exported_text: str) -> None:
    """The export the truncations were cut from imports, fork and parent."""
    result = covonaut("import", "--store", f"sqlite:///{tmp_path / 't.db'}", stdin=exported_text)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["IMPORTED", "t", "t-b"]


def test_the_command_line_imports_an_old_export_with_allow_untrailed(tmp_path: Path) -> None:
    """``import`` of an export of 0.1 is refused naming ``--allow-untrailed``, and with
    it imports into a new SQLite file."""
    target = f"sqlite:///{tmp_path / 'target.db'}"
    refused = covonaut("import", str(GOLDEN / "fork.jsonl"), "--store", target)
    assert refused.returncode == 2 and "--allow-untrailed" in refused.stderr
    assert not (tmp_path / "target.db").exists()
    imported = covonaut(
        "import", str(GOLDEN / "fork.jsonl"), "--allow-untrailed", "--store", target
    )
    assert imported.returncode == 0, imported.stderr
    with open_store(target) as store:
        assert store.verify("golden-export-fork").ok


def _large_store(path: Path) -> str:
    """A SQLite store with one thread whose export is about a megabyte: far more than a
    pipe holds."""
    url = f"sqlite:///{path}"
    thread = AgentThread.start("big", now=NOW)
    start_bare_run(thread, now=NOW)
    for i in range(1, 2001):
        thread.append_message(Message(role="user", content=f"{i} " + "x" * 400), now=NOW)
    with open_store(url) as store:
        store.save(thread)
    return url


def test_export_into_a_pipe_closed_early_exits_nonzero_saying_so(tmp_path: Path) -> None:
    """A reader that closes after a few bytes of a large export: ``export`` exits 141
    with one line on stderr saying the output is incomplete."""
    url = _large_store(tmp_path / "big.db")
    with subprocess.Popen(
        [sys.executable, "-m", "covonaut_es", "export", "big", "--store", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        assert len(process.stdout.read(4096)) == 4096
        process.stdout.close()
        status = process.wait(timeout=60)
        stderr = process.stderr.read().decode()
    assert status == 141
    [line] = stderr.splitlines()
    assert line.startswith("covonaut-es export: standard output closed before the export")


def test_reviews_follow_exits_promptly_once_its_reader_is_gone(tmp_path: Path) -> None:
    """``reviews --follow`` whose reader closes the pipe exits within a couple of seconds,
    although the queue does not change again."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        converse(store, "paused", review=True)
    with subprocess.Popen(
        [sys.executable, "-m", "covonaut_es", "reviews", "--follow", "--store", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    ) as process:
        assert process.stdout is not None
        try:
            ready, _, _ = select.select([process.stdout], [], [], 60)
            assert ready and b"paused" in process.stdout.readline() + process.stdout.readline()
            process.stdout.close()
            closed = time.monotonic()
            status = process.wait(timeout=10)
            waited = time.monotonic() - closed
        finally:
            if process.poll() is None:
                process.kill()
    assert waited < 2.5
    assert status == 141
