"""A run request sent again (a client's retry after a lost response, a reload of a
stream cut short) runs its message once: the thread keeps the id the client gave each
message it ran (``Message.id``), and a message whose id it holds is not run again
(helper-220: the same request charged a card twice)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Store,
    ThreadStatus,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)
from covonaut_es.agui import create_agui_app
from covonaut_es.domain._thread import MAX_MESSAGE_ID
from covonaut_es.errors import InvalidRunInputError, ProviderServerError
from covonaut_es.messages import Message
from hostile_text import hostile_text

_OBJECT = {"type": "object"}


class Till:
    """An endpoint whose model charges the card once for each user message, and the
    charges its tool made."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.charged: list[str] = []
        self.client = TestClient(
            create_agui_app(store, self.make_config, HmacReviewerVerifier(b"k" * 32))
        )

    @staticmethod
    def respond(request: ProviderRequest) -> ProviderResponse:
        last = request.messages[-1]
        if last.role is Role.USER:
            arguments = json.dumps({"for": last.content})
            return ProviderResponse(tool_calls=(ToolCall("c1", "charge", arguments),))
        return ProviderResponse(content="Charged.")

    def charge(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        self.charged.append(args["for"])
        return "ok"

    def make_config(self, thread_id: str) -> AgentConfig:
        tool = Tool("charge", "Charge the card", _OBJECT, self.charge)
        return AgentConfig(provider=ScriptedProvider(respond=self.respond), tools=[tool])

    def post(self, message_id: Any, text: str) -> Any:
        body = {
            "threadId": "t",
            "runId": f"run-{len(self.charged)}",
            "messages": [{"id": message_id, "role": "user", "content": text}],
        }
        # Escaped, so that a lone surrogate travels as JSON's \ud800 does.
        headers = {"content-type": "application/json"}
        return self.client.post("/", content=json.dumps(body), headers=headers)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sent=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=6))
@example(sent=["a", "a"])  # helper-220: a retry after the response was lost
@example(sent=["a", "b", "a"])  # a reload sending an earlier message last
def test_each_message_a_client_sends_runs_once_however_often_it_is_sent(
    tmp_path_factory: pytest.TempPathFactory, sent: list[str]
) -> None:
    """Requests whose last user messages carry the ids ``sent``, each sent as many
    times as it appears: each id's message is stored and charged once, in the order
    first sent, and every request ends its stream as the protocol says."""
    folder = tmp_path_factory.mktemp("till")
    with open_store(f"sqlite:///{folder / 'threads.db'}") as store:
        till = Till(store)
        for message_id in sent:
            response = till.post(message_id, f"pay for {message_id}")
            assert response.status_code == 200, response.text
            assert '"type":"RUN_FINISHED"' in response.text.replace(" ", ""), response.text
        first_sent = list(dict.fromkeys(sent))
        assert till.charged == [f"pay for {message_id}" for message_id in first_sent]
        users = [m for m in store.load("t").messages if m.role is Role.USER]
        assert [m.id for m in users] == first_sent


_ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("new"), st.sampled_from(["a", "b", "msg-0", "msg-1", "msg-3", "msg-4"])),
        st.tuples(st.sampled_from(["retry", "reload"]), st.integers(0, 5)),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=_ACTIONS)
@example(actions=[("new", "a"), ("new", "msg-0")])  # the endpoint's id of "a"'s position
@example(actions=[("new", "a"), ("new", "msg-4")])  # the next user message's position
@example(actions=[("new", "a"), ("reload", 0), ("new", "msg-0"), ("reload", 1)])
def test_a_new_message_runs_whatever_its_id_and_one_sent_again_never_does(
    tmp_path_factory: pytest.TempPathFactory, actions: list[tuple[str, Any]]
) -> None:
    """A client sends new messages under ids of its own, some of the endpoint's form
    (``msg-N``, as the thread's messages are named in a snapshot); retries one under its
    id; or, after a reload, sends one again under the id a snapshot named it by. Each new
    message is charged once and keeps its id (a client id of the endpoint's form was read
    as a message sent before, and dropped unrun); nothing sent again is charged again."""
    folder = tmp_path_factory.mktemp("ids")
    with open_store(f"sqlite:///{folder / 'threads.db'}") as store:
        till = Till(store)
        sent: list[tuple[str, str]] = []  # (the client's id, the text) of each new message
        for action, value in actions:
            if action == "new":
                if value in {message_id for message_id, _ in sent}:
                    continue  # a client names each of its messages once
                sent.append((value, f"pay for message {len(sent)}"))
                message_id, text = sent[-1]
            elif not sent:
                continue
            elif action == "retry":
                message_id, text = sent[value % len(sent)]
            else:  # a reload: the thread's user message as the snapshot names it
                snapshot = till.post(*sent[-1]).text  # sent again, so charges nothing
                named = _snapshot_user_messages(snapshot)
                message_id, text = named[value % len(named)]
            response = till.post(message_id, text)
            assert response.status_code == 200, response.text
            assert '"type":"RUN_FINISHED"' in response.text.replace(" ", ""), response.text
        assert till.charged == [text for _, text in sent]
        if sent:
            users = [m for m in store.load("t").messages if m.role is Role.USER]
            assert [(m.id, m.content) for m in users] == sent


