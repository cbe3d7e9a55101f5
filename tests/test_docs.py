"""The README's Python blocks and every example run as documented."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


@pytest.mark.parametrize("index", range(len(python_blocks(README))))
def test_readme_python_block_runs(index: int, tmp_path: Path) -> None:
    """Each ```python block of the README runs without error in a fresh interpreter."""
    code = python_blocks(README)[index]
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr


def test_recovery_example_prints_the_three_lines() -> None:
    """examples/recovery.py prints exactly what the README says (B26)."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "recovery.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    expected = re.search(r"prints\n\n```text\n(.*?)```", README.read_text(), flags=re.S)
    assert expected is not None
    assert result.stdout == expected.group(1)
