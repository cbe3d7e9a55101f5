"""The peer: the same workload on LangGraph.

A ``StateGraph`` with a model node and a tool node over ``MessagesState`` (or, where the
installed LangGraph has it, over a messages channel that is the opt-in
``DeltaChannel``), checkpointed by ``SqliteSaver`` or ``PostgresSaver`` with
``durability="sync"``. The tool node is a plain function that answers each tool call
of the last message, not the prebuilt ``ToolNode``: it keeps LangGraph's figures at
their lowest overhead, so the comparison does not flatter us. Message ids are set
explicitly, as a provider's would be (``DeltaChannel``'s reducer needs them).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import TYPE_CHECKING, Any

from workload import (
    PROMPT,
    REPEAT_LOADS,
    THREAD_ID,
    TOOL_NAME,
    WARMUP_TURNS,
    answer,
    arguments,
    flatness,
    median,
    prepare,
    row_bytes,
    store_bytes,
    tool_result,
)

if TYPE_CHECKING:
    from harness import Progress


def langgraph_missing() -> str | None:
    """Why the LangGraph side cannot run here, or None when it can."""
    import importlib.util

    for module in ("langgraph", "langgraph.checkpoint.sqlite", "langgraph.checkpoint.postgres"):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"{module} is not installed (`pip install -e '.[bench]'` or `make bench`)"
    return None


def langgraph_has_delta() -> bool:
    """Whether the installed LangGraph has the opt-in ``DeltaChannel``."""
    try:
        from langgraph.channels import DeltaChannel  # noqa: F401
    except ImportError:
        return False
    return True


def _langgraph_graph(delta: bool, turns: int, stamps: list[float]) -> Any:
    """A ``StateGraph`` with a model node and a tool node over ``MessagesState`` (or
    over a messages channel that is a ``DeltaChannel``)."""
    from typing import Annotated, TypedDict

    from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    state_schema: Any = MessagesState
    if delta:
        from langgraph.channels import DeltaChannel
        from langgraph.graph.message import _messages_delta_reducer

        channel = DeltaChannel(_messages_delta_reducer)
        # The functional form: under `from __future__ import annotations` a class body's
        # annotations are strings that LangGraph could not resolve to this local channel.
        state_schema = TypedDict(  # type: ignore[operator]  # noqa: UP013
            "DeltaMessagesState", {"messages": Annotated[list[AnyMessage], channel]}
        )

    def model(state: Any) -> dict[str, Any]:
        turn = len(stamps)
        stamps.append(time.perf_counter())
        if turn < turns:
            call = {"name": TOOL_NAME, "args": json.loads(arguments(turn)), "id": f"call_{turn}"}
            message = AIMessage(content=answer(turn), tool_calls=[call], id=f"ai-{turn}")
        else:
            message = AIMessage(content=answer(turn), id=f"ai-{turn}")
        return {"messages": [message]}

    def tools(state: Any) -> dict[str, Any]:
        return {
            "messages": [
                ToolMessage(
                    content=tool_result(int(call["args"]["n"])),
                    tool_call_id=call["id"],
                    name=call["name"],
                    id=f"tool-{call['id']}",
                )
                for call in state["messages"][-1].tool_calls
            ]
        }

    def route(state: Any) -> str:
        return "tools" if state["messages"][-1].tool_calls else END

    graph = StateGraph(state_schema)
    graph.add_node("model", model)
    graph.add_node("tools", tools)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph


@contextmanager
def _saver(target: str) -> Iterator[Any]:
    if target.startswith("postgresql://"):
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(target) as saver:
            saver.setup()
            yield saver
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(target) as saver:
            yield saver


def _invoke(graph: Any, turns: int, thread_id: str = THREAD_ID) -> None:
    from langchain_core.messages import HumanMessage

    config = {"configurable": {"thread_id": thread_id}, "recursion_limit": 2 * turns + 10}
    graph.invoke(
        {"messages": [HumanMessage(content=PROMPT, id="human-0")]}, config, durability="sync"
    )


def run_langgraph(
    progress: Progress,
    target: str,
    turns: int,
    delta: bool,
    history: bool = True,
    fork: bool = True,
) -> None:
    """The same thread on LangGraph with ``SqliteSaver`` or ``PostgresSaver`` (synchronous
    durability); then its size, ``get_state`` and ``get_state_history`` times, and a
    fork of its middle checkpoint."""
    from langgraph.checkpoint.memory import InMemorySaver

    warm: list[float] = []
    _invoke(_langgraph_graph(delta, WARMUP_TURNS, warm).compile(InMemorySaver()), WARMUP_TURNS)
    prepare(turns)
    stamps: list[float] = []
    with _saver(target) as saver:
        graph = _langgraph_graph(delta, turns, stamps).compile(checkpointer=saver)
        start = time.perf_counter()
        _invoke(graph, turns)
        wall = time.perf_counter() - start
    first, last, flat = flatness(stamps)
    progress.update(turns=turns, wall_s=wall, first_turn_s=first, last_turn_s=last, flatness=flat)
    progress.update(bytes=store_bytes(target))
    config = {"configurable": {"thread_id": THREAD_ID}}
    with _saver(target) as saver:
        graph = _langgraph_graph(delta, turns, []).compile(checkpointer=saver)
        snapshot = graph.get_state(config)  # opens the saver's connection, as ours does
        loads = []
        for _ in range(REPEAT_LOADS):  # each result dropped after its timing, as ours
            start = time.perf_counter()
            loaded = graph.get_state(config)
            loads.append(time.perf_counter() - start)
            del loaded
        progress.update(restore_s=median(loads), messages=len(snapshot.values["messages"]))
        if history:
            start = time.perf_counter()
            count = sum(1 for _ in graph.get_state_history(config))
            progress.update(history_s=time.perf_counter() - start, history_items=count)
        if fork:
            progress.update(**_fork(graph, target))


def _checkpoint_ids(target: str) -> list[str]:
    """The thread's checkpoint ids in order (they are time-ordered UUIDs), by bare SQL."""
    query = "SELECT checkpoint_id FROM checkpoints WHERE thread_id = {} ORDER BY checkpoint_id"
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target) as conn:
            return [row[0] for row in conn.execute(query.format("%s"), (THREAD_ID,))]  # type: ignore[arg-type]
    with closing(sqlite3.connect(target)) as con:
        return [row[0] for row in con.execute(query.format("?"), (THREAD_ID,))]


def _fork(graph: Any, target: str) -> dict[str, Any]:
    """LangGraph's fork: ``update_state`` on the middle checkpoint, then ``get_state`` of
    the new branch."""
    try:
        ids = _checkpoint_ids(target)
        middle = {
            "configurable": {
                "thread_id": THREAD_ID,
                "checkpoint_ns": "",
                "checkpoint_id": ids[len(ids) // 2],
            }
        }
        before = row_bytes(target)
        start = time.perf_counter()
        branch = graph.update_state(middle, {"messages": []})
        fork_s = time.perf_counter() - start
        start = time.perf_counter()
        graph.get_state(branch)
        load_s = time.perf_counter() - start
        return {"fork_s": fork_s, "fork_load_s": load_s, "fork_bytes": row_bytes(target) - before}
    except Exception as exc:  # a peer API change must not lose the other figures
        return {"fork_error": f"{type(exc).__name__}: {exc}"}
