"""The benchmarks keep running: ``benchmarks/run.py --quick`` and the many-threads
benchmark's ``--quick`` run work end to end.

Only that they run and write their tables is checked, never how fast anything is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from postgres_server import URL_ENV

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "benchmarks" / "run.py"


def test_quick_benchmarks_run_and_write_every_figure(tmp_path: Path) -> None:
    """`run.py --quick` exits 0 and writes a report with every figure's section."""
    output = tmp_path / "BENCH.md"
    result = subprocess.run(
        [sys.executable, str(RUNNER), "--quick", "--output", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard: the run takes minutes on a loaded 2-core machine
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    # A measurement that fails in its own process leaves its cells empty and the run
    # going: its traceback is what shows it.
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    report = output.read_text()
    assert "## Targets" in report
    assert "## Machine" in report
    for figure in range(1, 16):
        assert f"\n## {figure}. " in report, f"figure {figure} is missing"
    separators = [line for line in report.splitlines() if line.startswith("| --- |")]
    assert len(separators) >= 10, "expected the figures' tables"


SCALE = ROOT / "benchmarks" / "scale.py"
WRITERS = {"sqlite": (1, 4), "postgresql": (1, 4, 8)}
SCALE_FIGURES = (
    "bytes per thread",
    "restore one thread, p50",
    "`covonaut-es threads`",
    "reviewer queue rebuilt from the log",
    "`GET /api/reviews`",
    "worker start, no thread ready",
    "`approve` without `--thread`",
)


@pytest.mark.postgres
def test_the_many_threads_benchmark_runs_and_writes_its_table(
    tmp_path: Path, postgres_url: str
) -> None:
    """`scale.py --quick` exits 0 and measures every figure at both sizes, in Markdown
    and in JSON, on SQLite and on the session's PostgreSQL server, and a reader
    following the PostgreSQL log skipped no event."""
    output, data = tmp_path / "SCALE.md", tmp_path / "scale.json"
    result = subprocess.run(
        [sys.executable, str(SCALE), "--quick", "--output", str(output), "--json", str(data)],
        cwd=ROOT,
        env={**os.environ, URL_ENV: postgres_url},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    found = json.loads(data.read_text())["results"]
    assert set(found) == set(WRITERS)
    rows = [  # (back end, figure) and the row, of every row of the table
        (tuple(cell.strip() for cell in line.strip("|").split("|")[:2]), line)
        for line in output.read_text().splitlines()
        if line.startswith("| ")
    ]
    for backend, (small, large) in found.items():
        assert (small["size"], large["size"]) == (8, 80)
        assert small["queue"]["pending"] == 2 and large["queue"]["pending"] == 16
        creating = [
            f"creating N threads, {w} writer{'s' if w > 1 else ''}" for w in WRITERS[backend]
        ]
        for figure in (*creating, *SCALE_FIGURES):
            row = next(
                (line for (b, name), line in rows if b == backend and name.startswith(figure)), None
            )
            assert row is not None, f"{backend}: {figure} is missing"
            cells = [cell.strip() for cell in row.strip("|").split("|")]
            assert cells[4] != "-" and cells[8] != "-", f"{backend}: {figure} was not measured"
    for size in found["postgresql"]:
        for w in WRITERS["postgresql"]:
            made = size[f"create_{w}"]
            assert made["tailed"] > 0 and made["skipped"] == 0
