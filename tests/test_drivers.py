"""The async runtime: arun, acontinue_run, aresume and asettle drive the same run loop
as the blocking methods, with sync or async providers and tools, on every store."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    InterruptError,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Store,
    ThreadStatus,
    Tool,
    ToolCallsInDoubtError,
    ToolContext,
    open_store,
)
from covonaut_es.domain import ToolOutcome
from covonaut_es.errors import NotInterruptedError, ProviderError, ThreadStateError
from support import (
    OBJECT_SCHEMA,
    AsyncScriptedProvider,
    answer,
    call,
    call_intents,
    echo_tool,
    review_tool,
    ticking_clock,
)

THREADS = 50


def async_agent(store: Store, script: list[Any], thread_id: str = "t", **options: Any) -> Agent:
    options.setdefault("tools", [echo_tool(), review_tool()])
    return Agent(
        AgentConfig(
            provider=options.pop("provider", None) or AsyncScriptedProvider(script),
            model="m",
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            clock=ticking_clock(),
            **options,
        )
    )


def async_tool(name: str, func: Callable[[ToolContext, dict[str, Any]], Any]) -> Tool:
    return Tool(name, f"The async tool {name}", OBJECT_SCHEMA, func)


def tool_outcomes(store: Store, thread_id: str) -> dict[str, ToolOutcome]:
    return {
        e.tool_call_id: e.outcome
        for e in store.history(thread_id)
        if hasattr(e, "outcome")  # ToolResultRecorded and ToolCallSettled
    }


def test_arun_with_an_async_provider_and_an_async_tool(store: Store) -> None:
    """arun awaits an async provider and an async tool and returns the final answer."""
    seen: list[str] = []

    async def lookup(ctx: ToolContext, args: dict[str, Any]) -> Any:
        await asyncio.sleep(0)
        seen.append(ctx.tool_call_id)
        return {"found": True}

    script = [call(("c1", "lookup", "{}")), answer("found it")]
    agent = async_agent(store, script, tools=[async_tool("lookup", lookup)])
    assert asyncio.run(agent.arun("find it")) == "found it"
    assert seen == ["c1"]
    assert agent.messages[-2].content == '{"found":true}'
    assert store.state_at("t") == agent.state


def test_arun_runs_blocking_providers_and_tools_off_the_event_loop(store: Store) -> None:
    """A blocking provider and a blocking tool run in worker threads, not on the loop."""
    threads: dict[str, int] = {}

    def respond(request: ProviderRequest) -> ProviderResponse:
        threads.setdefault("provider", threading.get_ident())
        return answer("done") if len(request.messages) > 2 else call(("c1", "where", "{}"))

    def where(ctx: ToolContext, args: dict[str, Any]) -> Any:
        threads["tool"] = threading.get_ident()
        return "here"

    agent = async_agent(
        store,
        [],
        provider=ScriptedProvider(respond=respond),
        tools=[Tool("where", "Where it runs", OBJECT_SCHEMA, where)],
    )

    async def main() -> str:
        threads["loop"] = threading.get_ident()
        return await agent.arun("go")

    assert asyncio.run(main()) == "done"
    assert threads["provider"] != threads["loop"]
    assert threads["tool"] != threads["loop"]


def test_acomplete_is_preferred_to_complete_under_asyncio(store: Store) -> None:
    """A provider with an async acomplete is awaited through it by arun; run uses its
    blocking complete."""

    class TwoWayProvider:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def complete(self, request: ProviderRequest) -> ProviderResponse:
            self.calls.append("complete")
            return answer("blocking")

        async def acomplete(self, request: ProviderRequest) -> ProviderResponse:
            self.calls.append("acomplete")
            return answer("awaited")

    provider = TwoWayProvider()
    agent = async_agent(store, [], provider=provider)
    assert asyncio.run(agent.arun("one")) == "awaited"
    assert agent.run("two") == "blocking"
    assert provider.calls == ["acomplete", "complete"]


def test_blocking_run_accepts_async_providers_and_tools(store: Store) -> None:
    """run() runs an async provider and an async tool to completion itself."""

    async def shout(ctx: ToolContext, args: dict[str, Any]) -> Any:
        await asyncio.sleep(0)
        return "HEY"

    script = [call(("s1", "shout", "{}")), answer("shouted")]
    agent = async_agent(store, script, tools=[async_tool("shout", shout)])
    assert agent.run("go") == "shouted"
    assert agent.messages[-2].content == "HEY"


def test_parallel_async_tools_run_concurrently_under_asyncio(store: Store) -> None:
    """The async calls of one batch run as concurrent tasks: each waits at a
    barrier that only opens when all three are running at once."""
    barrier = asyncio.Barrier(3)

    async def meet(ctx: ToolContext, args: dict[str, Any]) -> Any:
        await asyncio.wait_for(barrier.wait(), timeout=10)
        return "met"

    batch = call(("m1", "meet", "{}"), ("m2", "meet", "{}"), ("m3", "meet", "{}"))
    agent = async_agent(
        store, [batch, answer("all met")], tools=[async_tool("meet", meet)], parallel_tools=True
    )
    assert asyncio.run(agent.arun("go")) == "all met"
    assert set(tool_outcomes(store, "t").values()) == {ToolOutcome.SUCCEEDED}


def test_parallel_async_batch_records_every_result_when_one_interrupts(store: Store) -> None:
    """Under asyncio too, the other calls of a batch are recorded when one
    interrupts; aresume continues from the recorded results."""
    executions: list[str] = []

    async def pause(ctx: ToolContext, args: dict[str, Any]) -> Any:
        executions.append(ctx.tool_call_id)
        raise InterruptError("needs a person", {"call": ctx.tool_call_id})

    batch = call(("e1", "echo", '{"text": "a"}'), ("p1", "pause", "{}"))
    agent = async_agent(
        store,
        [batch, answer("resumed")],
        tools=[echo_tool(), async_tool("pause", pause)],
        parallel_tools=True,
    )
    assert asyncio.run(agent.arun("go")) == ""
    assert agent.interrupted is not None and agent.interrupted.data == {"call": "p1"}
    assert tool_outcomes(store, "t") == {
        "e1": ToolOutcome.SUCCEEDED,
        "p1": ToolOutcome.INTERRUPTED,
    }
    agent.steer("approved")
    assert asyncio.run(agent.aresume()) == "resumed"
    assert executions == ["p1"]
    assert agent.status is ThreadStatus.FINISHED


def test_aresume_and_acontinue_run_follow_the_blocking_rules(store: Store) -> None:
    """``aresume`` needs a pending interrupt; acontinue_run appends no user message."""
    agent = async_agent(store, [answer("first"), answer("second")])
    asyncio.run(agent.arun("go"))
    with pytest.raises(NotInterruptedError):
        asyncio.run(agent.aresume())
    count = len(agent.messages)
    assert asyncio.run(agent.acontinue_run()) == "second"
    assert len(agent.messages) == count + 1


def test_an_async_provider_failure_is_recorded_and_raised(store: Store) -> None:
    """An async provider's exception is recorded as RunFailed and raised as a
    ProviderError, as with a blocking provider."""
    agent = async_agent(store, [TimeoutError("model too slow")])
    with pytest.raises(ProviderError, match="model too slow"):
        asyncio.run(agent.arun("go"))
    assert store.state_at("t").status is ThreadStatus.ERROR


def test_one_agent_runs_one_command_at_a_time_under_asyncio(store: Store) -> None:
    """A second command on an agent that is running raises ThreadStateError."""
    release = asyncio.Event()

    async def slow(ctx: ToolContext, args: dict[str, Any]) -> Any:
        await release.wait()
        return "slow"

    agent = async_agent(
        store, [call(("s1", "slow", "{}")), answer("done")], tools=[async_tool("slow", slow)]
    )

    async def main() -> str:
        first = asyncio.create_task(agent.arun("one"))
        while not agent.in_doubt:  # the call is recorded; the tool is waiting
            await asyncio.sleep(0.01)
        with pytest.raises(ThreadStateError, match="already running"):
            await agent.arun("two")
        release.set()
        return await first

    assert asyncio.run(main()) == "done"


def test_asettle_records_a_result_or_retries_with_the_same_key(store: Store) -> None:
    """``asettle`` settles calls in doubt like settle: with a found result, or by
    running the (async) tool again with the same idempotency key."""
    keys: list[str] = []

    async def charge(ctx: ToolContext, args: dict[str, Any]) -> Any:
        keys.append(ctx.idempotency_key)
        if len(keys) == 1:
            raise SystemExit("the process dies after the side effect")
        return "charged"

    script = [call(("c1", "charge", "{}"), ("c2", "charge", "{}")), answer("both settled")]
    tools = [async_tool("charge", charge)]
    with pytest.raises(SystemExit):
        asyncio.run(async_agent(store, script, tools=tools).arun("charge twice"))

    agent = async_agent(store, script[1:], tools=tools)
    asyncio.run(agent.arestore_latest_checkpoint())
    assert [p.call.id for p in agent.in_doubt] == ["c1", "c2"]
    with pytest.raises(ToolCallsInDoubtError):
        asyncio.run(agent.acontinue_run())
    first_key = agent.in_doubt[0].idempotency_key
    asyncio.run(agent.asettle("c1", retry=True))
    asyncio.run(agent.asettle("c2", result={"charged": False}))
    assert keys == [first_key, first_key]
    assert tool_outcomes(store, "t") == {"c1": ToolOutcome.SUCCEEDED, "c2": ToolOutcome.SETTLED}
    assert asyncio.run(agent.acontinue_run()) == "both settled"


def test_asave_checkpoint_and_store_twins_give_what_the_blocking_calls_give(
    store: Store,
) -> None:
    """The awaitable twins of the agent's and the store's I/O return the same as the
    blocking calls."""
    agent = async_agent(store, [answer("done")])

    async def main() -> None:
        await agent.arun("go")
        assert await agent.asave_checkpoint() == 2
        assert await store.aload("t") is not None
        assert await store.afind("missing") is None
        assert await store.aexists("t")
        assert await store.acheckpoints("t") == store.checkpoints("t")
        assert await store.ahistory("t") == store.history("t")
        assert await store.astate_at("t", 3) == store.state_at("t", 3)
        assert await store.areplay_state("t") == store.state_at("t")

    asyncio.run(main())


def test_on_event_runs_on_the_event_loop_thread_under_asyncio(store: Store) -> None:
    """Under asyncio, on_event is called on the loop's thread while the store I/O runs
    in workers, so a live view can feed an asyncio.Queue directly."""
    callers: set[int] = set()
    queue: asyncio.Queue[str] = asyncio.Queue()

    def on_event(event: Any) -> None:
        callers.add(threading.get_ident())
        queue.put_nowait(type(event).__name__)

    agent = async_agent(store, [answer("done")], on_event=on_event)

    async def main() -> int:
        await agent.arun("go")
        return threading.get_ident()

    assert callers == {asyncio.run(main())}
    assert queue.qsize() == store.state_at("t").version


def test_cancelling_arun_leaves_the_started_calls_in_doubt(store: Store) -> None:
    """A cancelled run stops; the calls it recorded but never finished are in doubt,
    never silently re-run."""
    started = asyncio.Event()

    async def hang(ctx: ToolContext, args: dict[str, Any]) -> Any:
        started.set()
        await asyncio.Event().wait()

    script = [call(("h1", "hang", "{}"), ("h2", "hang", "{}"))]
    agent = async_agent(store, script, tools=[async_tool("hang", hang)], parallel_tools=True)

    async def main() -> None:
        run = asyncio.create_task(agent.arun("go"))
        await started.wait()
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(main())
    assert sorted(p.call.id for p in store.load("t").in_doubt) == ["h1", "h2"]


def test_fifty_threads_run_concurrently_in_one_event_loop(shared_url: str) -> None:
    """Fifty agents on 50 threads run at once in one event loop against one store,
    with an async provider and async tools; each ends in exactly its own state.

    Every run's first tool call waits at a barrier that opens only when all 50 runs
    are in flight; every fifth thread is also interrupted and resumed.
    """
    barrier = asyncio.Barrier(THREADS)

    async def gather(ctx: ToolContext, args: dict[str, Any]) -> Any:
        await asyncio.wait_for(barrier.wait(), timeout=60)
        return {"thread": ctx.thread_id}

    async def note(ctx: ToolContext, args: dict[str, Any]) -> Any:
        await asyncio.sleep(0)
        if args.get("review"):
            raise InterruptError("review this thread", {"thread": ctx.thread_id})
        return "noted"

    tools = [async_tool("gather", gather), async_tool("note", note)]

    def script(n: int) -> list[ProviderResponse]:
        review = "true" if n % 5 == 0 else "false"
        batch = call(("g", "gather", "{}"), ("n", "note", f'{{"review": {review}}}'))
        return [batch, answer(f"thread {n} done", tokens=n + 1)]

    async def converse(store: Store, n: int) -> Agent:
        agent = async_agent(store, script(n), f"user-{n}", tools=tools, parallel_tools=n % 2 == 0)
        output = await agent.arun(f"hello from {n}")
        if n % 5 == 0:
            assert output == "" and agent.interrupted is not None
            assert agent.interrupted.data == {"thread": f"user-{n}"}
            agent.steer("reviewed")
            output = await agent.aresume()
        assert output == f"thread {n} done"
        return agent

    async def main(store: Store) -> list[Agent]:
        return await asyncio.gather(*(converse(store, n) for n in range(THREADS)))

    with open_store(shared_url) as store:
        agents = asyncio.run(main(store))
    with open_store(shared_url) as store:
        assert sorted(store.thread_ids()) == sorted(f"user-{n}" for n in range(THREADS))
        for n, agent in enumerate(agents):
            state = store.state_at(f"user-{n}")
            assert state == agent.state == store.replay_state(f"user-{n}")
            assert state.status is ThreadStatus.FINISHED
            assert state.usage.input_tokens == n + 1
            users = [m.content for m in state.messages if m.role is Role.USER]
            assert users == [f"hello from {n}"] + (["reviewed"] if n % 5 == 0 else [])
            results = {m.tool_call_id: m.content for m in state.messages if m.role is Role.TOOL}
            assert results["g"] == f'{{"thread":"user-{n}"}}'
            assert state.open_calls == () and state.interrupts == ()


@pytest.mark.parametrize("driver", ["blocking", "async"])
def test_parallel_results_are_recorded_in_the_order_the_model_asked(
    store: Store, driver: str
) -> None:
    """A batch's results are stored and sent back in call order, not finishing order,
    and every intent is stored before any tool runs."""
    fast_done = threading.Event()

    def slow(ctx: ToolContext, args: dict[str, Any]) -> Any:
        assert fast_done.wait(timeout=10)
        time.sleep(0.1)  # the fast call's report is surely in before this one
        return "slow"

    def fast(ctx: ToolContext, args: dict[str, Any]) -> Any:
        fast_done.set()
        return "fast"

    provider = AsyncScriptedProvider(
        [call(("s1", "slow", "{}"), ("u1", "nope", "{}"), ("f1", "fast", "{}")), answer("ok")]
    )
    tools = [Tool("slow", "Slow", OBJECT_SCHEMA, slow), Tool("fast", "Fast", OBJECT_SCHEMA, fast)]
    agent = async_agent(store, [], provider=provider, tools=tools, parallel_tools=True)
    output = agent.run("go") if driver == "blocking" else asyncio.run(agent.arun("go"))
    assert output == "ok"
    kinds = [(type(e).__name__, getattr(e, "tool_call_id", "")) for e in store.history("t")]
    results = [call_id for kind, call_id in kinds if kind.startswith("ToolResult")]
    assert results == ["s1", "u1", "f1"]
    assert kinds[-3] == ("ToolResultCheckpointed", "f1")  # the last saves the checkpoint
    first_result = kinds.index(("ToolResultRecorded", "s1"))
    intents = call_intents(store.history("t")[:first_result])
    assert [call_id for call_id, _ in intents] == ["s1", "u1", "f1"]
    sent = [m.tool_call_id for m in provider.requests[-1].messages if m.role is Role.TOOL]
    assert sent == ["s1", "u1", "f1"]
