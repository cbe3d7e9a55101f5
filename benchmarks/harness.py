"""How the benchmarks run: isolated processes with a time budget, the PostgreSQL server,
the shared context of one benchmark run, and the command line.

A figure module exposes ``run(ctx) -> list[Section]``; ``benchmarks/run.py`` runs them
all, and each module can also run alone (``python benchmarks/replay.py --quick``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import peer
import report
import workload

ROOT = Path(__file__).resolve().parent.parent
FULL_TURNS = (100, 200, 300, 1000)
QUICK_TURNS = (5,)
BUDGET_S = 600.0
"""Time budget of one peer configuration (one system, store and T): ten minutes."""
REPEATS = 3
"""Runs per configuration (the median is reported), unless a run is long (below)."""
REPEAT_UNDER_S = 30.0
"""A configuration is repeated only when one run takes less than this."""
PEER_HISTORY_MAX_T = 300
"""LangGraph's savers list their full history only up to this T. The listing reads every
checkpoint's whole state, so it grows as T squared: at T=1000 it took the default
savers 93 s and 100 s and the DeltaChannel ones about 1.5 minutes each, a fifth of
``make bench`` for a growth that T=100 to T=300 show already."""


def log(message: str) -> None:
    """Progress on stderr, so a long ``make bench`` shows where it is."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# Isolated processes ----------------------------------------------------------------------


class Progress:
    """The measurements of one isolated run, written to a JSON file after each update."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.data: dict[str, Any] = {}

    def update(self, **fields: Any) -> None:
        """Record measurements; they survive the process being killed afterwards."""
        self.data.update(fields)
        tmp = self.path + ".tmp"
        Path(tmp).write_text(json.dumps(self.data))
        os.replace(tmp, self.path)


def _child(func: Callable[..., None], path: str, kwargs: dict[str, Any]) -> None:
    progress = Progress(path)
    try:
        func(progress=progress, **kwargs)
    except BaseException:
        progress.update(error=traceback.format_exc(limit=8))
        raise


def isolated(func: Callable[..., None], timeout: float, **kwargs: Any) -> dict[str, Any]:
    """Run ``func(progress=..., **kwargs)`` in a fresh process for at most ``timeout`` s.

    Returns what the run reported, plus ``timed_out`` (the budget) when it was killed
    or ``error`` when it failed.
    """
    fd, path = tempfile.mkstemp(prefix="bench-", suffix=".json")
    os.close(fd)
    process = multiprocessing.get_context("spawn").Process(target=_child, args=(func, path, kwargs))
    try:
        process.start()
        process.join(timeout)
        timed_out = process.is_alive()
        if timed_out:
            process.kill()
            process.join()
        text = Path(path).read_text()
    finally:
        Path(path).unlink(missing_ok=True)
    result: dict[str, Any] = json.loads(text) if text else {}
    if timed_out:
        result["timed_out"] = timeout
    elif process.exitcode != 0 and "error" not in result:
        result["error"] = f"exited with code {process.exitcode}"
    return result


# PostgreSQL ------------------------------------------------------------------------------


def _postgres_server_module() -> ModuleType:
    """The test suite's throwaway-server helper, imported from its file."""
    path = ROOT / "tests" / "postgres_server.py"
    spec = importlib.util.spec_from_file_location("postgres_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("postgres_server", module)
    spec.loader.exec_module(module)
    return module


class Postgres:
    """One PostgreSQL server for the whole run, with a fresh database per measurement.

    It is ``$COVONAUT_ES_TEST_POSTGRES_URL`` when set, otherwise a throwaway server from
    ``tests/postgres_server.py``, which runs with ``fsync=off``, its files on disk (not
    in memory, as the tests' servers). Every benchmark database gets
    ``synchronous_commit = on``, so a commit waits for its WAL write.
    """

    def __init__(self, admin_url: str, server: Any | None) -> None:
        self.admin_url = admin_url
        self._server = server

    @classmethod
    def start(cls, *, durable: bool = False) -> Postgres | str:
        """A running server, or why none could be had; ``durable``: a throwaway one
        that syncs its WAL (``fsync=on``), as a production server does."""
        try:
            helper = _postgres_server_module()
        except Exception as exc:  # pytest or psycopg missing, or the helper moved
            return f"the tests/postgres_server.py helper cannot be imported: {exc}"
        external = os.environ.get(helper.URL_ENV, "").strip()
        if external:
            return cls(external, None)
        server = helper.PostgresServer(durable=durable, on_disk=True)
        try:
            return cls(server.start(), server)
        except helper.PostgresUnavailable as exc:
            return f"no PostgreSQL server could be started: {str(exc).splitlines()[0]}"

    def _admin(self) -> Any:
        import psycopg

        return psycopg.connect(self.admin_url, autocommit=True)

    def url(self, name: str) -> str:
        """The URL of database ``name`` on this server."""
        return urlsplit(self.admin_url)._replace(path=f"/{name}").geturl()

    def database(self, name: str) -> str:
        """Create database ``name`` afresh and return its URL."""
        from psycopg import sql

        with self._admin() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET synchronous_commit = on").format(
                    sql.Identifier(name)
                )
            )
        return self.url(name)

    def drop(self, name: str) -> None:
        """Drop database ``name``."""
        from psycopg import sql

        with self._admin() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def settings(self) -> str:
        """Server version and the durability settings in force."""
        with self._admin() as conn:
            values = [
                f"{name}={conn.execute(f'SHOW {name}').fetchone()[0]}"  # type: ignore[index]
                for name in ("server_version", "fsync", "full_page_writes")
            ]
        return ", ".join(values) + ", synchronous_commit=on (per database)"

    def stop(self) -> None:
        """Stop a throwaway server; leave an external one alone."""
        if self._server is not None:
            self._server.stop()


