"""Figure 11: the cost of streaming a turn's answer against a plain run.

One agent per mode answers the same turns, each a final answer of 100 words from a
scripted model (no network), on an in-memory store and on a SQLite file. "plain" runs
the blocking ``Agent.run``, which asks the model with ``complete()``; "on_delta" is the
same with an ``on_delta`` callback, so the answer streams word by word through the loop.
"astream" iterates ``Agent.astream`` (the stream is read in a worker thread and each
piece handed to the event loop), against "arun", the same turn awaited in one piece.
The modes run in rounds of a few turns, each mode taking each place in a round in turn
(the place alone moves the time by tens of percent); each figure is the median over
rounds of the time per turn.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from contextlib import closing
from typing import Any

from harness import Context, cli, log
from report import Section, Table, intro, ratio, seconds, times

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ProviderResponse,
    ScriptedProvider,
    open_store,
)

WORDS = 100
FULL_ROUNDS, QUICK_ROUNDS = 8, 2  # twice through every order of the modes
QUICK_TURNS = 3
TURNS = {"memory": 40, "sqlite": 10}
"""Turns per round on each store: a SQLite commit waits for the disk."""
ANSWER = " ".join(f"word{index}" for index in range(WORDS))
MODES = ("plain", "on_delta", "arun", "astream")


def _agent(url: str, mode: str) -> Agent:
    pieces: list[Any] = []
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(respond=lambda _: ProviderResponse(content=ANSWER)),
            checkpoint=CheckpointSettings(store=open_store(url), thread_id=mode),
            on_delta=pieces.append if mode == "on_delta" else None,
        )
    )


def _turns(agent: Agent, mode: str, turns: int) -> float:
    """Seconds per turn of ``turns`` turns."""
    if mode in ("plain", "on_delta"):
        start = time.perf_counter()
        for _ in range(turns):
            agent.run("go on")
        return (time.perf_counter() - start) / turns

    async def awaited() -> float:  # one event loop, as a server has
        start = time.perf_counter()
        for _ in range(turns):
            if mode == "arun":
                await agent.arun("go on")
            else:
                async for _ in agent.astream("go on"):
                    pass
        return (time.perf_counter() - start) / turns

    return asyncio.run(awaited())


def measure(url_of: Callable[[str], str], rounds: int, turns: int) -> dict[str, float]:
    """Median seconds per turn of each mode over ``rounds`` rounds of ``turns`` turns."""
    agents = {mode: _agent(url_of(mode), mode) for mode in MODES}
    per_turn: dict[str, list[float]] = {mode: [] for mode in MODES}
    for round_number in range(rounds):
        # Each mode takes each place in a round in turn: the place changes the time.
        shift = round_number % len(MODES)
        for mode in MODES[shift:] + MODES[:shift]:
            per_turn[mode].append(_turns(agents[mode], mode, turns))
    for agent in agents.values():
        assert agent.config.checkpoint is not None
        with closing(agent.config.checkpoint.store):
            agent.close()
    return {mode: statistics.median(values) for mode, values in per_turn.items()}


def run(ctx: Context) -> list[Section]:
    """Figure 11."""
    section = Section("11. Streaming", intro(__doc__))
    rounds = QUICK_ROUNDS if ctx.quick else FULL_ROUNDS
    table = Table(
        f"time per turn, an answer of {WORDS} words streamed word by word "
        f"(median of {rounds} rounds)",
        [
            "store",
            "turns a round",
            "plain (run)",
            "on_delta",
            "/ plain",
            "arun",
            "astream",
            "/ arun",
        ],
    )
    stores: dict[str, Callable[[str], str]] = {
        "memory": lambda _: "memory://",
        "sqlite": lambda mode: f"sqlite:///{ctx.workdir / f'streaming-{mode}.db'}",
    }
    for name, url_of in stores.items():
        turns = QUICK_TURNS if ctx.quick else TURNS[name]
        log(f"streaming, {name} store")
        found = measure(url_of, rounds, turns)
        table.rows.append(
            [
                name,
                str(turns),
                seconds(found["plain"]),
                seconds(found["on_delta"]),
                times(ratio(found["on_delta"], found["plain"])),
                seconds(found["arun"]),
                seconds(found["astream"]),
                times(ratio(found["astream"], found["arun"])),
            ]
        )
    table.notes.append(
        "`astream` runs its turns in one event loop, as a server does; its answers are read "
        "from the provider in a worker thread."
    )
    section.tables.append(table)
    return [section]


if __name__ == "__main__":
    raise SystemExit(cli([run]))
