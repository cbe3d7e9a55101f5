"""The peer of the many-threads benchmark (``scale.py``): the same threads on LangGraph.

A ``StateGraph`` over ``MessagesState`` with a model node and a tool node, as figure 1's
peer (``peer.py``), checkpointed by ``SqliteSaver`` or ``PostgresSaver`` with
``durability="sync"``, one writer. Its model gives each thread the answers ours gives
(``scale.reply``); a thread that calls ``pay`` ends there with the call unanswered, as
ours stays paused on its review, so both stores hold the same messages.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from contextlib import closing
from typing import TYPE_CHECKING, Any

import scale
from peer import _saver
from workload import store_bytes

from covonaut_es import open_store

if TYPE_CHECKING:
    from harness import Progress


def _graph() -> Any:
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    def model(state: Any) -> dict[str, Any]:
        index = int(state["messages"][0].id.rsplit("-", 1)[1])  # the prompt's: human-INDEX
        turn = sum(isinstance(m, AIMessage) for m in state["messages"])
        said = scale.reply(index, turn)
        calls = [
            {"name": call.name, "args": json.loads(call.arguments), "id": call.id}
            for call in said.tool_calls
        ]
        return {"messages": [AIMessage(content=said.content, tool_calls=calls, id=f"ai-{turn}")]}

    def tools(state: Any) -> dict[str, Any]:
        answers = [
            ToolMessage(
                content=scale.lookup(call["args"]),
                tool_call_id=call["id"],
                name=call["name"],
                id=f"tool-{call['id']}",
            )
            for call in state["messages"][-1].tool_calls
        ]
        return {"messages": answers}

    def route(state: Any) -> str:
        calls = state["messages"][-1].tool_calls
        if not calls or any(call["name"] == "pay" for call in calls):
            return END
        return "tools"

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", tools)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph


def _config(index: int) -> dict[str, Any]:
    return {"configurable": {"thread_id": scale.thread_id(index)}}


def run_peer(progress: Progress, target: str, size: int, restores: int, ours: str) -> None:
    """N threads on LangGraph: the seconds to write them, bytes per thread, and the
    median ``get_state`` of a random thread (on a saver opened afresh), each taken in
    turn with ``store.load`` of the same thread from our store at URL ``ours``, so that
    both meet the machine's same moments."""
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    def invoke(graph: Any, index: int) -> None:
        prompt = HumanMessage(content=scale.PROMPT, id=f"human-{index}")
        graph.invoke({"messages": [prompt]}, _config(index), durability="sync")

    invoke(_graph().compile(checkpointer=InMemorySaver()), 1)  # warm-up
    with _saver(target) as saver:
        graph = _graph().compile(checkpointer=saver)
        start = time.perf_counter()
        for index in range(size):
            invoke(graph, index)
        progress.update(create_s=time.perf_counter() - start)
    progress.update(bytes=store_bytes(target))
    scale.vacuumed(target)
    rng = random.Random(size)
    with _saver(target) as saver, closing(open_store(ours)) as store:
        graph = _graph().compile(checkpointer=saver)
        graph.get_state(_config(0))  # each connection is open before the timings
        store.load(scale.thread_id(0))
        loads, ours_loads = [], []
        for _ in range(restores):
            chosen = rng.randrange(size)
            start = time.perf_counter()
            state = graph.get_state(_config(chosen))
            loads.append(time.perf_counter() - start)
            del state
            start = time.perf_counter()
            loaded = store.load(scale.thread_id(chosen))
            ours_loads.append(time.perf_counter() - start)
            del loaded
    progress.update(
        restore_s=statistics.median(loads), ours_restore_s=statistics.median(ours_loads)
    )
