"""A tool gets its idempotency key only once the call's record is in the store, in every
durability mode: a tool that runs can rely on its key being stored, and a commit that
fails or dies before it keeps the tool from running at all."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ScriptedProvider,
    Store,
    Tool,
    ToolContext,
    open_store,
)
from support import answer, call, call_intents, ticking_clock

OBJECT: dict[str, Any] = {"type": "object"}
DURABILITIES = ["step", "checkpoint"]


class Killed(BaseException):
    """Stands in for the process dying in a commit: nothing catches it."""


@pytest.fixture
def reader(store: Store) -> Iterator[Store]:
    """A second store object on the same database, as another process reads it."""
    if store.url.startswith("memory"):
        yield store
        return
    with open_store(store.url) as second:
        yield second


def agent_on(
    store: Store, durability: str, ran: list[tuple[str, str, bool]], reader: Store, **options: Any
) -> Agent:
    """An agent whose model calls ``note`` twice in one response, then answers; each run of
    ``note`` logs its call, its key and whether the store holds that key for the call."""

    def stored(ctx: ToolContext) -> bool:
        if not reader.exists(ctx.thread_id):
            return False
        pending = {p.call.id: p for p in reader.state_at(ctx.thread_id).open_calls}
        found = pending.get(ctx.tool_call_id)
        return found is not None and found.idempotency_key == ctx.idempotency_key

    def note(ctx: ToolContext, args: dict[str, Any]) -> Any:
        ran.append((ctx.tool_call_id, ctx.idempotency_key, stored(ctx)))
        return "noted"

    async def anote(ctx: ToolContext, args: dict[str, Any]) -> Any:
        await asyncio.sleep(0)
        return note(ctx, args)

    return Agent(
        AgentConfig(
            provider=ScriptedProvider(
                [call(("n1", "note", "{}"), ("n2", "note", "{}")), answer("done")]
            ),
            tools=[Tool("note", "Note", OBJECT, anote if options.pop("async_tool") else note)],
            checkpoint=CheckpointSettings(store=store, thread_id="t", durability=durability),
            clock=ticking_clock(),
            **options,
        )
    )


@pytest.mark.parametrize("durability", DURABILITIES)
@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("timeout", [None, 5.0], ids=["no timeout", "timeout"])
def test_a_tool_runs_only_with_a_key_the_store_holds(
    store: Store,
    reader: Store,
    durability: str,
    parallel: bool,
    driver: str,
    timeout: float | None,
) -> None:
    """Every tool that runs finds its call, with the very key it was given, in the store."""
    ran: list[tuple[str, str, bool]] = []
    agent = agent_on(
        store,
        durability,
        ran,
        reader,
        async_tool=driver == "async",
        parallel_tools=parallel,
        tool_timeout=timeout,
    )
    output = agent.run("go") if driver == "sync" else asyncio.run(agent.arun("go"))
    assert output == "done"
    assert sorted(call_id for call_id, _, _ in ran) == ["n1", "n2"]
    assert all(stored for _, _, stored in ran), ran


@pytest.mark.parametrize("durability", DURABILITIES)
@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
@pytest.mark.parametrize("death", [Killed, OSError], ids=["killed", "failed"])
def test_a_commit_that_fails_before_the_tools_runs_none(
    store: Store,
    reader: Store,
    monkeypatch: pytest.MonkeyPatch,
    durability: str,
    parallel: bool,
    death: type[BaseException],
) -> None:
    """The first save that holds the calls' records dies or fails: no tool runs, so no
    tool ever had a key that was not stored."""
    ran: list[tuple[str, str, bool]] = []
    agent = agent_on(store, durability, ran, reader, async_tool=False, parallel_tools=parallel)
    save = store.save

    def dying(thread: Any) -> None:
        if any(call_intents(thread.pending_events)):
            raise death("the commit of the calls' records")
        save(thread)

    monkeypatch.setattr(store, "save", dying)
    with pytest.raises(death):
        agent.run("go")
    assert ran == []
