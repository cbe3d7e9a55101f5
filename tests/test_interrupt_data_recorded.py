"""Whatever a tool's ``InterruptError`` carries, its call either pauses the thread with
data every store keeps, or fails with a result that says why: a paused thread always
exports into a file that a fresh store imports, to the same state (the threat model's
promise of every thread). An integer past 64 bits was recorded, and its thread's
export then imported into no store."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    InterruptError,
    ScriptedProvider,
    Tool,
    ToolContext,
    open_store,
)
from covonaut_es.audit import export_thread, import_threads
from support import answer, call

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63 - 2, max_value=2**64 + 1)
    | st.integers(min_value=-(2**63) - 1, max_value=-(2**63) + 1)
    | st.floats()
    | st.text(st.characters(codec=None, exclude_categories=()), max_size=5)
)
_DATA = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        | st.frozensets(st.integers(), max_size=3)
    ),
    max_leaves=8,
)


def _nested(depth: int) -> Any:
    data: Any = 1
    for _ in range(depth):
        data = [data]
    return data


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_DATA)
@example(data={"amount": 2**80})
@example(data={"amount": -(2**63) - 1})
@example(data=float("nan"))
@example(data="\ud800")
def test_a_tools_pause_is_recorded_only_with_data_every_store_keeps(data: Any) -> None:
    _paused_or_refused(data)


def test_data_nested_deeper_than_json_reads_is_refused() -> None:
    _paused_or_refused(_nested(1500))


def _paused_or_refused(data: Any) -> None:
    def pause(ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise InterruptError("needs a look", data)

    source = open_store("memory://")
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([call(("c1", "pause", "{}")), answer("done")]),
            tools=[Tool("pause", "Pause for a look", {"type": "object"}, pause)],
            checkpoint=CheckpointSettings(store=source, thread_id="t"),
        )
    )
    result = agent.run("go")
    state = source.state_at("t")
    if state.interrupts:
        assert result == ""
        imported = open_store("memory://")
        assert import_threads(imported, export_thread(source, "t")) == ["t"]
        assert imported.state_at("t") == state
    else:
        assert result == "done"
        (refused,) = [m for m in state.messages if m.tool_call_id == "c1"]
        assert "cannot be recorded" in refused.content
