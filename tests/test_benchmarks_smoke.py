"""The benchmarks keep running: ``benchmarks/run.py --quick`` works end to end.

Only that they run and write their tables is checked, never how fast anything is.
"""

from __future__ import annotations

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
    for figure in (*range(1, 9), 12, 14):
        assert f"\n## {figure}. " in report, f"figure {figure} is missing"
    separators = [line for line in report.splitlines() if line.startswith("| --- |")]
    assert len(separators) >= 10, "expected the figures' tables"
