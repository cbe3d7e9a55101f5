"""Train the zstd dictionary a store compresses its event payloads with (ADR 0061).

The samples are the payloads this library itself stores for threads run end to end on
a store without compression: runs with tool calls (parallel ones too), reviews approved
with edited arguments, rejected and answered in the tool's place, steering, labels and
forks. Every value in them is generated from a fixed seed: words of random letters,
tool names and arguments of random shapes, token counts. So the dictionary learns what
every payload repeats (field names, topics, the shape of chain links and times), and
nothing of a user's text or of the benchmark's; the same code gives the same bytes.

Run it after a change to what events hold, from the repository's root::

    PYTHONPATH=src python scripts/train_event_dictionary.py --check  # exit 1 if stale
    PYTHONPATH=src python scripts/train_event_dictionary.py          # rewrite it

The shipped dictionary is stale when one trained from today's events compresses the
events of other generated threads (another seed, never trained on) more than
:data:`STALE_GAIN` better: a change to what events hold that compresses as well keeps
it. Shipping a new dictionary needs a new id, kept beside the old one for the stores it
compressed (see ``covonaut_es/store/_dictionary.py``), so it is worth a real gain only.
Training needs ``zstandard`` (a dependency before Python 3.14; install it on 3.14+).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import zstandard

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ProviderResponse,
    ScriptedProvider,
    Store,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)
from covonaut_es.messages import Usage
from covonaut_es.service import ThreadService
from covonaut_es.store._dictionary import DICTIONARY_FILE

DICTIONARY_ID = 610_001
"""The id the dictionary's frames name: zstd leaves ids below 32,768 to its own."""
DICTIONARY_SIZE = 16 * 1024
SEED = 61
THREADS = 240
HELD_OUT_SEED = 62
HELD_OUT_THREADS = 60
"""The threads the dictionaries are compared on: generated as the samples are, from
another seed."""
STALE_GAIN = 0.02
"""How much fewer bytes a dictionary trained now must give the held-out threads' events
than the shipped one for the shipped one to be stale."""
OUTPUT = Path(__file__).resolve().parents[1] / "src" / "covonaut_es" / "store" / DICTIONARY_FILE
REVIEWER_SECRET = b"event-dictionary-reviewer-secret!!"
LETTERS = "abcdefghijklmnopqrstuvwxyz"


