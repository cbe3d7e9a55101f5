"""Named states: save_state / load_state on every kind of state store."""

from __future__ import annotations

import asyncio
import json
import os
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    FileStateStore,
    MemoryStateStore,
    Message,
    Role,
    SchemaVersionError,
    ScriptedProvider,
    SerializationError,
    Store,
    ThreadConflictError,
    ThreadStatus,
    ToolCall,
    ToolCallsInDoubtError,
)
from covonaut_es.domain import StateDocument
from covonaut_es.errors import ConfigurationError, InvalidStateKeyError, StateNotFoundError
from covonaut_es.store import StateStore
from covonaut_es.store._states import encode_state_document
from support import answer, call, echo_tool, review_tool, ticking_clock


@pytest.fixture(params=["memory", "files", "thread store"])
def state_store(request: pytest.FixtureRequest, tmp_path: Path, store: Store) -> StateStore:
    """One state store of each kind; "thread store" is the contract ``store`` itself."""
    if request.param == "memory":
        return MemoryStateStore()
    if request.param == "files":
        return FileStateStore(tmp_path / "states")
    return store


def make_agent(
    store: Store, state_store: StateStore | None, script: list[Any], **options: Any
) -> Agent:
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=[echo_tool(), review_tool()],
            checkpoint=CheckpointSettings(store=store, thread_id=options.pop("thread_id", "t")),
            state_store=state_store,
            clock=ticking_clock(),
            **options,
        )
    )


def interrupted_agent(store: Store, state_store: StateStore) -> Agent:
    """An agent whose thread paused on a review, with some usage recorded."""
    agent = make_agent(store, state_store, [call(("c1", "review", "{}"))])
    assert agent.run("Pay the invoice.") == ""
    return agent


def test_a_saved_state_continues_as_a_new_thread_to_a_final_answer(
    store: Store, state_store: StateStore
) -> None:
    """``load_state`` continues from the saved state in a new thread stream, which
    resumes to a final answer; the original thread is untouched."""
    source = interrupted_agent(store, state_store)
    saved = source.save_state("review-pending")
    assert saved.status is ThreadStatus.INTERRUPTED
    assert saved.thread_id == "t" and saved.version == source.state.version

    agent = make_agent(store, state_store, [answer("Paid after review.")], thread_id="other")
    state = agent.load_state("review-pending", thread_id="continued")
    assert agent.thread_id == "continued" == state.thread_id
    assert state.messages == source.state.messages
    assert state.interrupts == source.state.interrupts
    assert (state.turn, state.usage, state.status) == (1, source.state.usage, saved.status)

    agent.steer("A person approved the payment.")
    assert agent.resume() == "Paid after review."
    assert store.state_at("continued") == agent.state
    assert store.state_at("t") == source.state


def test_the_first_event_records_where_the_state_came_from(
    store: Store, state_store: StateStore
) -> None:
    """The new stream starts with StartedFromState naming the key, the source
    thread and version, and the schema version the document was stored at."""
    source = interrupted_agent(store, state_store)
    source.save_state("k")
    agent = make_agent(store, state_store, [])
    state = agent.load_state("k")
    first = store.history(state.thread_id)[0]
    assert isinstance(first, AgentThread.StartedFromState)
    assert first.key == "k" and first.stored_version == StateDocument.class_version
    assert (first.document.thread_id, first.document.version) == ("t", source.state.version)
    assert state.thread_id.startswith("k-")
    assert state.thread_id in list(store.thread_ids())


def test_a_document_without_a_version_loads_as_version_zero(store: Store) -> None:
    """A state document with no "_v" is version 0; 0 -> 1 is the identity and the
    thread continues to a final answer."""
    states = MemoryStateStore()
    interrupted_agent(store, states).save_state("k")
    unversioned = states.read_state("k")
    assert unversioned is not None
    del unversioned["_v"]
    states.write_state("old", unversioned)

    agent = make_agent(store, states, [answer("done")])
    agent.load_state("old")
    assert store.history(agent.thread_id)[0].stored_version == 0  # type: ignore[attr-defined]
    agent.steer("approved")
    assert agent.resume() == "done"


def test_a_document_newer_than_the_code_changes_nothing(store: Store) -> None:
    """A document from newer code raises SchemaVersionError naming the type and
    both versions, before the agent or the store changes."""
    states = MemoryStateStore()
    agent = interrupted_agent(store, states)
    document = agent.save_state("k")
    states.write_state("future", {**encode_state_document(document), "_v": 99})
    before = (agent.thread_id, agent.state, list(store.thread_ids()))
    with pytest.raises(
        SchemaVersionError, match=r"StateDocument data has schema version 99.*up to version"
    ):
        agent.load_state("future")
    assert (agent.thread_id, agent.state, list(store.thread_ids())) == before