# The run's context -----------------------------------------------------------------------


@dataclass
class Context:
    """What every figure module shares in one benchmark run."""

    quick: bool
    workdir: Path
    postgres: Postgres | None
    postgres_missing: str
    langgraph_missing: str | None
    delta: bool
    commands: list[str] = field(default_factory=list)
    targets: dict[str, report.Target] = field(default_factory=dict)
    """Targets by key, for the diagnosis to explain the missed ones."""
    _runs: dict[tuple[str, int, bool | None, bool], list[dict[str, Any]]] = field(
        default_factory=dict
    )
    _memo: dict[Any, Any] = field(default_factory=dict)

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        """``compute()``, once per run for each ``key``."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    @property
    def turns(self) -> tuple[int, ...]:
        """The thread lengths T measured."""
        return QUICK_TURNS if self.quick else FULL_TURNS

    @property
    def backends(self) -> tuple[str, ...]:
        """``sqlite``, and ``postgresql`` when a server is available."""
        return ("sqlite", "postgresql") if self.postgres else ("sqlite",)

    def target(self, backend: str, name: str) -> str:
        """A fresh SQLite path or PostgreSQL database for one measurement."""
        if backend == "postgresql":
            assert self.postgres is not None
            return self.postgres.database(name)
        path = self.workdir / f"{name}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return str(path)

    def discard(self, backend: str, name: str) -> None:
        """Remove what :meth:`target` created."""
        if backend == "postgresql":
            assert self.postgres is not None
            self.postgres.drop(name)
        else:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.workdir / name}.db{suffix}").unlink(missing_ok=True)

    def _wanted(self, runs: list[dict[str, Any]]) -> bool:
        """Whether a configuration needs another run."""
        if not runs:
            return True
        last = runs[-1]
        if "error" in last or "timed_out" in last or last.get("wall_s", 0) > REPEAT_UNDER_S:
            return False
        return len(runs) < (1 if self.quick else REPEATS)

    def step(
        self, backend: str, turns: int, delta: bool | None = None, *, read_only: bool = False
    ) -> None:
        """One more run of ours (``delta`` None; its lookup declared read-only if
        ``read_only``) or of a LangGraph configuration, if it needs one. Callers
        interleave the systems' runs with it, so that changes in the machine's load
        during a benchmark touch every system alike."""
        runs = self._runs.setdefault((backend, turns, delta, read_only), [])
        if not self._wanted(runs):
            return
        index, ours, kept = len(runs), delta is None, delta is None and not read_only
        if ours:
            system = "ours_read_only" if read_only else "ours"
        else:
            system = f"langgraph_{'delta' if delta else 'default'}"
        name = f"{system}_{backend}_{turns}_{index}"
        kwargs: dict[str, Any] = {"delta": delta, "fork": index == 0}
        if read_only:
            kwargs = {"read_only": True}
        elif ours:
            kwargs = {
                "raw_target": self.target(backend, f"{name}_raw"),
                "paced_target": self.target(backend, f"{name}_paced"),
            }
        target = self.target(backend, name)
        log(f"{system} {backend} T={turns} run {index + 1}")
        result = isolated(
            workload.run_ours if ours else peer.run_langgraph,
            BUDGET_S,
            target=target,
            turns=turns,
            history=index == 0 and (kept or (not ours and turns <= PEER_HISTORY_MAX_T)),
            **kwargs,
        )
        result["target"] = target
        if kept:
            self.discard(backend, f"{name}_raw")
            self.discard(backend, f"{name}_paced")
        if index or not kept:  # our first store is kept for the figures that read it
            self.discard(backend, name)
        if "error" in result or "timed_out" in result:
            log(f"{system} {backend} T={turns}: {result.get('error') or 'over the budget'}")
        runs.append(result)

    def ours(self, backend: str, turns: int) -> list[dict[str, Any]]:
        """Our runs of the workload (run now if not yet); the first run's store is kept
        until the end, for the figures that read it."""
        while self._wanted(self._runs.get((backend, turns, None, False), [])):
            self.step(backend, turns)
        return self._runs[backend, turns, None, False]

    def ours_read_only(self, backend: str, turns: int) -> list[dict[str, Any]]:
        """Our runs of the workload with its lookup declared read-only (run now if not
        yet); their stores are not kept."""
        while self._wanted(self._runs.get((backend, turns, None, True), [])):
            self.step(backend, turns, read_only=True)
        return self._runs[backend, turns, None, True]

    def langgraph(self, backend: str, delta: bool, turns: int) -> list[dict[str, Any]]:
        """LangGraph's runs of the workload (run now if not yet)."""
        while self._wanted(self._runs.get((backend, turns, delta, False), [])):
            self.step(backend, turns, delta)
        return self._runs[backend, turns, delta, False]

    def close(self) -> None:
        """Stop the server and delete the working directory."""
        if self.postgres is not None:
            self.postgres.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


