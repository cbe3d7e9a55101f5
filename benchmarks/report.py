"""The report: tables, targets and the machine they were measured on, as Markdown."""

from __future__ import annotations

import math
import os
import platform
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "covonaut-es",
    "eventsourcing",
    "msgspec",
    "attrs",
    "psycopg",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "langchain-core",
)

MET, MISSED, UNMEASURED, PENDING = "met", "MISSED", "not measured", "pending"


@dataclass
class Table:
    """One Markdown table; every cell is already formatted."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Target:
    """A target of the issue, and whether this run met it."""

    goal: str
    measured: str
    status: str
    explanation: str = ""


@dataclass
class Section:
    """One figure group: what was measured, its tables and its targets."""

    title: str
    intro: str
    tables: list[Table] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# Formatting ------------------------------------------------------------------------------


def missing(value: float | None) -> bool:
    """Whether a measurement is absent."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def size(n: float | None) -> str:
    """Bytes, in binary units."""
    if missing(n):
        return "-"
    assert n is not None
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}" if n / scale < 100 else f"{n / scale:.0f} {unit}"
    return f"{n:.0f} B"


def seconds(s: float | None) -> str:
    """A duration with a unit that keeps three significant digits."""
    if missing(s):
        return "-"
    assert s is not None
    if s >= 1:
        return f"{s:.3g} s" if s < 100 else f"{s:.0f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


def ratio(a: float | None, b: float | None) -> float:
    """``a / b``, NaN when either is missing."""
    if missing(a) or missing(b) or not b:
        return float("nan")
    assert a is not None
    return a / b


def times(x: float) -> str:
    """A ratio as ``12.3x``."""
    if missing(x):
        return "-"
    return f"{x:.3g}x" if x < 1000 else f"{x:.0f}x"


def rate(x: float | None) -> str:
    """Items per second."""
    if missing(x):
        return "-"
    assert x is not None
    return f"{x:,.0f}/s"


def status(ok: bool | None) -> str:
    """``met``, ``MISSED`` or ``not measured``."""
    if ok is None:
        return UNMEASURED
    return MET if ok else MISSED


def intro(doc: str | None) -> str:
    """A module docstring without its first paragraph, as Markdown paragraphs."""
    paragraphs = (doc or "").split("\n\n")[1:]
    return "\n\n".join(p.replace("\n", " ").replace("``", "`").strip() for p in paragraphs)


# The machine -----------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return size(int(line.split()[1]) * 1024)
    except OSError:
        pass
    return "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git() -> str:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{commit}{' with uncommitted changes in src/' if dirty else ''}"


def _library() -> str:
    """Where ``covonaut_es`` was imported from (a frozen copy can stand in for src/)."""
    import covonaut_es

    path = Path(covonaut_es.__file__).resolve().parent
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def machine(postgres: str) -> list[tuple[str, str]]:
    """What the figures were measured on."""
    return [
        ("nproc", str(os.cpu_count())),
        ("CPU", _cpu_model()),
        ("memory", _memory()),
        ("OS", platform.platform()),
        ("Python", sys.version.split()[0]),
        ("SQLite", sqlite3.sqlite_version),
        ("PostgreSQL", postgres),
        ("work tree commit", _git()),
        ("covonaut_es imported from", _library()),
        *((package, _version(package)) for package in PACKAGES),
    ]


# Markdown --------------------------------------------------------------------------------


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of one Markdown table."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return [line(columns), line(["---"] * len(columns)), *(line(row) for row in rows)]


CHANGES = Path(__file__).with_name("CHANGES.md")
"""What the library changed because of these benchmarks, kept by hand."""
SCALE = Path(__file__).with_name("SCALE.md")
"""The many-threads figures, written by ``scale.py`` (``make bench-scale``), run apart."""


def render(
    sections: Sequence[Section],
    machine_facts: Sequence[tuple[str, str]],
    commands: Sequence[str],
    *,
    quick: bool,
    elapsed_s: float,
    environment: str = "",
) -> str:
    """The whole report."""
    out = ["# Benchmarks", ""]
    out.append(
        f"Generated by `benchmarks/run.py` on {time.strftime('%Y-%m-%d %H:%M %Z')} "
        f"in {elapsed_s:.0f} s. Do not edit by hand: run `make bench` again."
    )
    if quick:
        out += [
            "",
            "**Quick mode** (T=5): this report only shows that the benchmarks run. Its "
            "figures say nothing about speed and no target is judged.",
        ]
    out += ["", "## Targets", ""]
    summary = [
        [section.title.split(".")[0], target.goal, target.measured, target.status]
        for section in sections
        for target in section.targets
    ]
    out += markdown_table(["Figure", "Target", "Measured", "Status"], summary)
    out += ["", "Each target's explanation is under its figure below.", ""]
    out += ["## Machine", ""]
    out += markdown_table(["", ""], [[key, value] for key, value in machine_facts])
    out += ["", "## Commands", "", "```sh"]
    if not quick:
        prefix = f"{environment} " if environment else ""
        out += [
            f"{prefix}make bench   # runs the two commands below",
            ".venv/bin/python -m pip install --quiet -e '.[bench]'",
        ]
    out += [*commands, "```", ""]
    for section in sections:
        out += [f"## {section.title}", "", section.intro, ""]
        for table in section.tables:
            out += [f"**{table.title}**", ""]
            out += [*markdown_table(table.columns, table.rows), ""] if table.columns else []
            out += [f"- {note}" for note in table.notes]
            out += [""] if table.notes else []
        for target in section.targets:
            line = f"- **{target.status}**: {target.goal}: {target.measured}."
            out += [line + (f" {target.explanation}" if target.explanation else "")]
        out += [""] if section.targets else []
        out += [f"{note}\n" for note in section.notes]
    if not quick and SCALE.exists():
        out += [SCALE.read_text().strip(), ""]
    if not quick and CHANGES.exists():
        out += [CHANGES.read_text().strip(), ""]
    return "\n".join(out).rstrip() + "\n"