def test_state_migrators_replace_the_librarys_step(store: Store) -> None:
    """``AgentConfig(state_migrators={v: fn})`` upgrades documents at version v with fn."""
    states = MemoryStateStore()
    states.write_state("legacy", {"conversation": ["hello", "hi there"]})

    def from_legacy(legacy: dict[str, Any]) -> dict[str, Any]:
        user, assistant = legacy["conversation"]
        return {
            "_v": 1,
            "thread_id": "legacy-app",
            "version": 0,
            "saved_at": "2025-01-01T00:00:00Z",
            "status": "finished",
            "messages": [
                {"role": "user", "content": user},
                {"role": "assistant", "content": assistant},
            ],
            "turn": 1,
            "usage": {},
        }

    agent = make_agent(store, states, [answer("welcome back")], state_migrators={0: from_legacy})
    state = agent.load_state("legacy")
    assert [(m.role, m.content) for m in state.messages] == [
        (Role.USER, "hello"),
        (Role.ASSISTANT, "hi there"),
    ]
    assert agent.run("Are you there?") == "welcome back"


def test_state_migrators_for_steps_that_do_not_exist_are_refused(store: Store) -> None:
    """A state migrator keyed by a version the documents never had is refused."""
    with pytest.raises(ConfigurationError, match=r"AgentConfig\.state_migrators: 9 is not a step"):
        make_agent(store, MemoryStateStore(), [], state_migrators={9: lambda d: d})


def test_saving_refuses_calls_in_doubt(store: Store) -> None:
    """A state with tool calls that may or may not have run is not saved."""
    clock = ticking_clock()
    thread = AgentThread.start("t", now=clock())
    calls = (ToolCall("c1", "echo", "{}"),)
    thread.append_message(Message(Role.ASSISTANT, tool_calls=calls), now=clock())
    thread.call_tools(calls, now=clock())
    store.save(thread)
    states = MemoryStateStore()
    with pytest.raises(ToolCallsInDoubtError, match="settle each one"):
        make_agent(store, states, []).save_state("k")
    assert states.read_state("k") is None


def test_loading_an_unknown_key_is_a_lookup_error(store: Store, state_store: StateStore) -> None:
    """load_state of a key nothing was saved under raises StateNotFoundError."""
    with pytest.raises(StateNotFoundError, match="no state is saved under key 'nothing'"):
        make_agent(store, state_store, []).load_state("nothing")


def test_named_states_need_a_state_store(store: Store) -> None:
    """save_state and load_state without AgentConfig(state_store=...) say what is missing."""
    agent = make_agent(store, None, [])
    with pytest.raises(ConfigurationError, match=r"needs AgentConfig\(state_store=...\)"):
        agent.save_state("k")
    with pytest.raises(ConfigurationError, match="state_store"):
        AgentConfig(provider=ScriptedProvider([]), state_store="states/")  # type: ignore[arg-type]


def test_loading_into_an_existing_thread_id_is_refused(store: Store) -> None:
    """load_state starts a new thread; an id already in the store is a conflict."""
    states = MemoryStateStore()
    agent = interrupted_agent(store, states)
    agent.save_state("k")
    before = store.state_at("t")
    with pytest.raises(ThreadConflictError, match="'t' already exists"):
        agent.load_state("k", thread_id="t")
    assert store.state_at("t") == before and agent.thread_id == "t"


@pytest.mark.parametrize("kind", ["memory", "files"])
@pytest.mark.parametrize(
    "key", ["", "../escape", "a/b", "a\\b", ".hidden", "-dash", "x" * 129, "nul\x00", "é", 7]
)
def test_keys_are_checked_alike_by_every_state_store(kind: str, key: Any, tmp_path: Path) -> None:
    """A key that is not 1-128 letters, digits, '.', '_' or '-' (starting with a letter
    or digit) is refused by every state store, so no key can leave a directory (the
    thread store's check runs on every back end in ``test_store_contract.py``)."""
    stores: dict[str, StateStore] = {
        "memory": MemoryStateStore(),
        "files": FileStateStore(tmp_path / "states"),
    }
    with pytest.raises(InvalidStateKeyError, match="is not allowed"):
        stores[kind].write_state(key, {"_v": 1})
    with pytest.raises(InvalidStateKeyError):
        stores[kind].read_state(key)
    assert [p.name for p in tmp_path.iterdir()] == []


_ALNUM = string.ascii_letters + string.digits
_CONCEPTS = Path(__file__).resolve().parent.parent / "docs" / "concepts.md"