# Command line ----------------------------------------------------------------------------


def command_line() -> str:
    """This process's command line, with paths relative to the repository, after the
    environment variables that change what is measured."""

    def relative(arg: str) -> str:
        path = Path(arg)
        if path.is_absolute() and path.exists():
            try:
                return str(path.resolve().relative_to(ROOT))
            except ValueError:
                return arg
        return arg

    python = Path(sys.executable)
    shown = str(python.relative_to(ROOT)) if python.is_relative_to(ROOT) else python.name
    return " ".join([*_environment(), shown, *(relative(arg) for arg in sys.argv)])


def _environment() -> list[str]:
    """Variables set for this run that change what is measured."""
    names = ("PYTHONPATH", "COVONAUT_ES_TEST_POSTGRES_URL")
    return [f"{name}={os.environ[name]}" for name in names if os.environ.get(name)]


Figure = Callable[[Context], "list[report.Section]"]


PROBE_BUSY_S = 300e-6
"""CPU time spent before each commit of the second probe, about an agent's between two."""


def _conditions(ctx: Context) -> tuple[float, float, float]:
    """The machine's load and disk sync time now, back to back and after busy CPU time:
    other work on the machine moves the figures, so the report shows them at its start
    and end."""
    probe = workload.commit_probe
    return os.getloadavg()[0], probe(ctx.workdir), probe(ctx.workdir, busy_s=PROBE_BUSY_S)


def cli(figures: Sequence[Figure], argv: Sequence[str] | None = None) -> int:
    """Run ``figures`` and write their report; the entry point of every module."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny T, for the test suite")
    parser.add_argument(
        "--output", type=Path, default=ROOT / "BENCHMARKS.md", help="the report to write"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    postgres = Postgres.start()
    missing = peer.langgraph_missing()
    ctx = Context(
        quick=args.quick,
        workdir=Path(tempfile.mkdtemp(prefix="covonaut-bench-")),
        postgres=postgres if isinstance(postgres, Postgres) else None,
        postgres_missing=postgres if isinstance(postgres, str) else "",
        langgraph_missing=missing,
        delta=missing is None and peer.langgraph_has_delta(),
        commands=[command_line()],
    )
    try:
        machine = report.machine(ctx.postgres.settings() if ctx.postgres else ctx.postgres_missing)
        before = _conditions(ctx)
        sections = [section for figure in figures for section in figure(ctx)]
        after = _conditions(ctx)
        machine += [
            ("load average (1 min), start / end", f"{before[0]:.2f} / {after[0]:.2f}"),
            (
                "SQLite 1-row commit (WAL, median of 100), start / end",
                f"{report.seconds(before[1])} / {report.seconds(after[1])}",
            ),
            (
                f"the same, each after {report.seconds(PROBE_BUSY_S)} of busy CPU, start / end",
                f"{report.seconds(before[2])} / {report.seconds(after[2])}",
            ),
        ]
    finally:
        ctx.close()
    elapsed = time.perf_counter() - started
    text = report.render(
        sections,
        machine,
        ctx.commands,
        quick=args.quick,
        elapsed_s=elapsed,
        environment=" ".join(_environment()),
    )
    args.output.write_text(text)
    log(f"wrote {args.output} in {elapsed:.0f} s")
    return 0
