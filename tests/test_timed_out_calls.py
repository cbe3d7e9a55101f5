"""A call that outran its timeout keeps its identity (call id, idempotency key,
position) when the run's commit is put after another writer's."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from covonaut_es import (
    Message,
    Role,
    Store,
    ToolCall,
)
from covonaut_es.domain import PauseKind
from covonaut_es.errors import ThreadAbandonedError, ThreadConflictError
from covonaut_es.service import ThreadService
from hanging_tool import Hanging, hanging_agent
from support import call_intents, ticking_clock

WRITES: dict[str, Callable[[ThreadService], None]] = {
    "a label": lambda service: service.label("t", "hot"),
    "a version label": lambda service: service.label("t", "v1", version=1),
    "an abandonment": lambda service: service.abandon("t", "gone"),
}


@pytest.mark.parametrize("durability", ["step", "checkpoint"])
@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_timed_out_call_keeps_its_identity_over_a_commuting_write(
    store: Store, other: Store, durability: str, write: str
) -> None:
    """Another writer's commuting write lands while the tool runs; the tool outruns its
    timeout, and the run's commit goes after the write: the call in doubt is the one
    the tool was given, with the same id, key and version of its intent."""
    tool = Hanging(lambda: WRITES[write](ThreadService(other)))
    agent = hanging_agent(store, tool, durability)
    assert agent.run("hi") == "hello"  # the thread is stored, as of its checkpoint
    try:
        try:
            assert agent.run("go") == ""
        except ThreadAbandonedError:
            assert write == "an abandonment"
        state = store.state_at("t")
        [pending] = state.open_calls
        assert (pending.call.id, pending.idempotency_key) == ("h1", tool.keys[0])
        assert [call_id for call_id, _ in call_intents(store.history("t"))] == ["h1"]
        [pause] = [p for p in state.pauses if p.kind is PauseKind.IN_DOUBT]
        assert isinstance(pause.interrupt.data, dict)
        assert pause.interrupt.data["idempotency_key"] == tool.keys[0]
        assert store.replay_state("t") == state
    finally:
        tool.release.set()
        assert tool.returned.wait(30)


@pytest.mark.parametrize("with_answer", [False, True], ids=["ToolCalled", "with its answer"])
def test_a_rebase_never_renumbers_a_call_recorded_in_doubt(
    store: Store, other: Store, with_answer: bool
) -> None:
    """A session's unsaved events hold a call and its pause in doubt (its tool started
    under the key its version gives), its intent recorded by a ``ToolCalled`` or with
    the answer that asks for it; a label lands before the commit: the commit is refused
    rather than put after the label with the call renumbered."""
    service = ThreadService(store)
    now = ticking_clock()
    with service.session("t") as session:
        session.commit()
    with service.session("t") as session:
        thread = session.thread
        hang = ToolCall("h1", "hang", "{}")
        answer = Message(Role.ASSISTANT, "", tool_calls=(hang,))
        if with_answer:
            thread.answer_turn_calling(answer, now=now())
        else:
            thread.append_message(answer, now=now())
            thread.call_tools([hang], now=now())
        thread.pause_in_doubt("h1", "ran past its timeout", now=now())
        ThreadService(other).label("t", "hot")
        with pytest.raises(ThreadConflictError):
            session.commit()
    assert store.state_at("t").open_calls == ()
    assert list(call_intents(store.history("t"))) == []
