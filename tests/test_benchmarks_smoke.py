"""The benchmarks keep running: ``benchmarks/run.py --quick`` and the many-threads
benchmark at its smallest size work end to end.

Only that they run and write their tables is checked, never how fast anything is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = output.read_text()
    assert "## Targets" in report
    assert "## Machine" in report
    for figure in (*range(1, 9), 12):
        assert f"\n## {figure}. " in report, f"figure {figure} is missing"
    separators = [line for line in report.splitlines() if line.startswith("| --- |")]
    assert len(separators) >= 10, "expected the figures' tables"


SCALE = ROOT / "benchmarks" / "scale.py"


def test_the_many_threads_benchmark_runs_and_writes_its_table(tmp_path: Path) -> None:
    """`scale.py` at its smallest size exits 0 and writes every figure, in Markdown and
    in JSON, for each back end it could reach (PostgreSQL when a server can be had, as
    `run.py --quick`), and a reader following the PostgreSQL log skipped no event."""
    output, data = tmp_path / "SCALE.md", tmp_path / "scale.json"
    result = subprocess.run(
        [sys.executable, str(SCALE), "--scale", "10", "--output", str(output), "--json", str(data)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    found = json.loads(data.read_text())["results"]
    assert "sqlite" in found
    table = output.read_text()
    for backend, (small, large) in found.items():
        assert (small["size"], large["size"]) == (10, 100)
        assert small["queue"]["pending"] == 2 and large["queue"]["pending"] == 20
        for figure in ("bytes per thread", "restore one thread, p50", "`covonaut-es threads`"):
            assert f"| {backend} | {figure} |" in table
    if "postgresql" in found:
        assert all(
            found["postgresql"][n][f"create_{w}"]["skipped"] == 0 for n in (0, 1) for w in (1, 4, 8)
        )
