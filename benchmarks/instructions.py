"""Save and restore in CPU instructions, counted by valgrind's callgrind.

Instruction counts do not change with what else the machine runs, so two source trees
can be compared on a shared machine, one after the other::

    python benchmarks/instructions.py --src /path/to/checkout

runs this script under ``valgrind --tool=callgrind`` with ``PYTHONPATH=<src>/src`` (and
this folder, for the workload) and prints:

- save per turn: a run of the benchmark workload (``workload.py``: one tool call per
  turn) of ``--turns`` turns into a fresh SQLite file, less one of ``--short`` turns,
  divided by the difference; what a process pays for a turn beyond starting up (both
  runs make the texts of ``--turns`` turns first, so that making them cancels out);
- restore per load: ``--loads`` calls of ``store.load`` on a freshly opened SQLite
  store holding one thread of ``--threads-turns`` turns (written beforehand, outside
  valgrind, by the same tree), less ``--few`` of them, divided by the difference.

Only the public API is used, so the script runs against any tree since the store took
its current interface. ``--keep DIR`` keeps callgrind's output files for
``callgrind_annotate``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_turns(db: Path, turns: int, texts: int) -> None:
    """One run of the workload of ``turns`` turns into the SQLite file ``db``, after
    making the model's and the tool's texts of ``texts`` turns."""
    from workload import PROMPT, Model, agent_config, prepare

    from covonaut_es import Agent, open_store

    prepare(texts)
    with closing(open_store(f"sqlite:///{db}")) as store:
        Agent(agent_config(store, Model(turns))).run(PROMPT)


def load_times(db: Path, loads: int) -> None:
    """``loads`` restores of the workload's thread from a freshly opened store."""
    from workload import THREAD_ID

    from covonaut_es import open_store

    with closing(open_store(f"sqlite:///{db}")) as store:
        for _ in range(loads):
            store.load(THREAD_ID)


def _environment(src: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src / "src")  # this folder is on the path as the script's
    env["PYTHONHASHSEED"] = "0"  # the same dict and set layouts in every run
    return env


def _child(src: Path, *args: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--src", str(src), "--child", *args]


def instructions(src: Path, out: Path, *args: str) -> int:
    """Instructions callgrind counts for a child run of this script with ``args``."""
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *_child(src, *args)]
    subprocess.run(command, env=_environment(src), check=True, capture_output=True)
    for line in out.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    msg = f"no instruction total in {out}"
    raise RuntimeError(msg)


def measure(args: argparse.Namespace, work: Path, keep: Path) -> tuple[float, float]:
    """(instructions per turn of save, instructions per load of restore)."""
    counts: dict[str, int] = {}
    for turns in (args.short, args.turns):
        db = work / f"save-{turns}.db"
        counts[f"save-{turns}"] = instructions(
            args.src, keep / f"callgrind.save-{turns}", "save", str(turns), str(db), str(args.turns)
        )
    thread = work / "restore.db"
    subprocess.run(
        _child(args.src, "save", str(args.threads_turns), str(thread), str(args.threads_turns)),
        env=_environment(args.src),
        check=True,
    )
    for loads in (args.few, args.loads):
        counts[f"load-{loads}"] = instructions(
            args.src, keep / f"callgrind.load-{loads}", "load", str(loads), str(thread), "0"
        )
    save = (counts[f"save-{args.turns}"] - counts[f"save-{args.short}"]) / (args.turns - args.short)
    restore = (counts[f"load-{args.loads}"] - counts[f"load-{args.few}"]) / (args.loads - args.few)
    return save, restore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=HERE.parent, help="the source tree")
    parser.add_argument("--turns", type=int, default=220)
    parser.add_argument("--short", type=int, default=20)
    parser.add_argument("--threads-turns", type=int, default=1000)
    parser.add_argument("--loads", type=int, default=12)
    parser.add_argument("--few", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="keep callgrind's output files here")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.src = args.src.resolve()
    if args.child:
        mode, count, db, texts = args.child
        if mode == "save":
            run_turns(Path(db), int(count), int(texts))
        else:
            load_times(Path(db), int(count))
        return
    with tempfile.TemporaryDirectory() as work:
        keep = args.keep or Path(work)
        keep.mkdir(parents=True, exist_ok=True)
        save, restore = measure(args, Path(work), keep)
    print(f"source: {args.src}")
    print(f"save per turn: {save:,.0f} instructions")
    print(f"restore per load: {restore:,.0f} instructions")


if __name__ == "__main__":
    main()