def test_the_key_rule_docs_concepts_states_is_the_one_checked() -> None:
    """docs/concepts.md states the whole rule a state key is checked by, and each key it
    names as refused is (helper-189: it left out the first character's rule and that
    letters are ASCII)."""
    text = " ".join(_CONCEPTS.read_text().split())
    rule = (
        "Keys are 1 to 128 ASCII letters, digits, `.`, `_` and `-`, starting with a "
        "letter or digit, in every state store alike ("
    )
    assert rule in text
    named = text.split(rule, 1)[1].split(" are refused with `InvalidStateKeyError`", 1)[0]
    keys = named.replace(" and ", ", ").split(", ")
    assert keys == ["`_draft`", "`-v2`", "`.cfg`", "`é`"]
    for key in keys:
        with pytest.raises(InvalidStateKeyError):
            MemoryStateStore().write_state(key.strip("`"), {"_v": 1})


@settings(max_examples=50, deadline=None)
@given(
    key=st.one_of(
        st.text(st.sampled_from([*_ALNUM[::7], ".", "_", "-", "é", "٣", "/", " "]), max_size=6),
        st.builds(str.__mul__, st.sampled_from(["a", "7", "_", "é"]), st.integers(126, 130)),
    )
)
def test_a_state_key_is_allowed_exactly_as_docs_concepts_says(key: str) -> None:
    """Generated (helper-189): a key is allowed exactly when it is 1 to 128 ASCII letters,
    digits, '.', '_' and '-', the first an ASCII letter or digit, as docs/concepts.md
    says (other scripts' letters and digits, and a leading '.', '_' or '-', refused)."""
    documented = 1 <= len(key) <= 128 and key[0] in _ALNUM and set(key) <= set(_ALNUM + "._-")
    try:
        MemoryStateStore().write_state(key, {"_v": 1})
    except InvalidStateKeyError:
        assert not documented, key
    else:
        assert documented, key


def test_file_writes_are_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails before its rename leaves the old document and no temporary
    file; a successful one leaves exactly one pretty-printed JSON file."""
    states = FileStateStore(tmp_path)
    states.write_state("k", {"_v": 1, "n": 1})

    def failing_replace(source: str, target: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        states.write_state("k", {"_v": 1, "n": 2})
    monkeypatch.undo()
    assert states.read_state("k") == {"_v": 1, "n": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["k.json"]
    assert json.loads((tmp_path / "k.json").read_text()) == {"_v": 1, "n": 1}
    assert list(states.state_keys()) == ["k"]


def test_a_corrupt_state_file_is_named(tmp_path: Path) -> None:
    """A state file that is not a JSON object raises SerializationError naming it."""
    (tmp_path / "k.json").write_text("[1, 2")
    with pytest.raises(SerializationError, match=r"state file .*k\.json.* not valid JSON"):
        FileStateStore(tmp_path).read_state("k")


def test_the_thread_store_keeps_every_save_and_reads_the_last(store: Store) -> None:
    """In a thread store each save of a key is an event; reading gives the last one."""
    store.write_state("k", {"_v": 1, "n": 1})
    store.write_state("k", {"_v": 1, "n": 2})
    assert store.read_state("k") == {"_v": 1, "n": 2}
    assert store.read_state("other") is None
    assert list(store.thread_ids()) == []


def test_documents_are_copied_not_shared() -> None:
    """Changing a document after saving or loading it changes nothing stored."""
    states = MemoryStateStore()
    document: dict[str, Any] = {"_v": 1, "usage": {"input_tokens": 1}}
    states.write_state("k", document)
    document["usage"]["input_tokens"] = 99
    loaded = states.read_state("k")
    assert loaded is not None
    loaded["usage"] = None
    assert states.read_state("k") == {"_v": 1, "usage": {"input_tokens": 1}}


def test_the_async_save_and_load_of_a_state_are_their_blocking_twins(
    store: Store, state_store: StateStore
) -> None:
    """``asave_state`` and ``aload_state`` save and continue from a state as
    ``save_state`` and ``load_state`` do, from an event loop."""
    source = interrupted_agent(store, state_store)
    agent = make_agent(store, state_store, [answer("Paid after review.")], thread_id="other")

    async def save_then_load() -> tuple[StateDocument, Any]:
        saved = await source.asave_state("k")
        return saved, await agent.aload_state("k", thread_id="continued")

    saved, state = asyncio.run(save_then_load())
    assert (saved.thread_id, saved.version) == ("t", source.state.version)
    assert state.thread_id == "continued" and state.messages == source.state.messages
    assert agent.resume() == "Paid after review."