class Generated:
    """Values drawn from one seeded generator: the same on every run."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)

    def word(self) -> str:
        return "".join(self.random.choices(LETTERS, k=self.random.randint(1, 11)))

    def text(self, low: int = 3, high: int = 60) -> str:
        words = [self.word() for _ in range(self.random.randint(low, high))]
        return " ".join(words).capitalize() + self.random.choice(".?!")

    def value(self, depth: int = 0) -> Any:
        kind = self.random.randrange(7 if depth < 2 else 5)
        if kind == 0:
            return self.random.randint(-1000, 10**6)
        if kind == 1:
            return round(self.random.uniform(-1000, 1000), self.random.randint(0, 6))
        if kind == 2:
            return self.random.choice([True, False, None])
        if kind in (3, 4):
            return self.text(1, 8)
        if kind == 5:
            return [self.value(depth + 1) for _ in range(self.random.randint(0, 4))]
        return self.arguments(depth + 1)

    def arguments(self, depth: int = 0) -> dict[str, Any]:
        return {self.word(): self.value(depth) for _ in range(self.random.randint(0, 5))}

    def usage(self) -> Usage | None:
        if self.random.random() < 0.3:
            return None
        return Usage(self.random.randint(10, 200_000), self.random.randint(1, 4000))


def clock() -> Callable[[], datetime]:
    """Distinct times a few milliseconds to seconds apart, from a fixed origin."""
    times = random.Random(SEED + 1)
    now = [datetime(2026, 1, 1, tzinfo=UTC)]

    def tick() -> datetime:
        now[0] += timedelta(microseconds=times.randint(1, 5_000_000))
        return now[0]

    return tick


def run_threads(store: Store, gen: Generated, threads: int) -> None:
    """Run ``threads`` threads of generated conversation on ``store``."""
    names = [gen.word() + "_" + gen.word() for _ in range(12)]
    tools = [
        Tool(name, gen.text(2, 12), {"type": "object"}, _echo, requires_approval=i == 0)
        for i, name in enumerate(names)
    ]
    verifier = HmacReviewerVerifier(REVIEWER_SECRET, clock=lambda: 1_800_000_000.0)
    calls = itertools.count()

    def call(name: str | None = None) -> ToolCall:
        tool = name or gen.random.choice(names[1:])
        arguments = json.dumps(gen.arguments(), ensure_ascii=gen.random.random() < 0.5)
        return ToolCall(f"call_{next(calls):05d}{gen.word()}", tool, arguments)

    def respond(calls_made: tuple[ToolCall, ...] = ()) -> ProviderResponse:
        text = gen.text() if not calls_made or gen.random.random() < 0.3 else ""
        return ProviderResponse(
            content=text,
            tool_calls=calls_made,
            usage=gen.usage(),
            finish_reason="tool_calls" if calls_made else "stop",
            model=gen.random.choice(["", gen.word() + "-" + str(gen.random.randint(1, 9))]),
        )

    def agent(thread_id: str, script: list[ProviderResponse]) -> Agent:
        return Agent(
            AgentConfig(
                provider=ScriptedProvider(script),
                model=gen.word(),
                tools=tools,
                max_turns=50,
                system_prompt=gen.text(),
                checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
                clock=store.clock,
                reviewer_verifier=verifier,
            )
        )

    token = verifier.issue_token(gen.word(), 3600)
    for number in range(threads):
        thread_id = f"{gen.word()}-{number}"
        script = [
            respond(tuple(call() for _ in range(gen.random.choice([1, 1, 1, 2, 3]))))
            for _ in range(gen.random.randint(0, 6))
        ]
        shape = number % 6
        if shape == 0:  # a review, decided one of three ways
            agent(thread_id, [*script, respond((call(names[0]),))]).run(gen.text())
            decided = agent(thread_id, [respond()])
            review = decided.pending_reviews[0].review_id
            way = number % 18 // 6
            if way == 0:
                decided.approve(
                    review, reviewer=token, comment=gen.text(), arguments=gen.arguments()
                )
            elif way == 1:
                decided.reject(review, reviewer=token, reason=gen.text())
            else:
                decided.respond(review, reviewer=token, answer=gen.text())
            decided.resume()
            continue
        agent(thread_id, [*script, respond()]).run(gen.text())
        if shape == 1:  # steered on
            steered = agent(thread_id, [respond((call(),)), respond()])
            steered.steer(gen.text())
            steered.continue_run()
        elif shape == 2:  # labelled and forked
            ThreadService(store).label(thread_id, gen.word())
            fork = store.fork(thread_id, new_thread_id=f"{thread_id}-fork")
            agent(fork, [respond()]).run(gen.text())


def _echo(ctx: ToolContext, args: dict[str, Any]) -> Any:
    return {"echo": args}


def samples(seed: int = SEED, threads: int = THREADS) -> list[bytes]:
    """Every event payload of ``threads`` threads generated from ``seed``, as a store
    without compression keeps it."""
    gen = Generated(seed)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "samples.db"
        with open_store(f"sqlite:///{path}", compress="none", clock=clock()) as store:
            run_threads(store, gen, threads)
        with contextlib.closing(sqlite3.connect(path)) as db:
            rows = db.execute("SELECT state FROM stored_events ORDER BY rowid").fetchall()
    return [bytes(state) for (state,) in rows]


def train() -> bytes:
    """The dictionary, trained with fixed parameters on one thread, so that the same
    samples give the same bytes (k and d are those zstd's own search picked for these
    samples: a search of 16 KiB to 32 KiB of dictionary gained under 1% on held-out
    generated threads)."""
    trained = zstandard.train_dictionary(
        DICTIONARY_SIZE, samples(), k=1106, d=8, dict_id=DICTIONARY_ID, threads=1, level=3
    )
    return trained.as_bytes()


def compressed_bytes(dictionary: bytes, payloads: list[bytes]) -> int:
    """The bytes of ``payloads``, each in a frame of its own with ``dictionary``, as a
    store compresses them."""
    compressor = zstandard.ZstdCompressor(
        level=3, dict_data=zstandard.ZstdCompressionDict(dictionary), write_checksum=True
    )
    return sum(len(compressor.compress(payload)) for payload in payloads)


def gain(shipped: bytes, trained: bytes) -> float:
    """How much fewer bytes ``trained`` gives the held-out threads' events than
    ``shipped`` (a fraction of ``shipped``'s bytes)."""
    held_out = samples(HELD_OUT_SEED, HELD_OUT_THREADS)
    return 1 - compressed_bytes(trained, held_out) / compressed_bytes(shipped, held_out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args()
    content = train()
    if args.check:
        if not OUTPUT.is_file():
            print(f"{OUTPUT.name}: missing, run this script")
            return 1
        found = gain(OUTPUT.read_bytes(), content)
        verdict = "stale, run this script" if found > STALE_GAIN else "current"
        print(
            f"{OUTPUT.name}: {verdict} (a dictionary trained now gives held-out threads' "
            f"events {found:.1%} fewer bytes; stale above {STALE_GAIN:.0%})"
        )
        return 1 if found > STALE_GAIN else 0
    OUTPUT.write_bytes(content)
    print(f"wrote {OUTPUT} ({len(content)} bytes, id {DICTIONARY_ID})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