def _snapshot_user_messages(stream: str) -> list[tuple[str, str]]:
    """The (id, text) of each user message in the stream's last ``MESSAGES_SNAPSHOT``."""
    snapshots = [
        json.loads(line.removeprefix("data:"))
        for line in stream.splitlines()
        if line.startswith("data:") and '"MESSAGES_SNAPSHOT"' in line.replace(" ", "")
    ]
    messages = snapshots[-1]["messages"]
    return [(m["id"], m["content"]) for m in messages if m["role"] == "user"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message_id=hostile_text(max_size=8) | st.text(min_size=250, max_size=300))
def test_a_message_id_is_kept_as_sent_or_refused_with_nothing_recorded(
    tmp_path_factory: pytest.TempPathFactory, message_id: str
) -> None:
    """Whatever id a client gives its message: text of 1 to 256 printable characters is
    run and kept exactly; any other is refused (400; 422 for a lone surrogate, no
    text) before anything is recorded, and never echoed."""
    folder = tmp_path_factory.mktemp("ids")
    with open_store(f"sqlite:///{folder / 'threads.db'}") as store:
        till = Till(store)
        response = till.post(message_id, "pay")
        if 0 < len(message_id) <= MAX_MESSAGE_ID and message_id.isprintable():
            assert response.status_code == 200, response.text
            (user,) = [m for m in store.load("t").messages if m.role is Role.USER]
            assert user.id == message_id and till.charged == ["pay"]
        else:
            assert response.status_code in (400, 422), response.text  # 422: not text
            assert not store.exists("t") and till.charged == []
            if len(message_id) > 3:
                assert message_id not in response.text


def test_a_run_given_a_message_id_the_thread_holds_is_refused_with_nothing_recorded() -> None:
    """The library's own runs: ``run(text, message_id=)`` keeps the id with the message,
    and the same id given again is refused before anything is recorded."""
    with open_store("memory://") as store:
        provider = ScriptedProvider([ProviderResponse(content="hello")] * 2)
        settings_ = CheckpointSettings(store=store, thread_id="t")
        agent = Agent(AgentConfig(provider=provider, checkpoint=settings_))
        assert agent.run("hi", message_id="m-1") == "hello"
        version = store.load("t").version
        with pytest.raises(InvalidRunInputError, match="holds a message of id 'm-1'"):
            agent.run("hi again", message_id="m-1")
        assert store.load("t").version == version
        assert store.replay_state("t") == store.state_at("t")


def test_a_message_without_an_id_is_encoded_as_before() -> None:
    """A message given no id is encoded byte for byte as before ``Message.id``, so
    nothing stored changes, and a stored message reads with none."""
    before = b'{"role":"user","content":"hi"}'
    assert msgspec.json.encode(Message(Role.USER, "hi")) == before
    assert msgspec.json.decode(before, type=Message) == Message(Role.USER, "hi", id=None)


def test_a_request_whose_run_failed_runs_again_when_sent_again(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The provider fails the first run; the client sends the same request again, as
    it would after any error: the thread goes on from its message, once stored, and
    answers (it was read as a retry of a message already run, and reported success
    with no answer: helper-224)."""
    asked = [0]

    def respond(request: ProviderRequest) -> ProviderResponse:
        asked[0] += 1
        if asked[0] == 1:
            raise ProviderServerError("the provider answered 503")
        return ProviderResponse(content="Here is your answer.")

    folder = tmp_path_factory.mktemp("failed")
    with open_store(f"sqlite:///{folder / 'threads.db'}") as store:
        config = AgentConfig(provider=ScriptedProvider(respond=respond))
        client = TestClient(
            create_agui_app(store, lambda t: config, HmacReviewerVerifier(b"k" * 32))
        )
        body = {
            "threadId": "t",
            "runId": "r",
            "messages": [{"id": "u-1", "role": "user", "content": "hello"}],
        }
        first = client.post("/", json=body)
        assert '"RUN_ERROR"' in first.text.replace(" ", "")
        second = client.post("/", json=body)
        assert "Here is your answer." in second.text
        thread = store.load("t")
        assert thread.status is ThreadStatus.FINISHED and asked[0] == 2
        assert [m.id for m in thread.messages if m.role is Role.USER] == ["u-1"]
